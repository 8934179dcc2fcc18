// The wids shard index (wids-shard-index-v1 JSON): building an entry by streaming its shard,
// writing the JSON with urls relative to the index, and reading it back with urls resolved.
#include "wds/wids_index.hpp"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "lib/sha256.hpp"
#include "lib/storage/backends.hpp"
#include "wds/error.hpp"
#include "wds/tar_samples.hpp"

namespace wds {
namespace {

constexpr std::string_view kKind = "wids-shard-index-v1";

// Hands on the bytes of a source it does not own, hashing and counting them on the way: the
// caller drains what the tar reader leaves unread (padding after the end-of-archive blocks), so
// that the MD5 covers the whole file.
struct Tally {
  Md5 md5;
  std::uint64_t bytes = 0;
  void add(std::span<const std::byte> chunk) {
    md5.update(chunk.data(), chunk.size());
    bytes += chunk.size();
  }
};

class TallySource final : public ByteSource {
 public:
  TallySource(ByteSource& inner, Tally& tally)
      : ByteSource(inner.url()), inner_(inner), tally_(tally) {}
  std::span<const std::byte> read() override {
    std::span<const std::byte> chunk = inner_.read();
    tally_.add(chunk);
    return chunk;
  }
  std::string local_path() const override { return inner_.local_path(); }
  std::optional<std::uint64_t> size() const override { return inner_.size(); }

 private:
  ByteSource& inner_;
  Tally& tally_;
};

bool is_absolute_url(std::string_view url) {
  return url.starts_with('/') || !url_scheme(url).empty();
}

// A plain path. file:// URLs are made relative as other URLs are, by their text.
bool is_plain_path(const std::string& url) {
  return url_scheme(url).empty();
}

// "." and ".." segments removed, as wids' os.path.normpath does; ".." above the start of a
// relative path is kept, above the root dropped.
std::string normalize_path(const std::string& path) {
  const bool absolute = path.starts_with('/');
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (i <= path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string seg = path.substr(i, j - i);
    i = j + 1;
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(seg);
      }
      continue;
    }
    parts.push_back(std::move(seg));
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k) out += '/';
    out += parts[k];
  }
  return out.empty() ? "." : out;
}

// The directory part of `url`, ending in '/', or "" for a bare file name.
std::string directory_of(const std::string& url) {
  const auto [prefix, path] = split_authority(url);
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return prefix.empty() ? "" : prefix + "/";
  return prefix + path.substr(0, slash + 1);
}

// `url` resolved against the directory `dir` ("" or ending in '/').
std::string resolve_in(const std::string& url, const std::string& dir) {
  if (url.starts_with('/')) return normalize_path(url);  // a local path, normalized as others
  if (is_absolute_url(url)) return url;
  const auto [prefix, path] = split_authority(dir + url);
  return prefix + normalize_path(path);
}

std::string as_directory(std::string url) {
  if (!url.empty() && !url.ends_with('/')) url += '/';
  return url;
}

// The urls of a "shardlist" array, resolved against `dir`; `where` names it in messages.
void read_shardlist(const nlohmann::json& list, const std::string& dir,
                    const std::string& index_url, const std::string& where,
                    std::vector<WidsShard>& out) {
  auto bad = [&](const std::string& why) {
    return Error::corrupt_data(index_url, "", "malformed wids index: " + why);
  };
  if (!list.is_array()) throw bad(where + " is not an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& e = list[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!e.is_object()) throw bad(at + " is not an object");
    auto url = e.find("url");
    if (url == e.end()) throw bad(at + " has no \"url\"");
    if (!url->is_string() || url->get_ref<const std::string&>().empty()) {
      throw bad(at + ": \"url\" is not a non-empty string");
    }
    auto n = e.find("nsamples");
    if (n == e.end()) throw bad(at + " has no \"nsamples\"");
    // nlohmann keeps a non-negative integer literal unsigned; negatives, fractions and
    // integers beyond 64 bits are other types.
    if (!n->is_number_unsigned()) {
      throw bad(at + ": \"nsamples\" " + n->dump() + " is not a non-negative integer");
    }
    WidsShard shard;
    shard.url = resolve_in(url->get<std::string>(), dir);
    shard.nsamples = n->get<std::uint64_t>();
    if (auto f = e.find("filesize"); f != e.end() && !f->is_null()) {
      if (!f->is_number_unsigned()) {
        throw bad(at + ": \"filesize\" " + f->dump() + " is not a non-negative integer");
      }
      shard.filesize = f->get<std::uint64_t>();
    }
    if (auto m = e.find("md5sum"); m != e.end() && !m->is_null()) {
      if (!m->is_string()) throw bad(at + ": \"md5sum\" is not a string");
      shard.md5sum = m->get<std::string>();
    }
    out.push_back(std::move(shard));
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& index_url) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error::corrupt_data(index_url, "",
                              std::string("malformed wids index: not JSON: ") + e.what());
  }
}

