// S3 helpers: AWS Signature Version 4 (canonical request, string to sign, HMAC chain) and the
// request URL encoded exactly as signed.
#include "lib/storage/s3.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <ctime>
#include <map>

#include "lib/sha256.hpp"
#include "lib/storage/s3_detail.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::s3 {

using detail::env;
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

// ---- hashing ----------------------------------------------------------------------------------

using Digest = std::array<unsigned char, 32>;

Digest hmac_sha256(std::string_view key, std::string_view data) {
  Digest out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len) ||
      len != out.size()) {
    throw Error::unavailable("OpenSSL HMAC-SHA256 failed");
  }
  return out;
}

std::string_view as_view(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

// ---- canonical request pieces -----------------------------------------------------------------

// RFC 7230 token characters: what a header name may be made of.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_ascii_alnum(c) && !std::strchr("!#$%&'*+-.^_`|~", c)) return false;
  }
  return true;
}

// A value that would break the request line or inject a header (CR, LF, NUL, other controls).
bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7F;
  });
}

// SigV4's Trimall: no leading or trailing blanks, inner runs of blanks as one space.
std::string trim_all(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      pending_space = !out.empty();
    } else {
      if (pending_space) out += ' ';
      pending_space = false;
      out += c;
    }
  }
  return out;
}

// Lowercased names, trimmed values, sorted by name; a repeated name becomes one entry with the
// values joined by ',' (how SigV4 and HTTP both read repeated headers).
HeaderList normalize_headers(const HeaderList& headers) {
  HeaderList out;
  for (const auto& [name, value] : headers)
    out.emplace_back(lowercase(trim(name)), trim_all(value));
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  HeaderList merged;
  for (auto& h : out) {
    if (!merged.empty() && merged.back().first == h.first) {
      merged.back().second += "," + h.second;
    } else {
      merged.push_back(std::move(h));
    }
  }
  return merged;
}

std::string canonical_uri(std::string_view path) {
  // S3 signs the path as sent: encoded once, '/' kept, no dot-segment or '//' normalisation.
  std::string p = path.starts_with('/') ? std::string(path) : "/" + std::string(path);
  return uri_encode(p, false);
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(uri_encode(k, true), uri_encode(v, true));
  std::sort(enc.begin(), enc.end());  // by encoded name, then encoded value (byte order)
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

bool valid_amz_date(std::string_view d) {
  if (d.size() != 16 || d[8] != 'T' || d[15] != 'Z') return false;
  for (std::size_t i = 0; i < 15; ++i) {
    if (i != 8 && !is_ascii_digit(d[i])) return false;
  }
  return true;
}

}  // namespace

std::string uri_encode(std::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (is_ascii_alnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out += c;
    } else {
      auto u = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    }
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  return wds::sha256_hex(data);
}

std::string canonical_request(const Request& r, const HeaderList& signed_headers_lowercase_sorted) {
  HeaderList headers = normalize_headers(signed_headers_lowercase_sorted);
  std::string out =
      r.method + "\n" + canonical_uri(r.path) + "\n" + canonical_query(r.query) + "\n";
  std::string names;
  for (const auto& [name, value] : headers) {
    out += name + ":" + value + "\n";
    if (!names.empty()) names += ';';
    names += name;
  }
  out += "\n" + names + "\n" + r.payload_sha256;
  return out;
}

std::string string_to_sign(std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request_hash) {
  std::string out(kAlgorithm);
  out += '\n';
  out += amz_date;
  out += '\n';
  out += scope;
  out += '\n';
  out += canonical_request_hash;
  return out;
}

HeaderList sign(const Request& r, const Credentials& c, const std::string& region,
                const std::string& service, std::string_view amz_date) {
  auto invalid = [](std::string cause) { throw Error::invalid_argument(std::move(cause)); };
  if (!valid_amz_date(amz_date)) {
    invalid("SigV4 date '" + std::string(amz_date.substr(0, 40)) + "' is not YYYYMMDDTHHMMSSZ");
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    invalid("cannot sign an S3 request without an access key id and a secret access key");
  }
  if (has_control(c.access_key_id) || c.access_key_id.find('/') != std::string::npos ||
      has_control(c.session_token)) {
    invalid("the access key id or session token contains characters a header cannot carry");
  }
  for (const std::string* part : {&region, &service}) {
    if (part->empty() || part->find('/') != std::string::npos || has_control(*part)) {
      invalid("region and service must be non-empty, without '/' (got '" + region + "', '" +
              service + "')");
    }
  }
  if (!is_token(r.method)) invalid("malformed HTTP method '" + r.method + "'");
  if (r.host.empty() || has_control(r.host) ||
      r.host.find_first_of(" \t/?#@") != std::string::npos) {
    invalid("malformed host '" + r.host + "'");
  }
  if (r.payload_sha256.empty() || has_control(r.payload_sha256)) {
    invalid("malformed payload hash '" + r.payload_sha256 + "'");
  }

  HeaderList own;
  for (const auto& [name, value] : r.headers) {
    std::string n = lowercase(trim(name));
    if (!is_token(n)) invalid("malformed header name '" + name + "'");
    if (has_control(value)) invalid("the value of header '" + n + "' contains control characters");
    if (n == "host" || n == "x-amz-date" || n == "x-amz-content-sha256" ||
        n == "x-amz-security-token" || n == "authorization") {
      invalid("header '" + n + "' is set by the signer; pass it through Request or Credentials");
    }
    own.emplace_back(std::move(n), value);
  }
  own = normalize_headers(own);

  HeaderList out = {{"host", r.host},
                    {"x-amz-date", std::string(amz_date)},
                    {"x-amz-content-sha256", r.payload_sha256}};
  if (!c.session_token.empty()) out.emplace_back("x-amz-security-token", c.session_token);
  out.insert(out.end(), own.begin(), own.end());

  HeaderList signed_headers = normalize_headers(out);
  std::string names;
  for (const auto& h : signed_headers) names += (names.empty() ? "" : ";") + h.first;

  std::string_view date = amz_date.substr(0, 8);
  std::string scope = std::string(date) + "/" + region + "/" + service + "/aws4_request";
  std::string sts =
      string_to_sign(amz_date, scope, sha256_hex(canonical_request(r, signed_headers)));

  std::string secret = "AWS4" + c.secret_access_key;
  Digest key = hmac_sha256(secret, date);
  OPENSSL_cleanse(secret.data(), secret.size());
  key = hmac_sha256(as_view(key), region);
  key = hmac_sha256(as_view(key), service);
  key = hmac_sha256(as_view(key), "aws4_request");
  Digest sig = hmac_sha256(as_view(key), sts);
  OPENSSL_cleanse(key.data(), key.size());

  out.emplace_back("authorization", std::string(kAlgorithm) + " Credential=" + c.access_key_id +
                                        "/" + scope + ", SignedHeaders=" + names +
                                        ", Signature=" + to_hex(sig.data(), sig.size()));
  return out;
}

std::string request_url(const Request& r, std::string_view scheme) {
  if (scheme != "http" && scheme != "https") {
    throw Error::invalid_argument("S3 request scheme must be http or https, not '" +
                                  std::string(scheme) + "'");
  }
  std::string url = std::string(scheme) + "://" + r.host + canonical_uri(r.path);
  std::string q = canonical_query(r.query);
  if (!q.empty()) url += "?" + q;
  return url;
}

std::string amz_date_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return std::string(buf, n);
}

}  // namespace wds::s3
