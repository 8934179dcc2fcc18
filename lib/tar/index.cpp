// Shard indexes in DALI's wds2idx format: the text (v1.1 and v1.2, read and written), where an
// index lives beside its shard, and checks that it still fits the shard.
#include "wds/index.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <limits>
#include <optional>

#include "lib/storage/file.hpp"
#include "lib/tar/format.hpp"
#include "wds/error.hpp"
#include "wds/tar_samples.hpp"

namespace wds {
namespace {

bool has_space(std::string_view s) {
  return s.find_first_of(" \t\n\r\v\f") != std::string_view::npos;
}

}  // namespace

std::string format_index(const ShardIndex& index) {
  std::string out = "v1.2 " + std::to_string(index.samples.size()) + "\n";
  for (const IndexedSample& s : index.samples) {
    if (s.members.empty()) {
      throw Error::invalid_argument("", s.key, "an index entry without members cannot be written");
    }
    bool first = true;
    for (const IndexMember& m : s.members) {
      if (m.ext.empty() || has_space(m.ext) || m.name.empty() || has_space(m.name)) {
        throw Error::invalid_argument(
            "", m.name,
            "the index format cannot hold an empty extension or a name with whitespace");
      }
      if (!first) out += ' ';
      first = false;
      out += m.ext;
      out += ' ';
      out += std::to_string(m.offset);
      out += ' ';
      out += std::to_string(m.size);
      out += ' ';
      out += m.name;
    }
    out += '\n';
  }
  return out;
}

ShardIndex parse_index(std::string_view text, const std::string& where) {
  std::size_t line_no = 0;
  auto bad = [&](const std::string& why) -> Error {
    return Error::corrupt_data(where, "",
                               "malformed index: line " + std::to_string(line_no) + ": " + why);
  };
  auto next_line = [&](std::string_view& line) {
    if (text.empty()) return false;
    std::size_t nl = text.find('\n');
    line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    return true;
  };
  auto tokens = [](std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() &&
             std::string_view(" \t\r\v\f").find(line[i]) != std::string_view::npos)
        ++i;
      std::size_t j = i;
      while (j < line.size() &&
             std::string_view(" \t\r\v\f").find(line[j]) == std::string_view::npos)
        ++j;
      if (j > i) out.push_back(line.substr(i, j - i));
      i = j;
    }
    return out;
  };
  auto number = [&](std::string_view s, const char* what) {
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
      throw bad(std::string(what) + " '" + std::string(s) + "' is not a non-negative integer");
    }
    return v;
  };

  std::string_view line;
  if (!next_line(line)) {
    line_no = 1;
    throw bad("empty index, no version line");
  }
  std::vector<std::string_view> head = tokens(line);
  if (head.empty()) throw bad("no version signature");
  int group = 0;
  if (head[0] == "v1.2") {
    group = 4;
  } else if (head[0] == "v1.1") {
    group = 3;
  } else {
    throw bad("unsupported index version '" + std::string(head[0]) + "' (v1.1 and v1.2 are)");
  }
  if (head.size() != 2) throw bad("expected '" + std::string(head[0]) + " <num_samples>'");
  const std::uint64_t count = number(head[1], "sample count");

  ShardIndex index;
  index.samples.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(count, 1 << 20)));
  for (std::uint64_t i = 0; i < count; ++i) {
    if (!next_line(line)) {
      ++line_no;
      throw bad("the index ends after " + std::to_string(i) + " of the " + std::to_string(count) +
                " samples its first line announces");
    }
    std::vector<std::string_view> t = tokens(line);
    if (t.empty()) throw bad("no members for the sample");
    if (t.size() % group != 0) {
      throw bad(group == 4 ? "expected groups of '<ext> <offset> <size> <name>'"
                           : "expected groups of '<ext> <offset> <size>'");
    }
    IndexedSample s;
    for (std::size_t k = 0; k < t.size(); k += group) {
      IndexMember m;
      m.ext = t[k];
      m.offset = number(t[k + 1], "offset");
      m.size = number(t[k + 2], "size");
      if (m.offset % kTarBlock != 0) {
        throw bad("offset " + std::to_string(m.offset) + " is not a multiple of 512");
      }
      if (m.offset == 0) throw bad("offset 0 leaves no room for the member's tar header");
      if (m.size > std::numeric_limits<std::uint64_t>::max() - m.offset) {
        throw bad("offset + size overflows");
      }
      if (group == 4) {
        m.name = t[k + 3];
        std::optional<KeyExt> parts = split_member_name(m.name);
        if (!parts) throw bad("member name '" + m.name + "' has no key.extension form");
        if (parts->ext != m.ext) {
          throw bad("extension '" + m.ext + "' does not match member name '" + m.name + "'");
        }
        if (k == 0) {
          s.key = parts->key;
        } else if (parts->key != s.key) {
          throw bad("member '" + m.name + "' does not belong to sample '" + s.key + "'");
        }
      }
      s.members.push_back(std::move(m));
    }
    index.samples.push_back(std::move(s));
  }
  while (next_line(line)) {
    if (!tokens(line).empty()) {
      throw bad("more lines than the " + std::to_string(count) +
                " samples the first line announces");
    }
  }
  return index;
}

std::string default_index_path(const std::string& shard_url) {
  std::size_t slash = shard_url.rfind('/');
  std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  // As wds2idx.py: the first dot after the file name's first character.
  std::size_t dot = shard_url.find('.', base + 1);
  return (dot == std::string::npos ? shard_url : shard_url.substr(0, dot)) + ".idx";
}

bool index_is_older(const std::string& index_path, const std::string& shard_path) {
  struct stat si {
  }, ss{};
  std::string ip = file_url_to_path(index_path), sp = file_url_to_path(shard_path);
  if (::stat(ip.c_str(), &si) != 0) throw_errno(index_path, "stat", errno);
  if (::stat(sp.c_str(), &ss) != 0) throw_errno(shard_path, "stat", errno);
  if (si.st_mtim.tv_sec != ss.st_mtim.tv_sec) return si.st_mtim.tv_sec < ss.st_mtim.tv_sec;
  return si.st_mtim.tv_nsec < ss.st_mtim.tv_nsec;
}

void check_index_bounds(const ShardIndex& index, std::uint64_t shard_size,
                        const std::string& shard_url) {
  for (const IndexedSample& s : index.samples) {
    for (const IndexMember& m : s.members) {
      if (m.offset + m.size > shard_size) {
        throw Error::corrupt_data(shard_url, m.name,
                                  "index is stale: the member ends at byte " +
                                      std::to_string(m.offset + m.size) + ", beyond the shard's " +
                                      std::to_string(shard_size) + " bytes");
      }
    }
  }
}

}  // namespace wds