// The directory a "base" names, itself resolved against the index's directory.
std::string base_directory(const nlohmann::json& obj, const std::string& dir,
                           const std::string& index_url) {
  auto base = obj.find("base");
  if (base == obj.end() || base->is_null()) return dir;
  if (!base->is_string()) {
    throw Error::corrupt_data(index_url, "", "malformed wids index: \"base\" is not a string");
  }
  return as_directory(resolve_in(base->get<std::string>(), dir));
}

// A local shard url as the index at `index_url` should hold it: relative when it lies under
// the index's directory, else absolute (a relative one would be resolved against that
// directory, not the current one).
std::string local_url_for_index(const std::string& url, const std::string& index_url) {
  namespace fs = std::filesystem;
  const fs::path shard = fs::absolute(url).lexically_normal();
  const fs::path dir = fs::absolute(index_url).lexically_normal().parent_path();
  const fs::path rel = shard.lexically_relative(dir);
  if (!rel.empty() && *rel.begin() != "..") return rel.generic_string();
  return shard.generic_string();
}

}  // namespace

std::vector<std::string> WidsIndex::urls() const {
  std::vector<std::string> out;
  out.reserve(shards.size());
  for (const WidsShard& s : shards) out.push_back(s.url);
  return out;
}

std::vector<std::uint64_t> WidsIndex::nsamples() const {
  std::vector<std::uint64_t> out;
  out.reserve(shards.size());
  for (const WidsShard& s : shards) out.push_back(s.nsamples);
  return out;
}

std::uint64_t WidsIndex::total_samples() const {
  std::uint64_t total = 0;
  for (const WidsShard& s : shards) {
    if (s.nsamples > std::numeric_limits<std::uint64_t>::max() - total) {
      throw Error::invalid_argument("the shards' sample counts overflow 64 bits");
    }
    total += s.nsamples;
  }
  return total;
}

WidsShard build_wids_entry(const std::string& url, const OpenOptions& options) {
  OpenOptions whole = options;
  whole.offset = 0;
  whole.length.reset();
  std::unique_ptr<ByteSource> inner = open_url(url, whole);
  Tally tally;
  WidsShard entry;
  entry.url = url;
  {
    ShardSamples samples(std::make_unique<TallySource>(*inner, tally));
    while (samples.next()) ++entry.nsamples;
  }
  for (auto chunk = inner->read(); !chunk.empty(); chunk = inner->read()) tally.add(chunk);
  entry.filesize = tally.bytes;
  entry.md5sum = tally.md5.hex();
  return entry;
}

std::string format_wids_index(const WidsIndex& index, const std::string& index_url) {
  nlohmann::ordered_json out;
  out["__kind__"] = kKind;
  out["wids_version"] = 1;
  if (!index.name.empty()) out["name"] = index.name;
  const bool local_index = !index_url.empty() && index_url != "-" && is_plain_path(index_url);
  const std::string dir = index_url.empty() || local_index ? "" : directory_of(index_url);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const WidsShard& s : index.shards) {
    if (s.url.empty()) throw Error::invalid_argument("a wids index entry without a url");
    std::string url = s.url;
    bool relative = false;
    if (local_index && is_plain_path(url)) {
      url = local_url_for_index(url, index_url);
      relative = !url.starts_with('/');
    } else if (!dir.empty() && url.starts_with(dir) && url.size() > dir.size()) {
      url = url.substr(dir.size());
      relative = true;
    }
    // A relative url whose first segment reads as a scheme ("s-5:x.tar") would be read back as
    // an absolute URL: "./" keeps it a path (RFC 3986, 4.2).
    if (relative && !url_scheme(url).empty()) url = "./" + url;
    nlohmann::ordered_json e;
    e["url"] = url;
    e["nsamples"] = s.nsamples;
    if (s.filesize) e["filesize"] = *s.filesize;
    if (!s.md5sum.empty()) e["md5sum"] = s.md5sum;
    list.push_back(std::move(e));
  }
  out["shardlist"] = std::move(list);
  return out.dump(2) + "\n";
}

