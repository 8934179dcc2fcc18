// wds/index.hpp: shard indexes, for reading any sample of a plain tar shard by its number.
//
// An index lists, for each sample of a shard, where each member's data lies (byte offset and
// size). It uses the text format of NVIDIA DALI's webdataset reader (tools/wds2idx.py, v1.2), so
// indexes made by either tool serve both:
//
//   v1.2 <num_samples>
//   <ext> <data_offset> <size> <member_name> <ext> <data_offset> <size> <member_name> ...
//
// one line per sample, one 4-field group per member in archive order, separated by single
// spaces. data_offset is where the member's data starts (after its header, and after any pax or
// GNU long-name headers), a multiple of 512; ext is the part of the name after the key's dot,
// case kept. Version v1.1 (no member names) is read too.
//
//   wds::ShardIndex index = wds::build_index("/data/train-000001.tar");   // streams the shard once
//   write_file(wds::default_index_path(url), wds::format_index(index));   // ".../train-000001.idx"
//   wds::Sample s = wds::read_indexed_sample(url, index.samples[17]);     // bounded reads only
//
// Staleness: a shard rewritten after its index was built must not yield wrong bytes silently.
// read_indexed_sample checks the tar header(s) in front of every member's data against the
// index (name and size) and throws corrupt_data "index is stale: ..." if they disagree;
// index_is_older and check_index_bounds are the cheap checks to make when loading an index.
//
// Errors: wds::Error. corrupt_data for a malformed index (naming where it came from and the line)
// or a stale one; invalid_argument for a compressed shard (indexes need uncompressed shards, as
// DALI's do) or a name the format cannot hold (whitespace, an empty extension); the source's own
// errors (not_found, unavailable, ...).
//
// Thread safety: all functions are reentrant and may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wds/bytes.hpp"
#include "wds/sample.hpp"
#include "wds/source.hpp"

namespace wds {

struct IndexMember {
  std::string ext;           // after the key's dot, case as stored ("JPG" stays "JPG")
  std::uint64_t offset = 0;  // first byte of the member's data in the shard
  std::uint64_t size = 0;    // bytes of data
  std::string name;          // the full member path; empty when read from a v1.1 index
};

struct IndexedSample {
  std::string key;  // empty when read from a v1.1 index (then taken from the tar header on read)
  std::vector<IndexMember> members;
};

struct ShardIndex {
  std::vector<IndexedSample> samples;
};

// Streams the shard once (a plain, uncompressed tar) and groups its members into samples with
// WebDataset's rules, as ShardSamples does: regular files only, metadata names skipped, names
// split by split_member_name, consecutive members with the same key form one sample. A damaged
// or truncated shard is a corrupt_data error, as when streaming it.
ShardIndex build_index(const std::string& url, const OpenOptions& options = {});

// The DALI v1.2 text of `index` (ending in a newline). A name or extension the format cannot
// hold (holding whitespace, or an empty extension) is an invalid_argument error.
std::string format_index(const ShardIndex& index);

// Parses v1.2 and v1.1 index text. `where` names the index in errors (its path or URL):
// corrupt_data "<where>: line N: ...".
ShardIndex parse_index(std::string_view text, const std::string& where);

// DALI's default index name: the shard's file name up to its first dot (a leading dot of the
// file name does not count, as in wds2idx.py) plus ".idx", in the same directory:
// "/d/train-000001.tar" -> "/d/train-000001.idx", "s3://b/x.tar.gz" -> "s3://b/x.idx".
std::string default_index_path(const std::string& shard_url);

// True if the index file was modified before the shard (local files; nanosecond mtimes): the
// shard was rewritten after the index was built. Missing files are errors (not_found).
bool index_is_older(const std::string& index_path, const std::string& shard_path);

// Throws corrupt_data "index is stale: ..." naming `shard_url` if a member of `index` ends beyond
// `shard_size` bytes.
void check_index_bounds(const ShardIndex& index, std::uint64_t shard_size,
                        const std::string& shard_url);

// Reads one sample by its index entry: one bounded read per member (OpenOptions offset and
// length: a pread for local files, a Range request for HTTP and S3), which also takes in the tar
// header(s) in front of the data to check them against the entry (stale index: corrupt_data
// naming the shard). The sample gets the key, the fields (extension lowercased, as when
// streaming; a repeated extension is a corrupt_data error), the URL, the local path for local
// files, and the offset of its first header (the value streaming gives).
Sample read_indexed_sample(const std::string& url, const IndexedSample& entry,
                           const OpenOptions& options = {});

// The same over any way of reading byte ranges: read(offset, length) returns exactly `length`
// bytes starting at `offset` of the shard (or throws). `shard` is what the sample's url() and
// local_path() report. IndexedDataset passes a pread on a cached descriptor.
using RangeReader = std::function<Bytes(std::uint64_t offset, std::uint64_t length)>;
Sample read_indexed_sample(const std::shared_ptr<const ShardInfo>& shard,
                           const IndexedSample& entry, const RangeReader& read);

}  // namespace wds
