// Pipeline states (wds/state.hpp, wds/streams.hpp): what restore() and merge_states() read. A
// state is data a job may get from elsewhere (a data service trainer hands its producer one, a
// checkpoint file is edited by hand), so any bytes must end in a wds::Error, never a crash, an
// allocation sized by a number in the state, or a file outside the pipeline's list opened.
//
// Input: the state text. Its checksum is fixed up first (wds::reseal_state), so that mutations
// reach the parser and the stages' checks behind it rather than stopping at the checksum; the
// input as it is (its checksum mostly wrong) is also restored once, for the verification. Restored
// into a canonical-streams pipeline (4 streams, shuffle buffers) and into a split pipeline with
// shard and sample shuffles, both over 4 tiny shards written once to /tmp/wds-fuzz-state; then up
// to 8 samples are read. merge_states() gets it too, alone and twice (a stream given twice is an
// error). Seeds: fuzz/corpus/state/ (states of both pipelines, saved by `wds ls`; see
// fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "wds/shardlists.hpp"
#include "wds/sink.hpp"
#include "wds/streams.hpp"
#include "wds/tar_writer.hpp"
#include "wds/webdataset.hpp"

namespace {

const std::vector<std::string>& shards() {
  static const std::vector<std::string> urls = [] {
    const std::string dir = "/tmp/wds-fuzz-state";
    std::filesystem::create_directories(dir);
    std::vector<std::string> out;
    for (int s = 0; s < 4; ++s) {
      std::string path = dir + "/shard-" + std::to_string(s) + ".tar";
      if (!std::filesystem::exists(path)) {
        wds::TarWriter tar(wds::open_sink(path), {.mtime = 0});
        for (int k = 0; k < 5; ++k) {
          wds::Sample sample("s" + std::to_string(s) + "_" + std::to_string(k));
          sample.add("cls", wds::Bytes::copy_of(std::to_string(k)));
          tar.write(sample);
        }
        tar.close();
      }
      out.push_back(path);
    }
    return out;
  }();
  return urls;
}

template <class P>
void restore_and_read(P pipeline, const std::string& state) {
  try {
    pipeline.restore(state);
    pipeline.begin_pass();
    for (int i = 0; i < 8 && pipeline.next(); ++i) {
    }
  } catch (const wds::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(wds_fuzz::as_text(data, size));
  std::string state = input;
  try {
    state = wds::reseal_state(input);
  } catch (const wds::Error&) {
    // No state header: restored as it is (and refused at once).
  }
  wds::WebDatasetOptions streams;
  streams.seed = 1;
  streams.distributed.rank = 0;
  streams.distributed.world_size = 1;
  streams.shuffle_shards = true;
  streams.streams = 4;
  streams.stream_shuffle = 2;
  restore_and_read(wds::WebDataset(shards(), streams).with_epoch(10), state);
  if (input != state) restore_and_read(wds::WebDataset(shards(), streams).with_epoch(10), input);
  wds::WebDatasetOptions split;
  split.seed = 1;
  split.distributed.rank = 0;
  split.distributed.world_size = 1;
  split.shuffle_shards = true;
  split.shard_shuffle = 2;
  restore_and_read(wds::WebDataset(shards(), split).shuffle(3, 1), state);
  try {
    (void)wds::merge_states({state});
    (void)wds::merge_states({state, state});
  } catch (const wds::Error&) {
  }
  return 0;
}
