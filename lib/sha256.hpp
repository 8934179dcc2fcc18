// SHA-256 and MD5 over OpenSSL (internal): whole messages and incremental hashing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct evp_md_ctx_st;
struct evp_md_st;

namespace wds {

// The n bytes at p in lowercase hex, two digits a byte.
std::string to_hex(const unsigned char* p, std::size_t n);

// Lowercase hex SHA-256 of data. unavailable if OpenSSL fails.
std::string sha256_hex(std::string_view data);

// A message hashed piece by piece with one of OpenSSL's digests.
class MessageDigest {
 public:
  MessageDigest(const MessageDigest&) = delete;
  MessageDigest& operator=(const MessageDigest&) = delete;
  ~MessageDigest();

  void update(const void* data, std::size_t n);
  // The lowercase hex digest; the object is reset for the next message.
  std::string hex();

 protected:
  explicit MessageDigest(const evp_md_st* md);

 private:
  void reset();
  const evp_md_st* md_;
  evp_md_ctx_st* ctx_;
};

class Sha256 : public MessageDigest {
 public:
  Sha256();
};

// MD5, for the checksums other tools write (wids indexes' md5sum), never for security.
class Md5 : public MessageDigest {
 public:
  Md5();
};

}  // namespace wds
