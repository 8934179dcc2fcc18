// Tar bytes written by hand, so that their fields can lie: for the tests of hostile shards.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "tests/support/fixtures.hpp"
#include "wds/source.hpp"

namespace wds::test {

// A ustar header block. `size` is the 12-byte size field as stored (octal_size or
// base256_size); the checksum is computed.
inline std::string raw_header(const std::string& name, const std::string& size, char type = '0') {
  std::string h(512, '\0');
  h.replace(0, name.size(), name);
  h.replace(100, 8, "0000644", 8);
  h.replace(108, 8, "0000000", 8);
  h.replace(116, 8, "0000000", 8);
  h.replace(124, 12, size);
  h.replace(136, 12, "00000000000", 12);
  h[156] = type;
  h.replace(257, 6, "ustar", 6);
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  char checksum[8];
  std::snprintf(checksum, sizeof checksum, "%06o", sum);
  h.replace(148, 7, checksum, 7);  // six digits, NUL, and the space already there
  return h;
}

inline std::string octal_size(std::uint64_t n) {
  char field[13];
  std::snprintf(field, sizeof field, "%011llo", static_cast<unsigned long long>(n));
  return std::string(field, 12);
}

// GNU base-256: the form tar uses for sizes of 8 GiB and more, and any size a header can hold.
inline std::string base256_size(std::uint64_t n) {
  std::string field(12, '\0');
  field[0] = static_cast<char>(0x80);
  for (int i = 0; i < 8; ++i) field[11 - i] = static_cast<char>(n >> (8 * i));
  return field;
}

// Data padded to whole 512-byte blocks.
inline std::string padded(std::string data) {
  data.resize((data.size() + 511) / 512 * 512, '\0');
  return data;
}

inline const std::string kEndBlocks(1024, '\0');

// A source that does not say its size, as a pipe or a chunked HTTP body.
class UnsizedSource final : public ByteSource {
 public:
  explicit UnsizedSource(const std::string& bytes, std::string url = "pipe:shard",
                         std::size_t chunk = 4096)
      : ByteSource(std::move(url)), inner_(memory_source(bytes, "", chunk)) {}
  std::span<const std::byte> read() override { return inner_->read(); }

 private:
  std::unique_ptr<ByteSource> inner_;
};

}  // namespace wds::test
