// Scenario: a training job that loads with worker threads is killed and restarted from the
// loader's checkpoint, at any point: mid-epoch, right after an epoch's last batch, right after a
// worker's last (partial) batch of its data. The restored loader must hand out exactly what the
// uninterrupted one would have: prefix + resumed == uninterrupted (ordered: item for item;
// unordered: each worker's own sequence), with the same epoch boundaries as Pipeline.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>

#include "tests/support/fixtures.hpp"
#include "tests/support/resume.hpp"
#include "wds/decode.hpp"
#include "wds/image.hpp"
#include "wds/loader.hpp"
#include "wds/transforms.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// Tags each sample with the worker that read it: "w1|key/cls". Saves and restores through.
class TagStream final : public StreamWrapper<Sample, std::string> {
 public:
  explicit TagStream(StreamPtr<Sample> up) : StreamWrapper(std::move(up), "tag") {}
  void start(const PassContext& ctx) override {
    upstream().start(ctx);
    tag_ = "w" + std::to_string(ctx.worker) + "|";
  }
  std::optional<std::string> next() override {
    std::optional<Sample> s = upstream().next();
    if (!s) return std::nullopt;
    return tag_ + s->key() + "/" + std::string(s->at("cls").str());
  }
  void settings(Configuration&) const override {}

 private:
  std::string tag_;
};

Pipeline<std::string> tagged(const Pipeline<Sample>& p) {
  return p.then([](StreamPtr<Sample> up) -> StreamPtr<std::string> {
    return std::make_unique<TagStream>(std::move(up));
  });
}

struct Case {
  std::function<Pipeline<std::vector<std::string>>()> make;
  LoaderOptions<std::vector<std::string>> options;
  int passes = 2;
};

using Batch = std::vector<std::string>;

// Every batch of `passes` passes, flattened into "item" strings with a pass marker.
Strings run_all(Loader<Batch>& loader, int passes, std::size_t stop_after, bool* stopped,
                int* stopped_in) {
  Strings out;
  std::size_t n = 0;
  for (int pass = 0; pass < passes; ++pass) {
    for (Batch& b : loader) {
      std::string joined;
      for (const std::string& s : b) joined += s + ",";
      out.push_back(joined);
      if (++n == stop_after) {
        *stopped = true;
        *stopped_in = pass;
        return out;
      }
    }
    out.push_back("--end of pass--");
  }
  return out;
}

Strings uninterrupted(const Case& s) {
  Loader<Batch> loader(s.make(), s.options);
  bool stopped = false;
  int in = 0;
  return run_all(loader, s.passes, 0, &stopped, &in);
}

// Stops after `cut` batches, saves, restores in a new loader and runs the remaining passes.
Strings interrupted(const Case& s, std::size_t cut) {
  std::string state;
  Strings out;
  bool stopped = false;
  int pass = 0;
  {
    Loader<Batch> loader(s.make(), s.options);
    out = run_all(loader, s.passes, cut, &stopped, &pass);
    state = loader.state();
  }
  if (!stopped) return out;
  Loader<Batch> loader(s.make(), s.options);
  loader.restore(state);
  for (; pass < s.passes; ++pass) {
    for (Batch& b : loader) {
      std::string joined;
      for (const std::string& x : b) joined += x + ",";
      out.push_back(joined);
    }
    out.push_back("--end of pass--");
  }
  return out;
}

// Unordered loaders interleave workers by timing; each worker's own batches keep their order.
std::map<std::string, Strings> per_worker(const Strings& run) {
  std::map<std::string, Strings> out;
  for (const std::string& b : run) {
    if (b.rfind("--", 0) == 0) continue;
    out[b.substr(0, b.find('|'))].push_back(b);
  }
  return out;
}

