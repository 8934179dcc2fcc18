// Parsing of the pipeline state's text form.
#include "wds/state.hpp"

#include <charconv>

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
