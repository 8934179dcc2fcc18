// SHA-256 over OpenSSL (internal): whole messages and incremental hashing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace wds {

// The n bytes at p in lowercase hex, two digits a byte.
std::string to_hex(const unsigned char* p, std::size_t n);

// Lowercase hex SHA-256 of data. unavailable if OpenSSL fails.
std::string sha256_hex(std::string_view data);

// A message hashed piece by piece.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t n);
  // The lowercase hex digest; the object is reset for the next message.
  std::string hex();

 private:
  void reset();
  evp_md_ctx_st* ctx_;
};

}  // namespace wds
