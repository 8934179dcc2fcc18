// Members to samples: WebDataset's tar_file_expander and group_by_keys in one pass, so a
// member's bytes go from libarchive straight into the sample's field.
#include <utility>

#include "wds/tar_samples.hpp"

#include <string.h>

namespace wds {
namespace {

void lowercase_ascii(std::string& s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
}

std::string field_list(const Sample& s) {
  std::string out;
  for (const Field& f : s.fields()) out += (out.empty() ? "" : ", ") + f.ext;
  return out.empty() ? "none" : out;
}

}  // namespace

std::optional<KeyExt> split_member_name(std::string_view name) {
  // WebDataset's regex ^((?:.*/|)[^.]+)[.]([^/]*)$ splits at the first dot of the last path
  // component, and accepts the key iff it ends in a non-empty run of non-dots that starts at the
  // beginning of the name or right after a '/'. That is checked here without a regex, in one
  // pass over the name in the common case (this runs once per member).
  const char* begin = name.data();
  const void* slash = name.empty() ? nullptr : ::memrchr(begin, '/', name.size());
  std::size_t base = slash ? static_cast<const char*>(slash) - begin + 1 : 0;
  const void* dot_ptr = ::memchr(begin + base, '.', name.size() - base);
  if (!dot_ptr) return std::nullopt;
  std::size_t dot = static_cast<const char*>(dot_ptr) - begin;
  if (dot == 0) return std::nullopt;
  if (dot == base) {
    // The basename starts with '.', so the run must end at the '/' before it ("dir/.a.txt" is
    // key "dir/"): it must lie beyond the key's last dot and not be the key's last character.
    std::string_view key = name.substr(0, dot);
    std::size_t last_dot = key.rfind('.');
    if (last_dot != std::string_view::npos) {
      std::size_t run_slash = key.find('/', last_dot + 1);
      if (run_slash == std::string_view::npos || run_slash + 1 >= key.size()) return std::nullopt;
    }
  }
  return KeyExt{name.substr(0, dot), name.substr(dot + 1)};
}

bool is_meta_member(std::string_view name) {
  auto dunder = [](std::string_view s) {
    return s.size() >= 2 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__";
  };
  std::size_t slash = name.find('/');
  if (slash == std::string_view::npos) return dunder(name);
  std::string_view top = name.substr(0, slash);
  return top.size() >= 4 && dunder(top);
}

ShardSamples::ShardSamples(std::unique_ptr<ByteSource> source, ErrorHandler handler,
                           TarReaderOptions tar)
    : reader_(std::move(source), tar), handler_(std::move(handler)) {
  url_ = std::make_shared<const std::string>(reader_.url());
  std::string local = reader_.source().local_path();
  if (!local.empty()) local_path_ = std::make_shared<const std::string>(std::move(local));
  if (!handler_) handler_ = reraise_exception;
}

std::optional<Sample> ShardSamples::next() {
  if (done_) return std::nullopt;
  Sample sample;
  bool started = false;
  // A read error ends the shard; the handler (which may throw) is called outside the try, so
  // an error it raises is not mistaken for another read error.
  std::optional<Error> read_error;
  for (;;) {
    const TarEntry* e = nullptr;
    try {
      e = pending_ ? std::exchange(pending_, nullptr) : reader_.next();
    } catch (const Error& err) {
      read_error = err;
      break;
    }
    if (!e) {
      done_ = true;
      if (started) return sample;
      return std::nullopt;
    }
    if (e->type != EntryType::file || is_meta_member(e->name)) continue;
    std::optional<KeyExt> parts = split_member_name(e->name);
    if (!parts) continue;
    if (started && parts->key != sample.key()) {
      pending_ = e;  // first member of the next sample; its data is read on the next call
      return sample;
    }
    if (!started) {
      sample = Sample(std::string(parts->key), url_, local_path_);
      started = true;
    }
    std::string ext(parts->ext);
    lowercase_ascii(ext);
    if (sample.find(ext)) {
      Error dup(ErrorCode::corrupt_data, *url_, e->name,
                "duplicate extension '" + ext + "' in sample '" + sample.key() +
                    "' (the first is kept, this member dropped)");
      if (handler_(dup)) continue;  // unread data is skipped by the reader
      done_ = stopped_ = true;
      return std::nullopt;
    }
    Bytes data(e->size);
    try {
      reader_.read_data(data.span());
    } catch (const Error& err) {
      read_error = err;
      break;
    }
    sample.add(std::move(ext), std::move(data));
  }
  done_ = failed_ = true;
  std::string cause = read_error->cause();
  if (started) {
    cause += "; the incomplete sample '" + sample.key() + "' (fields read: " + field_list(sample) +
             ") was dropped";
  }
  const std::string& url = read_error->url().empty() ? *url_ : read_error->url();
  if (!handler_(Error(read_error->code(), url, read_error->member(), cause))) stopped_ = true;
  return std::nullopt;
}

TarSamples::TarSamples(std::vector<std::string> urls, TarSamplesOptions options)
    : urls_(std::move(urls)), options_(std::move(options)) {
  if (!options_.handler) options_.handler = reraise_exception;
}

std::optional<Sample> TarSamples::next() {
  while (!stopped_) {
    if (!current_) {
      if (next_url_ >= urls_.size()) return std::nullopt;
      const std::string& url = urls_[next_url_++];
      try {
        current_ = std::make_unique<ShardSamples>(open_url(url, options_.open), options_.handler,
                                                  options_.tar);
        ++opened_;
      } catch (const Error& e) {
        ++failed_;
        if (!options_.handler(e)) stopped_ = true;
        continue;
      }
    }
    if (std::optional<Sample> s = current_->next()) return s;
    if (current_->failed()) ++failed_;
    if (current_->stopped()) stopped_ = true;
    current_.reset();
  }
  return std::nullopt;
}

}  // namespace wds
