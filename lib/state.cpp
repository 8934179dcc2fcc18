// Parsing of the pipeline state's text form.
#include "wds/state.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "wds/error.hpp"

namespace wds {

StateReader::StateReader(std::string_view text) : text_(text) {
  constexpr std::string_view kHeader = "wds-state-1";
  if (text_.substr(0, kHeader.size()) != kHeader) {
    throw Error(ErrorCode::invalid_argument, "", "",
                "not a wds pipeline state (it does not start with 'wds-state-1')");
  }
  pos_ = kHeader.size();
}

void StateReader::fail(const std::string& what) const {
  throw Error(ErrorCode::invalid_argument, "", "",
              "malformed pipeline state at character " + std::to_string(pos_) + ": " + what +
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
    throw Error(ErrorCode::invalid_argument, std::string(url), "",
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
