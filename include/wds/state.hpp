// wds/state.hpp: PipelineState, where a pipeline is in its data, as a small serialisable value.
//
//   std::string checkpoint = dataset.state();   // store it with the model's checkpoint
//   ...                                          // new process, same configuration:
//   dataset.restore(checkpoint);
//   for (wds::Sample& s : dataset) ...          // exactly the samples not yet seen, in order
//
// Each stage writes the few values it cannot recompute (positions, RNG states, the locations of
// buffered samples) in chain order, and reads them back in the same order. The text form is
// "wds-state-2" followed by values separated by spaces: numbers as u<decimal>, strings as
// s<byte count>:<bytes>; then a checksum, " c" and the CRC-32 of all before it as 8 lowercase
// hex digits. It is meant to be stored and handed back, not edited.
//
// Integrity: a state whose checksum does not match (a truncated, edited or badly copied file)
// is refused, as damaged, before any value of it is used. States nest (a Loader's holds its
// workers' pipeline states, which hold their streams'): each is sealed when written, and only
// the outermost is verified on restore, which covers the bytes of those inside it. States of
// earlier versions ("wds-state-1", no checksum) are still restored; beyond the checksum, each
// stage checks the numbers it reads against what its configuration can hold (see restore()).
//
// A state names shards (where a pass was, where buffered samples are). Restoring one, a pipeline
// opens only shards of its own list: a state naming another URL (a hostile data service
// trainer's, say a pipe: command) is refused before anything is opened.
//
// A pipeline's state starts with its Configuration (below): what it was built with. restore()
// compares it with its own and refuses a state of another configuration, naming what differs.
//
// Errors: restoring malformed or mismatched state is an invalid_argument Error.
// Thread safety: a value type.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <vector>

namespace wds {

struct ShardOpening;  // wds/tar_samples.hpp

// The header of the states written now, and of the earlier ones still read.
inline constexpr std::string_view kStateHeader = "wds-state-2";
inline constexpr std::string_view kStateHeaderUnsealed = "wds-state-1";

// Whether StateReader computes the checksum: `verify` for a state from outside; `verified` for
// a state nested in one that was verified (its bytes are covered by that checksum).
enum class StateCheck { verify, verified };

class StateWriter {
 public:
  StateWriter() : text_(kStateHeader) {}
  void put(std::uint64_t value) {
    text_ += " u";
    text_ += std::to_string(value);
  }
  void put(std::string_view value) {
    text_ += " s";
    text_ += std::to_string(value.size());
    text_ += ':';
    text_ += value;
  }
  void put(bool value) { put(static_cast<std::uint64_t>(value)); }
  // The state: the values, sealed with their checksum.
  std::string str() const;

