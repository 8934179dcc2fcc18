// wds/tar_samples.hpp: tar shards to samples, grouped exactly as WebDataset groups them.
//
//   wds::TarSamples samples(wds::expand_urls("/data/shard-{000000..000099}.tar"));
//   while (std::optional<wds::Sample> s = samples.next()) train_on(*s);
//
// The rules (WebDataset's tar_file_expander + group_by_keys):
// - Only regular files count; directories, links and devices are skipped.
// - A member name splits into key and extension at the first dot of its last path component:
//   "dir.v2/img.seg.png" is key "dir.v2/img", extension "seg.png". The extension is lowercased,
//   the key is not. A name with no such dot ("README", ".hidden") is skipped. As in WebDataset,
//   "dir/.hidden.txt" is key "dir/", extension "hidden.txt".
// - A top-level name starting and ending with "__" ("__meta__"), and anything under a top-level
//   "__x__/" directory, is skipped.
// - Consecutive members with the same key form one sample; a key that comes back later starts a
//   new sample. A sample never spans two shards.
// - An empty member is a field with empty bytes.
// - The same extension twice in one sample (after lowercasing) is a corrupt_data error; if the
//   handler continues, the later member is dropped and the first kept. So is an extension that
//   names a sample's metadata ("x.__key__", "x.__url__", "x.__local_path__"): WebDataset's
//   sample dict holds those beside the fields; the member is dropped.
// - A shard that fails midway (truncated, bad header, I/O error): the samples completed before
//   the failure are delivered, the sample being built is dropped (never handed on half-filled),
//   and the error, naming the URL, member and the dropped sample, goes to the handler. If it
//   continues, the next shard starts. An empty (0-byte) file, non-tar data and an archive
//   without its end-of-archive blocks (see TarReader) are errors; a tar holding no members
//   yields no samples and no error.
//
// Interleaving (TarSamplesOptions::interleave = k, default 1): up to k shards are open at once,
// in k slots, and samples are taken from the slots round-robin, one each: slot 0, 1, ..., k - 1,
// 0, ... At its turn, a slot with no open shard takes the next URL (so the first k shards fill
// slots 0 to k - 1 in URL order); when its shard ends (or fails, if the handler continues) the
// slot takes the next URL at once and gives this turn's sample from it. A slot that finds no URL
// is passed over, and the stream ends when every slot is. Shards A (a0 a1 a2), B (b0), C (c0 c1),
// D (d0 d1) with k = 3 give: a0 b0 c0 a1 d0 c1 a2 d1. The order depends only on the URLs and the
// shards' contents (and which shards fail), so it is the same on every run and after resume.
// With k = 1 this is reading the shards one after another.
//
// Memory: one sample (the one being built) plus the source's buffer, whatever the shard's size
// (with interleave, per open shard: k of them, and read_ahead sources beyond; with a join of c
// sets, c sources for each of those: (k + read_ahead) x c).
// A member's declared size is allocated up front only when the reader verified it (see
// TarEntry::size_verified); otherwise its buffer grows as the bytes arrive, up to
// TarReaderOptions::max_member_size (4 GiB by default). Running out of memory is an
// unavailable Error naming the URL and member, through the handler like a damaged shard.
//
// Metrics (wds/metrics.hpp), when TarSamplesOptions::metrics is set (the tar_samples stage sets
// its pipeline's): per URL scheme, each shard opened (one that fails to open is not; a resumed
// shard is, once), every byte its source hands out and the time spent waiting in its read()
// (a counting wrapper: two clock reads per chunk), and the retries of network requests
// (OpenOptions::on_retry, with any hook already set still called); then every sample handed out,
// and every item the handler skipped (a shard that failed to open or midway, a duplicate member)
// as dropped.
//
// Joined shard sets (TarSamplesOptions::join, wds/join.hpp): each shard is read with its
// partners in lockstep, and their shards and bytes are counted too. Read-ahead opens the remote
// partners of a shard opened ahead with it.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wds/error.hpp"
#include "wds/metrics.hpp"
#include "wds/sample.hpp"
#include "wds/source.hpp"
#include "wds/state.hpp"
#include "wds/tar_reader.hpp"