std::string resolve_wids_url(const std::string& url, const std::string& index_url) {
  return resolve_in(url, directory_of(index_url));
}

WidsIndex parse_wids_index(std::string_view text, const std::string& index_url,
                           const WidsLoader& load) {
  auto bad = [&](const std::string& why) {
    return Error::corrupt_data(index_url, "", "malformed wids index: " + why);
  };
  const nlohmann::json doc = parse_json(text, index_url);
  if (!doc.is_object()) throw bad("not a JSON object");
  if (auto kind = doc.find("__kind__"); kind != doc.end()) {
    if (!kind->is_string() || kind->get_ref<const std::string&>() != kKind) {
      throw bad("\"__kind__\" is " + kind->dump() + ", not \"" + std::string(kKind) + "\"");
    }
  }
  auto version = doc.find("wids_version");
  if (version == doc.end()) throw bad("no \"wids_version\"");
  if (!version->is_number_integer() || *version != 1) {
    throw bad("\"wids_version\" is " + version->dump() + "; only version 1 is read");
  }
  WidsIndex index;
  index.url = index_url;
  if (auto name = doc.find("name"); name != doc.end() && name->is_string()) {
    index.name = name->get<std::string>();
  }
  const std::string dir = base_directory(doc, directory_of(index_url), index_url);
  if (auto list = doc.find("shardlist"); list != doc.end()) {
    read_shardlist(*list, dir, index_url, "shardlist", index.shards);
  }
  if (auto datasets = doc.find("datasets"); datasets != doc.end()) {
    if (!datasets->is_array()) throw bad("\"datasets\" is not an array");
    for (std::size_t i = 0; i < datasets->size(); ++i) {
      const std::string at = "datasets[" + std::to_string(i) + "]";
      const nlohmann::json& component = (*datasets)[i];
      if (!component.is_object()) throw bad(at + " is not an object");
      auto source = component.find("source_url");
      if (source == component.end()) {
        if (!component.contains("shardlist")) throw bad(at + " has no \"shardlist\"");
        read_shardlist(component["shardlist"], base_directory(component, dir, index_url), index_url,
                       at + ".shardlist", index.shards);
        continue;
      }
      if (!source->is_string()) throw bad(at + ": \"source_url\" is not a string");
      const std::string source_url = resolve_in(source->get<std::string>(), dir);
      if (!load) {
        throw Error::invalid_argument(index_url, "",
                                      at + " names another index ('" + source_url +
                                          "'), which parse_wids_index does not read");
      }
      const nlohmann::json sub = parse_json(load(source_url), source_url);
      if (!sub.is_object()) {
        throw Error::corrupt_data(source_url, "", "malformed wids index: not a JSON object");
      }
      if (sub.contains("source_url")) {
        throw Error::corrupt_data(source_url, "",
                                  "malformed wids index: a second level of \"source_url\" (" + at +
                                      " of '" + index_url + "' leads here; wids reads one)");
      }
      if (!sub.contains("shardlist")) {
        throw Error::corrupt_data(source_url, "", "malformed wids index: no \"shardlist\"");
      }
      read_shardlist(sub["shardlist"], base_directory(sub, directory_of(source_url), source_url),
                     source_url, "shardlist", index.shards);
    }
  }
  if (index.shards.empty()) throw bad("no shards (\"shardlist\" is missing or empty)");
  return index;
}

WidsIndex read_wids_index(const std::string& index_url, const OpenOptions& options) {
  OpenOptions whole = options;
  whole.offset = 0;
  whole.length.reset();
  auto read_text = [&](const std::string& url) {
    std::unique_ptr<ByteSource> src = open_url(url, whole);
    std::string out;
    for (auto chunk = src->read(); !chunk.empty(); chunk = src->read()) {
      out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
    }
    return out;
  };
  return parse_wids_index(read_text(index_url), index_url, read_text);
}

}  // namespace wds