class LoaderResume : public ::testing::Test {
 protected:
  void SetUp() override {
    // Shards of different sizes (3 to 8 samples), so workers end their data at different times
    // and batches of 3 end partial.
    for (int s = 0; s < 6; ++s) {
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 3 + s; ++i) {
          w.write(test::make_sample("s" + std::to_string(s) + "_" + std::to_string(i),
                                    {{"cls", std::to_string(i)}}));
        }
      });
      urls_.push_back(dir_.write("p" + std::to_string(s) + ".tar", tar));
    }
  }

  WebDatasetOptions seeded(bool resampled) const {
    WebDatasetOptions o;
    o.seed = 11;
    o.shuffle_shards = !resampled;  // resampled shards are drawn per rank and worker instead
    o.resampled = resampled;
    o.distributed.rank = 0;
    o.distributed.world_size = 1;
    return o;
  }

  void check_every_cut(const Case& s) {
    const Strings reference = uninterrupted(s);
    std::size_t batches = 0;
    for (const std::string& b : reference) batches += b.rfind("--", 0) != 0;
    ASSERT_GT(batches, 4u);
    // Each worker's own stream, from an ordered run (which worker an unordered loader takes
    // from follows timing; in a run of a few milliseconds one worker may not run at all), and
    // with with_epoch long enough that one worker could have filled every epoch below.
    Case longer = s;
    longer.options.ordered = true;
    if (s.options.epoch_length) longer.passes = s.passes * s.options.workers + 2;
    auto streams = per_worker(uninterrupted(longer));
    for (std::size_t cut = 1; cut <= batches; ++cut) {
      const Strings got = interrupted(s, cut);
      if (s.options.ordered) {
        ASSERT_EQ(got, reference) << "cut after " << cut << " batches";
      } else {
        // Unordered: the interleaving of workers follows timing (and with with_epoch, so does
        // how far each worker gets), but each worker's own sequence is fixed: it must be a
        // prefix of that worker's stream, and the totals must match.
        auto mine = per_worker(got);
        std::size_t total = 0;
        for (auto& [worker, seq] : mine) {
          total += seq.size();
          const Strings& stream = streams[worker];
          ASSERT_LE(seq.size(), stream.size()) << worker << ", cut after " << cut;
          ASSERT_TRUE(std::equal(seq.begin(), seq.end(), stream.begin()))
              << worker << ", cut after " << cut;
          if (!s.options.epoch_length) {
            ASSERT_EQ(seq.size(), stream.size()) << worker << ", cut after " << cut;
          }
        }
        ASSERT_EQ(total, batches) << "cut after " << cut;
      }
    }
  }

  test::TempDir dir_;
  Strings urls_;
};

TEST_F(LoaderResume, EveryCutOrderedAndUnorderedOneToThreeWorkersFinite) {
  for (int workers = 1; workers <= 3; ++workers) {
    for (bool ordered : {true, false}) {
      Case s;
      s.make = [&] { return tagged(WebDataset(urls_, seeded(false)).shuffle(4)) | batched(3); };
      s.options = {.workers = workers, .prefetch = 2, .ordered = ordered, .resumable = true};
      s.passes = 2;
      SCOPED_TRACE("workers " + std::to_string(workers) + (ordered ? " ordered" : ""));
      check_every_cut(s);
    }
  }
}

TEST_F(LoaderResume, EveryCutWithEpochFiniteData) {
  for (int workers = 1; workers <= 3; ++workers) {
    Case s;
    s.make = [&] { return tagged(WebDataset(urls_, seeded(false)).shuffle(4)) | batched(3); };
    // 7 batches per epoch, 4 epochs: epochs end mid-data and the data ends mid-epoch.
    s.options = {
        .workers = workers, .prefetch = 2, .ordered = true, .resumable = true, .epoch_length = 7};
    s.passes = 4;
    SCOPED_TRACE("workers " + std::to_string(workers));
    check_every_cut(s);
  }
}

TEST_F(LoaderResume, EveryCutWithEpochResampled) {
  for (int workers = 1; workers <= 3; ++workers) {
    Case s;
    s.make = [&] { return tagged(WebDataset(urls_, seeded(true)).shuffle(5)) | batched(2); };
    s.options = {
        .workers = workers, .prefetch = 3, .ordered = true, .resumable = true, .epoch_length = 6};
    s.passes = 3;
    SCOPED_TRACE("workers " + std::to_string(workers));
    check_every_cut(s);
  }
}

TEST_F(LoaderResume, EveryCutUnorderedWithEpochLosesAndRepeatsNothing) {
  Case s;
  s.make = [&] { return tagged(WebDataset(urls_, seeded(false)).shuffle(4)) | batched(3); };
  s.options = {.workers = 2, .prefetch = 2, .ordered = false, .resumable = true, .epoch_length = 5};
  s.passes = 3;
  check_every_cut(s);
}

