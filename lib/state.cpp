// Parsing of the pipeline state's text form.
#include "wds/state.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include <zlib.h>

#include "wds/error.hpp"

namespace wds {

namespace {

constexpr std::size_t kTrailerSize = 10;  // " c" and 8 hex digits

std::uint32_t checksum(std::string_view text) {
  // zlib's crc32 takes a uInt length: large states in pieces.
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!text.empty()) {
    const std::size_t n = std::min<std::size_t>(text.size(), std::size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(n));
    text.remove_prefix(n);
  }
  return static_cast<std::uint32_t>(crc);
}

std::string trailer(std::uint32_t crc) {
  char out[kTrailerSize + 1];
  std::snprintf(out, sizeof out, " c%08x", static_cast<unsigned>(crc));
  return std::string(out, kTrailerSize);
}

// The checksum a sealed state's text ends with, if it ends with one.
std::optional<std::uint32_t> stated_checksum(std::string_view text) {
  if (text.size() < kStateHeader.size() + kTrailerSize) return std::nullopt;
  std::string_view t = text.substr(text.size() - kTrailerSize);
  if (t.substr(0, 2) != " c") return std::nullopt;
  std::uint32_t crc = 0;
  for (char c : t.substr(2)) {
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    crc = crc << 4 | static_cast<std::uint32_t>(digit);
  }
  return crc;
}

[[noreturn]] void damaged(const std::string& what) {
  throw Error::invalid_argument(
      "the pipeline state is damaged: " + what +
      " (was the file truncated, edited or copied wrongly since it was saved?)");
}

}  // namespace

std::string StateWriter::str() const {
  return text_ + trailer(checksum(text_));
}

StateReader::StateReader(std::string_view text, StateCheck check) : text_(text) {
  if (text_.substr(0, kStateHeader.size()) == kStateHeader) {
    const std::optional<std::uint32_t> stated = stated_checksum(text_);
    if (!stated) damaged("it does not end with its checksum");
    text_.remove_suffix(kTrailerSize);
    if (check == StateCheck::verify) {
      const std::uint32_t actual = checksum(text_);
      if (actual != *stated) {
        char what[96];
        std::snprintf(what, sizeof what,
                      "its checksum (CRC-32 %08x) does not match its contents (%08x)",
                      static_cast<unsigned>(*stated), static_cast<unsigned>(actual));
        damaged(what);
      }
    }
    pos_ = kStateHeader.size();
    return;
  }
  // Saved before states had a checksum: read as they are.
  if (text_.substr(0, kStateHeaderUnsealed.size()) != kStateHeaderUnsealed) {
    throw Error::invalid_argument("not a wds pipeline state (it does not start with 'wds-state-')");
  }
  pos_ = kStateHeaderUnsealed.size();
}

bool StateReader::get_bool() {
  const std::uint64_t v = get_u64();
  if (v > 1) fail("a flag is " + std::to_string(v) + ", not 0 or 1");
  return v == 1;
}

std::string reseal_state(std::string_view text) {
  std::string_view body;
  if (text.substr(0, kStateHeader.size()) == kStateHeader) {
    body = text.substr(kStateHeader.size());
    if (stated_checksum(text)) body.remove_suffix(kTrailerSize);
  } else if (text.substr(0, kStateHeaderUnsealed.size()) == kStateHeaderUnsealed) {
    body = text.substr(kStateHeaderUnsealed.size());
  } else {
    throw Error::invalid_argument("not a wds pipeline state (it does not start with 'wds-state-')");
  }
  std::string out(kStateHeader);
  out += body;
  out += trailer(checksum(out));
  return out;
}

void StateReader::fail(const std::string& what) const {
  throw Error::invalid_argument("malformed pipeline state at character " + std::to_string(pos_) +
                                ": " + what +
                                " (was it saved by a pipeline of the same configuration?)");
}

std::uint64_t StateReader::get_u64() {
  if (text_.substr(pos_, 2) != " u") fail("expected a number");
  pos_ += 2;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), value);
  if (ec != std::errc() || end == text_.data() + pos_) fail("bad number");
  pos_ = static_cast<std::size_t>(end - text_.data());
  return value;
}

std::string StateReader::get_string() {
  if (text_.substr(pos_, 2) != " s") fail("expected a string");
  pos_ += 2;
  std::size_t size = 0;
  auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + text_.size(), size);
  if (ec != std::errc() || end == text_.data() + pos_ || *end != ':') fail("bad string length");
  pos_ = static_cast<std::size_t>(end - text_.data()) + 1;
  if (size > text_.size() - pos_) fail("string runs past the end");
  std::string out(text_.substr(pos_, size));
  pos_ += size;
  return out;
}

void StateReader::set_handed_out(std::vector<std::string_view> urls, std::string source) {
  handed_out_.emplace();
  handed_out_->urls.insert(urls.begin(), urls.end());
  handed_out_->source = std::move(source);
}

void StateReader::check_handed_out(std::string_view url) {
  if (!handed_out_ || trust_any_ || handed_out_->urls.count(url)) return;
  throw Error::invalid_argument(
      std::string(url), "",
      "the pipeline state holds this shard, which its " + handed_out_->source +
          " has not handed out yet: malformed state (restored, shards would be read "
          "again)");
}

void StateReader::add_shard_urls(std::shared_ptr<const std::vector<std::string>> urls) {
  shard_urls_.push_back(std::move(urls));
  shard_index_.reset();  // rebuilt by the next check
  in_shard_stages_ = true;
}