namespace wds {

class ShardJoin;  // wds/join.hpp

struct KeyExt {
  std::string_view key;
  std::string_view ext;  // not yet lowercased
};

// WebDataset's base_plus_ext: nullopt when the name has no key/extension split (it is skipped).
std::optional<KeyExt> split_member_name(std::string_view name);

// True for names WebDataset skips as metadata: "__x__" at the top level and "__x__/...".
bool is_meta_member(std::string_view name);

// Reads the samples of one shard.
class ShardSamples {
 public:
  // `base_offset`: where in the shard the source starts (a source opened at an offset), added
  // to the samples' offsets. `metrics`: where items the handler skips are counted as dropped
  // (null: nowhere).
  ShardSamples(std::unique_ptr<ByteSource> source, ErrorHandler handler = reraise_exception,
               TarReaderOptions tar = {}, std::uint64_t base_offset = 0,
               MetricsCounters* metrics = nullptr);

  // The next sample, or nullopt at the end of the shard (or after an error the handler chose
  // to continue or stop on).
  std::optional<Sample> next();
  // True once the handler asked to stop the stream (returned false).
  bool stopped() const noexcept { return stopped_; }
  // True if the shard ended in an error (which went to the handler).
  bool failed() const noexcept { return failed_; }
  const std::string& url() const noexcept { return shard_->url; }
  void set_handler(ErrorHandler handler) {
    handler_ = handler ? std::move(handler) : reraise_exception;
  }
  // Where the next sample starts and its key, while the shard has more (for resume state):
  // nullopt once it is finished. Before the first next(), the offset is base_offset and the
  // key empty (not yet known).
  std::optional<std::pair<std::uint64_t, std::string>> resume_point() const;

  // Joined shards (wds/join.hpp): `columns`, the partners of this shard, are read in lockstep
  // with it, and next() hands on samples holding the fields of all. Their errors go to this
  // shard's handler, so a ShardSamples with columns must stay where it is (hold it by pointer).
  void join_columns(std::vector<std::unique_ptr<ShardSamples>> columns);
  // Where each column's next sample starts (with resume_point(), for resume state).
  std::vector<std::uint64_t> column_offsets() const;

 private:
  std::optional<Sample> next_own();     // this shard's next sample
  std::optional<Sample> next_joined();  // and its columns', merged (lib/tar/joined.cpp)

  // Ends the shard after a read error: reports it (and the dropped sample) to the handler.
  std::nullopt_t fail_shard(const Error& error, const std::optional<Sample>& partial);

  TarReader reader_;
  ErrorHandler handler_;
  std::shared_ptr<const ShardInfo> shard_;
  std::uint64_t base_offset_ = 0;
  MetricsCounters* metrics_ = nullptr;
  bool started_ = false;
  const TarEntry* pending_ = nullptr;  // header read but not yet placed in a sample
  KeyExt pending_parts_;               // its key and extension (views into its name)
  bool done_ = false;
  bool stopped_ = false;
  bool failed_ = false;
  std::vector<std::unique_ptr<ShardSamples>> columns_;
  std::vector<std::size_t> field_ends_;  // next_joined's, per sample: where each shard's fields end
};

// A sample in a shuffle buffer is saved by location (URL, offset, key) and read again on
// restore, opened as the tar_samples stage upstream opens its shards (it leaves
// a ShardOpening with StateReader::set_shard_opening()), else with default options.
void save_item(StateWriter& out, const Sample& sample);
void load_item(StateReader& in, Sample& sample);
// Restoring a buffer of n samples reopens n shards, and with `metrics` they count as read.
struct ShardOpening {
  OpenOptions open;
  TarReaderOptions tar;
  MetricsCounters* metrics = nullptr;
  std::shared_ptr<const ShardJoin> join;  // joined samples: their columns are read again too
};

// The default of TarSamplesOptions::read_ahead: WDS_READ_AHEAD when set to a number, else 2.
std::size_t default_read_ahead();

struct TarSamplesOptions {
  ErrorHandler handler = reraise_exception;  // for shards that fail to open or read
  OpenOptions open;
  TarReaderOptions tar;
  // Where to count what is read (see Metrics above); null: nothing is counted. Must outlive
  // the TarSamples.
  MetricsCounters* metrics = nullptr;
  // Read-ahead: while a shard is read, the next `read_ahead` URLs are taken from the URL source
  // and the remote ones (any backend but local files) opened, so that their first bytes are
  // under way (an object store answers each GET's first byte after tens of milliseconds). Each
  // buffers what its source buffers (HttpOptions::buffer_bytes, OpenOptions::parallel_parts;
  // from a host where one GET per shard does, nothing until it is read but its socket's buffer). The shards
  // are still read, counted and reported in order, a failure to open one when its turn comes;
  // those never reached are closed when the TarSamples is. 0: each shard is opened when
  // reached. With interleave, these are beyond the k shards being read: at most
  // k + read_ahead sources (and their buffers) are open at once. With join, a shard's remote
  // partners are opened ahead with it (a partner that fails to is reported at its shard's turn,
  // naming the partner's URL), so a join of c sets has up to (k + read_ahead) x c sources open.
  std::size_t read_ahead = default_read_ahead();
  // Shards read at once, round-robin (see Interleaving above); >= 1, 1: one after another.
  std::size_t interleave = 1;
  // Shard sets joined to the URLs read (wds/join.hpp): each shard is read with its partners.
  std::shared_ptr<const ShardJoin> join;
};

// Reads the samples of several shards, one after another, in the order given.
class TarSamples {
 public:
  // Where the shard URLs come from: the next URL, or nullopt when there are no more.
  using UrlSource = std::function<std::optional<std::string>()>;

