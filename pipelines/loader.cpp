// The parts of the Loader that do not depend on its item type: its resume state.
#include "wds/loader.hpp"

namespace wds::detail {

namespace {
constexpr std::string_view kLoaderTag = "loader-2";
constexpr std::string_view kSnapshotTag = "worker-1";

[[noreturn]] void mismatch(const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "", "", "Loader: " + what);
}
}  // namespace

std::string LoaderState::encode() const {
  StateWriter out;
  out.put(kLoaderTag);
  out.put(static_cast<std::uint64_t>(workers.size()));
  out.put(turn);
  out.put(epoch_yielded);
  out.put(in_pass);
  for (const WorkerPosition& w : workers) {
    out.put(std::string_view(w.snapshot ? *w.snapshot : std::string()));
    out.put(w.skip);
    out.put(w.finished);
  }
  return out.str();
}

LoaderState LoaderState::decode(std::string_view text, std::size_t workers) {
  StateReader in(text);
  if (in.get_string() != kLoaderTag) {
    mismatch("the state was not saved by a Loader of this version (Loader::state())");
  }
  const std::uint64_t n = in.get_u64();
  if (n != workers) {
    mismatch("the state was saved by a loader with " + std::to_string(n) +
             " workers, this one has " + std::to_string(workers));
  }
  LoaderState s;
  s.turn = in.get_u64();
  s.epoch_yielded = in.get_u64();
  s.in_pass = in.get_bool();
  for (std::uint64_t i = 0; i < n; ++i) {
    WorkerPosition w;
    w.snapshot = std::make_shared<const std::string>(in.get_string());
    w.skip = in.get_u64();
    w.finished = in.get_bool();
    s.workers.push_back(std::move(w));
  }
  if (!in.at_end()) mismatch("the state has trailing values");
  return s;
}

std::string encode_snapshot(std::string_view pipeline_state, bool yielded) {
  StateWriter out;
  out.put(kSnapshotTag);
  out.put(yielded);
  out.put(pipeline_state);
  return out.str();
}

std::pair<std::string, bool> decode_snapshot(std::string_view snapshot) {
  StateReader in(snapshot);
  if (in.get_string() != kSnapshotTag) mismatch("a worker's position is malformed");
  const bool yielded = in.get_bool();
  std::string state = in.get_string();
  if (!in.at_end()) mismatch("a worker's position has trailing values");
  return {std::move(state), yielded};
}

}  // namespace wds::detail
