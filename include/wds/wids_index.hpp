// wds/wids_index.hpp: the wids shard index, a JSON file saying how many samples each shard of a
// set holds, so that sample counts are known without reading the shards.
//
// The format is the one webdataset's indexed sibling, wids, reads (`widsindex create` writes it):
//
//   {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "train",
//    "shardlist": [{"url": "train-000000.tar", "nsamples": 1000, "filesize": 104857600,
//                   "md5sum": "9e107d9d372bb6826bd81d3542a419d6"}, ...]}
//
// Readers need `wids_version` (1), and each entry's `url` and `nsamples`; the other fields are
// optional. A relative url is resolved against "base" when the index has one, else against the
// index file's own directory ("s3://b/d/index.json" + "x.tar" -> "s3://b/d/x.tar"); an absolute
// path or a URL with a scheme is kept. "datasets" entries are read too, as wids reads them: each
// holds its own "shardlist" (and "base"), or a "source_url" naming another index (one level).
//
//   // Write: streams each shard once (samples counted with TarSamples' grouping, bytes, MD5).
//   wds::WidsIndex index{.name = "train"};
//   for (const std::string& url : wds::expand_urls("/data/train-{000000..000099}.tar"))
//     index.shards.push_back(wds::build_wids_entry(url));
//   std::string json = wds::format_wids_index(index, "/data/train.json");  // urls "train-....tar"
//
//   // Read (a local path or any URL open_url opens: http, s3, ...):
//   wds::WidsIndex index = wds::read_wids_index("s3://bucket/train.json");
//   index.urls();       // the shards, resolved
//   index.nsamples();   // their sample counts
//
// What the counts give: the samples each rank reads in a pass, and the equal count that keeps
// the ranks in lockstep (the smallest), to pass to Loader::with_epoch or Pipeline::with_epoch:
//
//   wds::DistributedInfo who = wds::detect_distributed();
//   wds::RankSampleCounts counts = wds::count_rank_samples(
//       index.nsamples(), who.world_size, {.policy = wds::SplitPolicy::unbalanced});
//   auto ds = wds::WebDataset(index.urls(), {.split_policy = wds::SplitPolicy::unbalanced});
//   wds::Loader loader(ds | wds::batched(64), {.workers = 4});
//   loader.with_epoch(counts.equal / 64);   // batches: every rank steps the same number of times
//
// The rest of wds reads the counts too: IndexedDataset(WidsIndex) (wds/indexed_dataset.hpp)
// numbers the samples of a wids-indexed set without reading any shard.
//
// Errors: wds::Error. A malformed index (not JSON, not an object, a wrong "__kind__" or
// "wids_version", an entry without "url", an "nsamples" that is not a non-negative integer, no
// shards at all) is corrupt_data naming the index URL and what is wrong; the source's own errors
// (not_found, unavailable, ...); a shard build_wids_entry cannot read as a tar is corrupt_data
// naming it, as when streaming it.
//
// Thread safety: all functions are reentrant and may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wds/source.hpp"
#include "wds/split.hpp"

namespace wds {

struct WidsShard {
  std::string url;                        // resolved (read), or as given (written)
  std::uint64_t nsamples = 0;             // samples, grouped as TarSamples groups them
  std::optional<std::uint64_t> filesize;  // bytes of the shard file, when known
  std::string md5sum;                     // lowercase hex MD5 of the file; empty when unknown
};

struct WidsIndex {
  std::string name;  // "name"; empty: none written
  std::string url;   // where it was read from (parse_wids_index's index_url); not written
  std::vector<WidsShard> shards;

  std::vector<std::string> urls() const;
  std::vector<std::uint64_t> nsamples() const;
  // Samples in all shards.
  std::uint64_t total_samples() const;
};

// Streams the shard once (any URL open_url opens; compressed shards too, whose counts a
// streaming pipeline can use though wids itself cannot read them) and returns its entry: the
// samples TarSamples yields from it, its size and the MD5 of all its bytes.
WidsShard build_wids_entry(const std::string& url, const OpenOptions& options = {});

// The JSON text of `index` (indented, ending in a newline). With `index_url` (where the text
// will be written), a shard url under that file's directory is written relative to it, as
// widsindex's own indexes are ("/data/train.json" + "/data/a/x.tar" -> "a/x.tar"); other urls
// are written as they are. A shard without a url is an invalid_argument error.
std::string format_wids_index(const WidsIndex& index, const std::string& index_url = "");

// Reads what another index names (a "datasets" entry's "source_url"): its whole text.
using WidsLoader = std::function<std::string(const std::string& url)>;

// Parses index text; `index_url` names it in errors and is where relative urls are resolved.
// A "source_url" is read with `load`; without one it is an invalid_argument error.
WidsIndex parse_wids_index(std::string_view text, const std::string& index_url,
                           const WidsLoader& load = nullptr);

// Reads and parses the index at `index_url` (a path or URL, through open_url).
WidsIndex read_wids_index(const std::string& index_url, const OpenOptions& options = {});

// `url` resolved against the directory of `index_url` (the rule above, "." and ".." segments
// removed), or `url` itself when it is absolute.
std::string resolve_wids_url(const std::string& url, const std::string& index_url);

// The samples each rank reads in one pass over shards holding `shard_samples` samples (in the
// pass's order), split among `world_size` ranks as WebDataset splits them (wds/split.hpp).
struct RankSampleCountOptions {
  std::optional<SplitPolicy> policy{};  // unset: choose_split_policy's (option, env, even)
  int num_workers = 1;                  // per rank; only split_samples depends on it
  // shuffle_shards: the shares of unbalanced and drop_last change with the epoch's order
  // (epoch_shard_order(n, true, seed, epoch)); take the smallest `equal` over the epochs run.
  bool shuffle_shards = false;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
};
struct RankSampleCounts {
  SplitPolicyChoice choice;
  std::vector<std::uint64_t> per_rank;  // samples rank r reads (all its workers together)
  std::uint64_t equal = 0;              // the smallest of per_rank: with_epoch's lockstep count
  std::uint64_t dropped = 0;            // samples of shards no rank reads (drop_last)
};
// Errors as assign_shards: invalid_argument for world_size or num_workers < 1, or an even
// policy with a shard count that does not divide.
RankSampleCounts count_rank_samples(const std::vector<std::uint64_t>& shard_samples, int world_size,
                                    const RankSampleCountOptions& options = {});

}  // namespace wds
