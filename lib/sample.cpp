#include "wds/sample.hpp"

#include "wds/error.hpp"

namespace wds {

Sample::Sample(std::string key, std::shared_ptr<const ShardInfo> shard, std::uint64_t offset)
    : key_(std::move(key)), shard_(std::move(shard)), offset_(offset) {}

const std::string& Sample::empty_string() noexcept {
  static const std::string empty;
  return empty;
}

const Bytes* Sample::find(std::string_view ext) const noexcept {
  for (const Field& f : fields_) {
    if (f.ext == ext) return &f.data;
  }
  return nullptr;
}

Bytes* Sample::find(std::string_view ext) noexcept {
  return const_cast<Bytes*>(static_cast<const Sample*>(this)->find(ext));
}

const Bytes& Sample::at(std::string_view ext) const {
  if (const Bytes* b = find(ext)) return *b;
  std::string have;
  for (const Field& f : fields_) have += (have.empty() ? "" : ", ") + f.ext;
  throw Error(ErrorCode::invalid_argument, url(), key_,
              "sample has no field '" + std::string(ext) +
                  "' (it has: " + (have.empty() ? "none" : have) + ")");
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