TEST_F(LoaderResume, StateFromAnotherWorkerCountIsRefused) {
  auto make = [&] { return tagged(WebDataset(urls_, seeded(false))) | batched(3); };
  Loader<Batch> two(make(), {.workers = 2, .resumable = true});
  for (Batch& b : two) {
    (void)b;
    break;
  }
  const std::string state = two.state();
  Loader<Batch> three(make(), {.workers = 3, .resumable = true});
  std::string what;
  EXPECT_EQ(test::error_code([&] { three.restore(state); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("2 workers"), std::string::npos) << what;
  EXPECT_EQ(test::error_code([&] { three.restore("wds-state-1 u5"); }),
            ErrorCode::invalid_argument);
}

// The pipeline of the issue that found the two defects: JPEG shards, a sample shuffle, decode,
// to_tuple, batches of 8; 2 ordered workers; 10 batches per epoch; 4 epochs.
class LoaderResumeJpeg : public ::testing::Test {
 protected:
  void SetUp() override {
    Tensor img(DType::uint8, {8, 8, 3});
    for (int s = 0; s < 6; ++s) {
      std::string tar = test::make_tar([&](TarWriter& w) {
        for (int i = 0; i < 50; ++i) {
          auto px = img.values<std::uint8_t>();
          for (std::size_t k = 0; k < px.size(); ++k) px[k] = static_cast<std::uint8_t>(k * s + i);
          Sample sample("s" + std::to_string(s) + "_" + std::to_string(i));
          sample.add("jpg", encode_image(img, "jpg"));
          sample.add("cls", Bytes::copy_of(std::to_string(i % 10)));
          w.write(sample);
        }
      });
      urls_.push_back(dir_.write("j" + std::to_string(s) + ".tar", tar));
    }
  }

  Pipeline<Tuple> make() const {
    WebDatasetOptions o;
    o.seed = 3;
    o.shuffle_shards = true;
    o.distributed.rank = 0;
    o.distributed.world_size = 1;
    return WebDataset(urls_, o).shuffle(200) | decode("rgb8") | to_tuple("__key__", "jpg", "cls") |
           batched(8);
  }
  static LoaderOptions<Tuple> options() {
    return {.workers = 2, .prefetch = 2, .ordered = true, .resumable = true, .epoch_length = 10};
  }
  static std::string keys(const Tuple& batch) {
    std::string out;
    for (const Value& k : batch[0].get<Tuple>()) out += k.get<std::string>() + " ";
    EXPECT_EQ(batch[1].get<Tensor>().dim(0),
              static_cast<std::int64_t>(batch[0].get<Tuple>().size()));
    return out;
  }

  // Batches per epoch of an uninterrupted run, and of a run cut after `cut` batches.
  std::vector<Strings> run(std::size_t cut) const {
    return test::loader_epochs<Tuple>([this] { return make(); }, options(), 4, cut, keys);
  }

  test::TempDir dir_;
  Strings urls_;
};

TEST_F(LoaderResumeJpeg, RestoredAfterAWorkersLastPartialBatchThatWorkerGoesOn) {
  const std::vector<Strings> reference = run(0);
  ASSERT_EQ(reference.size(), 4u);
  // The cuts right after a worker's last, partial batch of its data (each worker reads 150
  // samples: 18 batches of 8, then one of 6): before the fix, that worker never produced again
  // after restore() and every second batch went missing.
  std::vector<std::size_t> partial;
  std::size_t n = 0;
  for (const Strings& e : reference) {
    ASSERT_EQ(e.size(), 10u);
    for (const std::string& b : e) {
      ++n;
      if (std::count(b.begin(), b.end(), ' ') < 8) partial.push_back(n);
    }
  }
  ASSERT_GE(partial.size(), 2u);
  for (std::size_t cut : partial) EXPECT_EQ(run(cut), reference) << "cut after " << cut;
}

TEST_F(LoaderResumeJpeg, SavedAfterAnEpochsLastBatchTheRestoredEpochIsEmpty) {
  const std::vector<Strings> reference = run(0);
  // Saved right after the last batch of an epoch: the restored loader finishes that epoch with
  // nothing more, as Pipeline does, and plays the remaining epochs only (not one extra).
  for (std::size_t cut : {std::size_t{10}, std::size_t{20}, std::size_t{30}}) {
    std::vector<Strings> got = run(cut);
    std::size_t total = 0;
    for (const Strings& e : got) total += e.size();
    EXPECT_EQ(total, 40u) << "cut " << cut;
    EXPECT_EQ(got, reference) << "cut " << cut;
  }
}

TEST_F(LoaderResumeJpeg, EveryCut) {
  const std::vector<Strings> reference = run(0);
  for (std::size_t cut = 1; cut < 40; ++cut) ASSERT_EQ(run(cut), reference) << "cut " << cut;
}

}  // namespace
}  // namespace wds
