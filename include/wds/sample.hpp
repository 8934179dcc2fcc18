// wds/sample.hpp: Sample, one training example as WebDataset groups it.
//
// A sample is the run of consecutive tar members sharing a key: "img7.jpg", "img7.cls" and
// "img7.json" make the sample with key "img7" and fields jpg, cls and json, in archive order.
// It also remembers the shard URL it came from (WebDataset's __url__) and, for shards read from
// the local file system, the file's path (__local_path__).
//
//   for (const wds::Field& f : sample.fields()) use(f.ext, f.data.span());
//   const wds::Bytes& label = sample.at("cls");   // throws if the sample has no cls field
//
// Moving a sample is cheap (no byte is copied); the URL strings are shared between the samples
// of one shard.
//
// Thread safety: a value type; distinct objects may be used from different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wds/bytes.hpp"

namespace wds {

// Where samples came from: one per shard, shared by all its samples.
struct ShardInfo {
  std::string url;         // the shard URL as given after expansion (WebDataset's __url__)
  std::string local_path;  // the local file it was read from (__local_path__), or empty
};

// Where one part of a joined sample (wds/join.hpp) is: a joined set's shard and the offset of
// the sample's first member header in it.
struct ColumnLocation {
  std::shared_ptr<const ShardInfo> shard;
  std::uint64_t offset = 0;
};

struct Field {
  std::string ext;  // the member name after the key's dot, lowercased: "jpg", "seg.png"
  Bytes data;
};

class Sample {
 public:
  Sample() = default;
  // `shard` is shared, not copied, by all samples made with the same pointer; may be null.
  // `offset` is where the sample's first member header starts in the (uncompressed) shard.
  explicit Sample(std::string key, std::shared_ptr<const ShardInfo> shard = nullptr,
                  std::uint64_t offset = 0);

  const std::string& key() const noexcept { return key_; }
  // The shard URL as given after expansion (WebDataset's __url__); empty if not from a shard.
  const std::string& url() const noexcept { return shard_ ? shard_->url : empty_string(); }
  // The local file the shard was read from (WebDataset's __local_path__), or empty.
  const std::string& local_path() const noexcept {
    return shard_ ? shard_->local_path : empty_string();
  }
  const std::shared_ptr<const ShardInfo>& shard() const noexcept { return shard_; }
  // Byte offset of the sample's first member header in its (uncompressed) shard: with url()
  // and key(), where to find the sample again (resume state, indexes).
  std::uint64_t offset() const noexcept { return offset_; }

  // A joined sample's other parts, one per joined set in order (empty for a sample of one
  // shard): with url() and offset(), where to find all its fields again.
  const std::vector<ColumnLocation>& columns() const noexcept { return columns_; }
  std::vector<ColumnLocation>& columns() noexcept { return columns_; }

  const std::vector<Field>& fields() const noexcept { return fields_; }
  std::vector<Field>& fields() noexcept { return fields_; }
  bool empty() const noexcept { return fields_.empty(); }

  // The field with this extension, or nullptr.
  const Bytes* find(std::string_view ext) const noexcept;
  Bytes* find(std::string_view ext) noexcept;
  // The field with this extension; throws an invalid_argument Error naming the sample if absent.
  const Bytes& at(std::string_view ext) const;
  // Appends a field. Returns false, and leaves the sample unchanged, if `ext` is already present.
  bool add(std::string ext, Bytes data);
  // Sum of the field sizes.
  std::size_t payload_bytes() const noexcept;

 private:
  static const std::string& empty_string() noexcept;

  std::string key_;
  std::shared_ptr<const ShardInfo> shard_;
  std::uint64_t offset_ = 0;
  std::vector<Field> fields_;
  std::vector<ColumnLocation> columns_;
};

}  // namespace wds