 private:
  std::string text_;
};

class StateReader {
 public:
  // Throws an invalid_argument Error if `text` does not start with a state header, or if its
  // checksum is missing or (with StateCheck::verify) does not match: the state is damaged.
  explicit StateReader(std::string_view text, StateCheck check = StateCheck::verify);
  std::uint64_t get_u64();
  std::string get_string();
  // A flag: 0 or 1, anything else is malformed.
  bool get_bool();
  bool at_end() const noexcept { return pos_ >= text_.size(); }
  // How the tar_samples stage opens shards, left for the stages restored after it, so that
  // samples buffered downstream are read again the same way (null: default options).
  void set_shard_opening(std::shared_ptr<const ShardOpening> how) noexcept {
    shard_opening_ = std::move(how);
  }
  const ShardOpening* shard_opening() const noexcept { return shard_opening_.get(); }
  // A shard list of the pipeline, added by each shard source (or splitter) as it is restored,
  // before anything downstream; check_shard_url() then refuses, as an invalid_argument Error
  // naming it, a URL the state names that is in none of them (a mix has several). Without a
  // list (a custom URL source) every URL is accepted.
  void add_shard_urls(std::shared_ptr<const std::vector<std::string>> urls);
  void check_shard_url(std::string_view url);
  // Strings restored between the shard source and tar_samples (a shard shuffle's buffer) are
  // URLs and checked as such; tar_samples calls shard_stages_done(), after which they are data.
  void check_buffered_string(std::string_view s) {
    if (in_shard_stages_) {
      check_shard_url(s);
      check_handed_out(s);
    }
  }
  // The URLs a shard source (ShardList, a splitter, a stream's shards) has handed out in this
  // pass, as of its restored position (views into its list), and what to call it: the shards
  // buffered or read downstream (a shard shuffle's, tar_samples') must be among them. A position
  // moved back (shards read again: samples repeated) is then refused. The nearest source
  // upstream counts; a stage that hands out URLs of another pass or source (repeat, mix) calls
  // forget_handed_out().
  void set_handed_out(std::vector<std::string_view> urls, std::string source);
  void forget_handed_out() noexcept { handed_out_.reset(); }
  void check_handed_out(std::string_view url);
  void shard_stages_done() noexcept { in_shard_stages_ = false; }
  // From here on, no check: a stage that cannot name all the shards the rest of the state may
  // name (a mix with an ended source) says so.
  void trust_any_shard() noexcept { trust_any_ = true; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  std::string_view text_;  // without the checksum
  std::size_t pos_ = 0;
  std::vector<std::shared_ptr<const std::vector<std::string>>> shard_urls_;
  std::optional<std::unordered_set<std::string_view>> shard_index_;  // of shard_urls_, on demand
  bool in_shard_stages_ = false;
  bool trust_any_ = false;
  struct HandedOut {
    std::unordered_set<std::string_view> urls;
    std::string source;  // "ShardList at position 4"
  };
  std::optional<HandedOut> handed_out_;
  std::shared_ptr<const ShardOpening> shard_opening_;
};

// `text` (a state as written: "wds-state-1" without checksum, or "wds-state-2" ending with one,
// right or wrong) as a "wds-state-2" state with the checksum of its contents. For tests and
// fuzzers that edit states on purpose, the way a hostile or buggy writer could: what the stages
// then check does not rely on the checksum.
std::string reseal_state(std::string_view text);

// What a pipeline was built with, as named values, stage by stage in chain order: seed, shard
// list, shuffle sizes, policies, world size. Pipeline::state() records it and restore() refuses
// a state recorded with another, naming each value that differs; Pipeline::fingerprint() hashes
// it, so that the ranks of a job can compare theirs with one collective and stop at once when
// one was started differently.
//
// Values are of three kinds: the job's (compared on restore and hashed), its size (world size
// and workers: hashed, and compared on restore unless the pipeline is elastic, as canonical
// streams are) and the consumer's (rank and worker: compared on restore unless elastic, never
// hashed, since every rank has its own).
class Configuration {
 public:
  enum class Kind : char { job = 'j', size = 's', consumer = 'c' };
  // The values after this belong to the next stage, called `name`.
  void stage(std::string_view name);
  void add(std::string_view key, std::string_view value, Kind kind = Kind::job);
  void add(std::string_view key, std::uint64_t value, Kind kind = Kind::job);
  // A list (shard URLs), as its length and a hash of its items in order.
  void add_list(std::string_view key, const std::vector<std::string>& items);
  // The pipeline may be restored on another world size and number of workers.
  void set_elastic() noexcept { elastic_ = true; }
  bool elastic() const noexcept { return elastic_; }

  // One line per value: "<kind> <stage number>:<stage>.<key>=<value>".
  std::string text() const;
  // FNV-1a of the job and size values: equal on every rank of a job started the same way.
  std::uint64_t fingerprint() const;
  // The values of `saved` (a text()) that differ from this configuration's, one phrase each
  // ("shuffle (stage 4) bufsize: saved 1000, this pipeline 500"); empty if they fit.
  std::vector<std::string> differences(std::string_view saved) const;

 private:
  struct Value {
    Kind kind;
    std::string key;  // "<stage number>:<stage>.<key>"
    std::string value;
  };
  std::vector<Value> values_;
  std::string stage_ = "pipeline";
  std::size_t stage_number_ = 0;
  bool elastic_ = false;
};

// How items buffered in a stage (a shuffle buffer) are saved: strings and integers as they
// are; samples by location (wds/tar_samples.hpp), to be read again on restore.
inline void save_item(StateWriter& out, const std::string& item) {
  out.put(item);
}
// A string buffered between the shard source and tar_samples is a shard URL (a shard shuffle's
// buffer): it must be one of the list's.
inline void load_item(StateReader& in, std::string& item) {
  item = in.get_string();
  in.check_buffered_string(item);
}
template <class I>
requires std::is_integral_v<I>
void save_item(StateWriter& out, I item) {
  out.put(static_cast<std::uint64_t>(item));
}
template <class I>
requires std::is_integral_v<I>
void load_item(StateReader& in, I& item) {
  item = static_cast<I>(in.get_u64());
}

}  // namespace wds
