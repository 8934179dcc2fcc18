#include "wds/sample.hpp"

#include "lib/fields.hpp"

namespace wds {

Sample::Sample(std::string key, std::shared_ptr<const ShardInfo> shard, std::uint64_t offset)
    : key_(std::move(key)), shard_(std::move(shard)), offset_(offset) {}

const std::string& Sample::empty_string() noexcept {
  static const std::string empty;
  return empty;
}

const Bytes* Sample::find(std::string_view ext) const noexcept {
  const auto f = detail::find_field(fields_, ext);
  return f == fields_.end() ? nullptr : &f->data;
}

Bytes* Sample::find(std::string_view ext) noexcept {
  return const_cast<Bytes*>(static_cast<const Sample*>(this)->find(ext));
}

const Bytes& Sample::at(std::string_view ext) const {
  if (const Bytes* b = find(ext)) return *b;
  throw detail::missing_field(fields_, ext, url(), key_);
}

bool Sample::add(std::string ext, Bytes data) {
  if (find(ext)) return false;
  if (fields_.empty()) fields_.reserve(4);
  fields_.push_back(Field{std::move(ext), std::move(data)});
  return true;
}

std::size_t Sample::payload_bytes() const noexcept {
  std::size_t n = 0;
  for (const Field& f : fields_) n += f.data.size();
  return n;
}

}  // namespace wds