void StateReader::check_shard_url(std::string_view url) {
  if (shard_urls_.empty() || trust_any_) return;
  if (!shard_index_) {
    shard_index_.emplace();
    for (const auto& list : shard_urls_) shard_index_->insert(list->begin(), list->end());
  }
  if (!shard_index_->count(url)) {
    throw Error::invalid_argument(
        std::string(url), "",
        "the pipeline state names a shard that is not in this pipeline's list of " +
            std::to_string(shard_index_->size()) +
            " shards: refused (was it saved by a pipeline over other shards?)");
  }
}

}  // namespace wds

namespace wds {

void Configuration::stage(std::string_view name) {
  stage_ = name;
  ++stage_number_;
}

void Configuration::add(std::string_view key, std::string_view value, Kind kind) {
  std::string full = std::to_string(stage_number_) + ":" + stage_ + "." + std::string(key);
  // One value per line: keep the text parseable whatever a value holds.
  std::string v(value);
  for (char& c : v) {
    if (c == '\n') c = ' ';
  }
  values_.push_back({kind, std::move(full), std::move(v)});
}

void Configuration::add(std::string_view key, std::uint64_t value, Kind kind) {
  add(key, std::to_string(value), kind);
}

namespace {
std::uint64_t fnv1a(std::uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= 0xff;  // a separator no text holds, so that "ab","c" and "a","bc" differ
  h *= 1099511628211ull;
  return h;
}
constexpr std::uint64_t kFnvBasis = 14695981039346656037ull;
}  // namespace

void Configuration::add_list(std::string_view key, const std::vector<std::string>& items) {
  std::uint64_t h = kFnvBasis;
  for (const std::string& item : items) h = fnv1a(h, item);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  add(key, std::to_string(items.size()) + " items, hash " + hex);
}

std::string Configuration::text() const {
  std::string out;
  if (elastic_) out += "elastic\n";
  for (const Value& v : values_) {
    out += static_cast<char>(v.kind);
    out += ' ';
    out += v.key;
    out += '=';
    out += v.value;
    out += '\n';
  }
  return out;
}

std::uint64_t Configuration::fingerprint() const {
  std::uint64_t h = kFnvBasis;
  for (const Value& v : values_) {
    if (v.kind == Kind::consumer) continue;
    h = fnv1a(fnv1a(h, v.key), v.value);
  }
  return h;
}

namespace {

// "3:shuffle.bufsize" -> "shuffle (stage 3) bufsize"; stage 0 is the pipeline's own.
std::string readable_key(std::string_view key) {
  const std::size_t colon = key.find(':');
  const std::size_t dot = key.find('.', colon == std::string_view::npos ? 0 : colon);
  if (colon == std::string_view::npos || dot == std::string_view::npos) return std::string(key);
  std::string_view number = key.substr(0, colon);
  std::string_view stage = key.substr(colon + 1, dot - colon - 1);
  std::string_view name = key.substr(dot + 1);
  if (number == "0") return std::string(name);
  return std::string(stage) + " (stage " + std::string(number) + ") " + std::string(name);
}

}  // namespace

std::vector<std::string> Configuration::differences(std::string_view saved) const {
  struct Saved {
    char kind;
    std::string_view value;
  };
  std::vector<std::pair<std::string_view, Saved>> theirs;
  bool saved_elastic = false;
  while (!saved.empty()) {
    std::size_t nl = saved.find('\n');
    std::string_view line = saved.substr(0, nl);
    saved = nl == std::string_view::npos ? std::string_view() : saved.substr(nl + 1);
    if (line == "elastic") {
      saved_elastic = true;
      continue;
    }
    std::size_t eq = line.find('=');
    if (line.size() < 3 || line[1] != ' ' || eq == std::string_view::npos) {
      return {"the state's configuration record is malformed"};
    }
    theirs.push_back({line.substr(2, eq - 2), {line[0], line.substr(eq + 1)}});
  }
  std::vector<std::string> out;
  if (saved_elastic != elastic_) {
    out.push_back(std::string("canonical streams: saved ") + (saved_elastic ? "on" : "off") +
                  ", this pipeline " + (elastic_ ? "on" : "off"));
    return out;
  }
  auto compared = [this](char kind) { return kind == static_cast<char>(Kind::job) || !elastic_; };
  std::size_t i = 0;
  for (const Value& mine : values_) {
    // Values are in chain order: walk both lists together, naming what is missing on either side.
    auto it = std::find_if(theirs.begin() + static_cast<std::ptrdiff_t>(i), theirs.end(),
                           [&](const auto& t) { return t.first == mine.key; });
    if (it == theirs.end()) {
      if (compared(static_cast<char>(mine.kind))) {
        out.push_back(readable_key(mine.key) + ": not in the saved pipeline");
      }
      continue;
    }
    for (auto skipped = theirs.begin() + static_cast<std::ptrdiff_t>(i); skipped != it; ++skipped) {
      if (compared(skipped->second.kind)) {
        out.push_back(readable_key(skipped->first) + ": not in this pipeline");
      }
    }
    if (compared(static_cast<char>(mine.kind)) && it->second.value != mine.value) {
      out.push_back(readable_key(mine.key) + ": saved " + std::string(it->second.value) +
                    ", this pipeline " + mine.value);
    }
    i = static_cast<std::size_t>(it - theirs.begin()) + 1;
  }
  for (; i < theirs.size(); ++i) {
    if (compared(theirs[i].second.kind)) {
      out.push_back(readable_key(theirs[i].first) + ": not in this pipeline");
    }
  }
  return out;
}

}  // namespace wds