  explicit TarSamples(std::vector<std::string> urls, TarSamplesOptions options = {});
  explicit TarSamples(UrlSource next_url, TarSamplesOptions options = {});

  std::optional<Sample> next();

  // For resume state: a shard being read and where its next sample starts.
  struct Position {
    std::string url;
    std::uint64_t offset = 0;
    std::string key;  // of the next sample; empty if not yet known (shard just opened)
    std::vector<std::uint64_t> columns;  // joined shards: where the sample starts in each column
  };
  // With interleave 1: the shard being read, if any. With more, an invalid_argument Error (use
  // positions()).
  std::optional<Position> position() const;
  // Continues from a Position: the shard is reopened there (sought where its source can seek,
  // else read from the start and skipped to it), and the URL source then goes on as usual.
  // With interleave 1 only (else an invalid_argument Error).
  void resume(const Position& position);
  // For resume state, any interleave: every slot's shard position in slot order (nullopt: no
  // shard open there; it takes the next URL at its turn), and the slot whose turn is next.
  std::vector<std::optional<Position>> positions() const;
  std::size_t turn() const noexcept { return turn_; }
  // Continues from positions() and turn(): each slot's shard is reopened as resume() does. An
  // invalid_argument Error if there are not `interleave` positions or the turn is not below it.
  void resume(const std::vector<std::optional<Position>>& positions, std::size_t turn);
  // For resume state: the URLs taken from the URL source ahead of their turn (read-ahead), in
  // order (with join, the first set's only: the partners follow from them). A resumed
  // TarSamples is given them back with resume_read_ahead(): they come before the URL source's.
  std::vector<std::string> read_ahead_urls() const;
  void resume_read_ahead(std::vector<std::string> urls);

  // Shards opened so far, and those that failed (skipped by the handler).
  std::size_t shards_opened() const noexcept { return opened_; }
  std::size_t shards_failed() const noexcept { return failed_; }

 private:
  // A source opened ahead of its turn (null when local: not opened ahead), or why it failed.
  struct Opened {
    std::unique_ptr<ByteSource> source;
    std::exception_ptr error;  // reported when its turn comes
  };
  // A URL taken from the URL source ahead of its turn, with its source when opened ahead, and
  // with a join its partners', in the join's order (empty: opened at its turn).
  struct Ahead {
    std::string url;
    Opened first;
    std::vector<Opened> partners;
    bool tried = false;  // opened (or failed, or local: not to be opened ahead)
  };
  Opened open_ahead(const std::string& url) const;
  // Takes URLs up to the read-ahead depth and opens the remote ones.
  void read_ahead();

  // One of the `interleave` shards read in turn.
  struct Slot {
    std::unique_ptr<ShardSamples> shard;
    std::optional<Sample> stashed;  // the first sample after resume()
  };
  UrlSource next_url_;
  TarSamplesOptions options_;
  std::deque<Ahead> ahead_;
  std::vector<Slot> slots_;
  std::size_t turn_ = 0;  // the slot that gives the next sample
  std::size_t opened_ = 0;
  std::size_t failed_ = 0;
  bool stopped_ = false;
};

}  // namespace wds
