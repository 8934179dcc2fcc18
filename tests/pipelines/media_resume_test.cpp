// Audio windows and video clips through the whole pipeline: decode() followed by batched() on a
// Loader, random starts drawn per sample, resumed at every cut: a resumed run must give the same
// clips and windows, batch for batch, and another epoch other ones. Clips are made at run time
// by `ffmpeg`.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/support/ffmpeg.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/resume.hpp"
#include "wds/decode.hpp"
#include "wds/loader.hpp"
#include "wds/tar_writer.hpp"
#include "wds/transforms.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

class MediaResume : public test::FfmpegTest {
 protected:
  void SetUp() override {
    test::FfmpegTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // 2 shards x 6 samples, each a 3 s video (its own pattern) and a 3 s tone.
    for (int s = 0; s < 2; ++s) {
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 6; ++i) {
          const std::string key = "m" + std::to_string(s) + "_" + std::to_string(i);
          Sample sample(key);
          sample.add("mp4", Bytes::copy_of(make("testsrc2=size=64x48:rate=10,hue=h=" +
                                                    std::to_string(s * 60 + i * 10),
                                                "-c:v libx264 -g 10 -pix_fmt yuv420p", "mp4")));
          sample.add("wav", Bytes::copy_of(make("sine=frequency=" + std::to_string(300 + 50 * i) +
                                                    ":sample_rate=8000",
                                                "-c:a pcm_s16le", "wav")));
          w.write(sample);
        }
      });
      urls_.push_back(dir_.write("media" + std::to_string(s) + ".tar", tar));
    }
  }

  std::string make(const std::string& source, const std::string& codec, const std::string& ext) {
    const std::string path = dir_.file("clip." + ext);
    const std::string cmd = "ffmpeg -nostdin -loglevel error -y -f lavfi -i '" + source +
                            "' -t 3 " + codec + " " + path;
    EXPECT_EQ(test::run_command(cmd).status, 0) << cmd;
    return test::read_file(path);
  }

  Pipeline<Tuple> make_pipeline() const {
    WebDatasetOptions o;
    o.seed = 5;
    o.shuffle_shards = true;
    o.distributed.rank = 0;
    o.distributed.world_size = 1;
    DecodeOptions d;
    d.video = {.frames = 4, .fps = 5, .width = 32, .height = 24, .random_offset = true};
    d.audio = {.duration = 0.5, .random_offset = true};
    return WebDataset(urls_, o).shuffle(6) | decode({"video", "audio"}, d) |
           to_tuple("__key__", "mp4", "wav") | batched(3);
  }

  // A batch as text: per row the key and a checksum of its clip and of its window.
  static std::string describe(const Tuple& batch) {
    const Tensor& clips = batch[1].get<Tensor>();
    EXPECT_EQ(clips.shape(), (Tensor::Shape{3, 4, 24, 32, 3}));
    const Tuple& keys = batch[0].get<Tuple>();
    const Tuple& audio = batch[2].get<Tuple>();
    std::string out;
    for (std::size_t r = 0; r < keys.size(); ++r) {
      std::uint64_t sum = 0;
      for (std::uint8_t v : clips[static_cast<std::int64_t>(r)].values<std::uint8_t>()) {
        sum = sum * 31 + v;
      }
      const Tensor& wave = audio[r].get<Tuple>()[0].get<Tensor>();
      double energy = 0;
      for (float v : wave.values<float>()) energy += v * (1 + energy);
      out += keys[r].get<std::string>() + ":" + std::to_string(sum) + ":" +
             std::to_string(wave.dim(1)) + ":" + std::to_string(energy) + " ";
    }
    return out;
  }

  // Batches per epoch (2 epochs of 4 batches), uninterrupted (cut 0) or cut after `cut`.
  std::vector<Strings> run(std::size_t cut) const {
    const LoaderOptions<Tuple> options{
        .workers = 2, .prefetch = 1, .ordered = true, .resumable = true};
    return test::loader_epochs<Tuple>([this] { return make_pipeline(); }, options, 2, cut,
                                      describe);
  }

  test::TempDir dir_;
  Strings urls_;
};

TEST_F(MediaResume, EveryCutGivesTheSameClipsAndWindows) {
  const std::vector<Strings> reference = run(0);
  ASSERT_EQ(reference.size(), 2u);
  ASSERT_EQ(reference[0].size(), 4u);
  for (std::size_t cut = 1; cut < 8; ++cut) EXPECT_EQ(run(cut), reference) << "cut " << cut;
}

TEST_F(MediaResume, AnotherEpochDrawsOtherStarts) {
  const std::vector<Strings> reference = run(0);
  // The same keys come back in epoch 1 (in another order); a key's clip or window differs.
  auto by_key = [](const Strings& batches) {
    std::map<std::string, std::string> out;
    for (const std::string& b : batches) {
      std::size_t i = 0;
      while (i < b.size()) {
        const std::size_t end = b.find(' ', i);
        const std::string row = b.substr(i, end - i);
        out[row.substr(0, row.find(':'))] = row.substr(row.find(':'));
        i = end + 1;
      }
    }
    return out;
  };
  const auto first = by_key(reference[0]);
  const auto second = by_key(reference[1]);
  ASSERT_EQ(first.size(), 12u);
  int differ = 0;
  for (const auto& [key, clip] : first) differ += second.at(key) != clip;
  EXPECT_GE(differ, 10) << "random starts should depend on the epoch";
}

}  // namespace
}  // namespace wds
