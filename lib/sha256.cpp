#include "lib/sha256.hpp"

#include <openssl/evp.h>

#include "wds/error.hpp"

namespace wds {
namespace {

[[noreturn]] void failed() {
  throw Error::unavailable("OpenSSL digest failed");
}

}  // namespace

std::string to_hex(const unsigned char* p, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 0xF];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr)) failed();
  return to_hex(md, len);
}

MessageDigest::MessageDigest(const EVP_MD* md) : md_(md), ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) throw Error::unavailable("OpenSSL: out of memory");
  reset();
}

MessageDigest::~MessageDigest() {
  EVP_MD_CTX_free(ctx_);
}

void MessageDigest::reset() {
  if (!EVP_DigestInit_ex(ctx_, md_, nullptr)) failed();
}

void MessageDigest::update(const void* data, std::size_t n) {
  if (n && !EVP_DigestUpdate(ctx_, data, n)) failed();
}

std::string MessageDigest::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_DigestFinal_ex(ctx_, md, &len)) failed();
  reset();
  return to_hex(md, len);
}

Sha256::Sha256() : MessageDigest(EVP_sha256()) {}

Md5::Md5() : MessageDigest(EVP_md5()) {}

}  // namespace wds
