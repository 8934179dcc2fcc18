// Reading one sample back through its index: bounded reads of each member with the headers in
// front of it, which are checked against the index, so that a rewritten shard is noticed.
#include <algorithm>
#include <cstring>
#include <new>
#include <optional>

#include "lib/storage/file.hpp"
#include "lib/tar/format.hpp"
#include "lib/tar/indexed_read.hpp"
#include "lib/tar/samples.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"
#include "wds/index.hpp"
#include "wds/tar_samples.hpp"

namespace wds {
namespace {

[[noreturn]] void stale(const ShardInfo& shard, const std::string& member, const std::string& why) {
  throw Error::corrupt_data(
      shard.url, member,
      "index is stale: " + why + " (the shard changed since its index was built?)");
}

// Bytes of extension headers read in front of a member's header: enough for a pax header holding
// the path and a few other records.
std::uint64_t extension_window(const IndexMember& m) {
  return kTarBlock + round_up_block(std::max<std::uint64_t>(m.name.size(), 256) + 512);
}

}  // namespace

Error shard_ends_before_index(const std::string& url, std::uint64_t offset, std::uint64_t got,
                              std::uint64_t length) {
  return Error::corrupt_data(url, "",
                             "index is stale: the shard ends at byte " +
                                 std::to_string(offset + got) + ", before byte " +
                                 std::to_string(offset + length) + " the index needs");
}

Sample read_indexed_sample(const std::shared_ptr<const ShardInfo>& shard,
                           const IndexedSample& entry, const RangeReader& read) {
  if (entry.members.empty()) {
    throw Error::invalid_argument(shard->url, entry.key, "index entry has no members");
  }
  std::optional<Sample> sample;
  for (const IndexMember& m : entry.members) {
    if (m.offset < kTarBlock || m.offset % kTarBlock != 0) {
      stale(*shard, m.name, "member data offset " + std::to_string(m.offset) + " is not valid");
    }
    const std::uint64_t header_at = m.offset - kTarBlock;
    std::uint64_t before = std::min(header_at, extension_window(m));
    Bytes bytes = read(header_at - before, before + kTarBlock + m.size);
    auto head = [&] { return bytes.span().first(static_cast<std::size_t>(before + kTarBlock)); };
    const std::string label = m.name.empty() ? m.ext : m.name;
    std::optional<MemberHeader> h =
        read_member_header(head(), header_at - before, m.offset, shard->url, label);
    // A long name whose extension headers hold more than the window: one more, larger read.
    if (h && !m.name.empty() && h->name != m.name && !h->extended && before < header_at) {
      before = std::min<std::uint64_t>(header_at, std::uint64_t{1} << 16);
      bytes = read(header_at - before, before + kTarBlock + m.size);
      h = read_member_header(head(), header_at - before, m.offset, shard->url, label);
    }
    if (!h) {
      stale(*shard, label,
            "no header of a regular file in front of the data at byte " + std::to_string(m.offset));
    }
    if (!m.name.empty() && h->name != m.name) {
      stale(*shard, m.name,
            "the member at byte " + std::to_string(m.offset) + " is '" + h->name + "'");
    }
    if (h->size != m.size) {
      stale(*shard, label,
            "the member at byte " + std::to_string(m.offset) + " has " +
                (h->size ? std::to_string(*h->size) : std::string("an unreadable number of")) +
                " bytes, the index says " + std::to_string(m.size));
    }
    std::optional<KeyExt> parts = split_member_name(h->name);
    if (!parts || (m.name.empty() && parts->ext != m.ext)) {
      stale(*shard, h->name,
            "the member at byte " + std::to_string(m.offset) + " is '" + h->name +
                "', not a member with extension '" + m.ext + "'");
    }
    if (!sample) {
      std::string key = entry.key.empty() ? std::string(parts->key) : entry.key;
      sample.emplace(std::move(key), shard, h->first_header);
    } else if (parts->key != sample->key()) {
      stale(*shard, h->name, "the member does not belong to sample '" + sample->key() + "'");
    }
    std::string ext = m.ext;
    ext = lowercase(ext);
    if (is_reserved_field(ext)) {
      throw Error::corrupt_data(shard->url, label,
                                "extension '" + ext +
                                    "' is the name of a sample's own metadata (__key__, __url__, "
                                    "__local_path__)");
    }
    Bytes data = Bytes::copy_of(bytes.span().subspan(static_cast<std::size_t>(before + kTarBlock)));
    if (!sample->add(ext, std::move(data))) {
      throw Error::corrupt_data(
          shard->url, label, "duplicate extension '" + ext + "' in sample '" + sample->key() + "'");
    }
  }
  return std::move(*sample);
}

Sample read_indexed_sample(const std::string& url, const IndexedSample& entry,
                           const OpenOptions& options) {
  auto shard = std::make_shared<const ShardInfo>(
      ShardInfo{url, is_local_url(url) ? file_url_to_path(url) : std::string()});
  RangeReader read = [&](std::uint64_t offset, std::uint64_t length) {
    OpenOptions range = options;
    range.offset = offset;
    range.length = length;
    std::unique_ptr<ByteSource> src = open_url(url, range);
    // An index can declare any size: the source must hold it before it is allocated. (Some
    // sources give the size of the resource, some of the range from the offset: `length`
    // cannot exceed either.)
    const std::optional<std::uint64_t> total = src->size();
    if (total && length > *total) {
      throw Error::corrupt_data(url, "",
                                "index is stale: it needs " + std::to_string(length) +
                                    " bytes from byte " + std::to_string(offset) +
                                    ", the shard has " + std::to_string(*total));
    }
    Bytes out;
    try {
      out = Bytes(static_cast<std::size_t>(length));
    } catch (const std::bad_alloc&) {
      throw Error::unavailable(
          url, "", "out of memory for the " + std::to_string(length) + " bytes the index names");
    }
    std::uint64_t got = 0;
    for (auto chunk = src->read(); !chunk.empty(); chunk = src->read()) {
      const std::size_t n =
          static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), length - got));
      if (n) std::memcpy(out.data() + got, chunk.data(), n);
      got += n;
      if (got == length) break;
    }
    if (got < length) throw shard_ends_before_index(url, offset, got, length);
    return out;
  };
  return read_indexed_sample(shard, entry, read);
}

}  // namespace wds
