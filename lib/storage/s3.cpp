// S3 helpers: s3:// URLs and where their requests go.
#include "lib/storage/s3.hpp"

#include <cstdlib>

#include "lib/sha256.hpp"
#include "lib/storage/s3_detail.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::s3 {

using detail::env;

std::string to_hex(const unsigned char* p, std::size_t n) {
  return wds::to_hex(p, n);
}

Location parse_s3_url(std::string_view url) {
  return parse_bucket_url(url, "s3", "use the environment or ~/.aws/credentials");
}

Location parse_bucket_url(std::string_view url, std::string_view scheme,
                          std::string_view credentials_hint) {
  const std::string prefix = std::string(scheme) + "://";
  auto invalid = [&](std::string shown, const std::string& why) {
    throw Error::invalid_argument(std::move(shown), "",
                                  why + " (expected " + prefix + "bucket/key)");
  };
  if (url.size() < prefix.size() || lowercase(url.substr(0, prefix.size())) != prefix) {
    invalid(std::string(url), "the URL does not start with " + prefix);
  }
  std::string_view rest = url.substr(prefix.size());
  std::size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  std::string_view key = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  if (std::size_t at = bucket.rfind('@'); at != std::string_view::npos) {
    // Never echo what precedes '@': it would be a key or a secret.
    invalid(prefix + "...@" + std::string(rest.substr(at + 1)),
            "credentials in the URL are not supported; " + std::string(credentials_hint));
  }
  if (bucket.empty()) invalid(std::string(url), "no bucket name");
  for (char c : bucket) {
    if (!is_ascii_alnum(c) && c != '.' && c != '-' && c != '_') {
      invalid(std::string(url), "bucket name '" + std::string(bucket) +
                                    "' may only contain letters, digits, '.', '-' and '_'");
    }
  }
  return {std::string(bucket), std::string(key)};
}

Endpoint resolve_endpoint(const std::string& bucket, const std::string& endpoint_option,
                          const std::string& region) {
  std::string endpoint = endpoint_option;
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL").value_or("");
  if (endpoint.empty()) {
    // A bucket name with dots is not covered by AWS's certificate as a virtual host.
    if (bucket.find('.') != std::string::npos) {
      return {"https", "s3." + region + ".amazonaws.com", "/" + bucket};
    }
    return {"https", bucket + ".s3." + region + ".amazonaws.com", ""};
  }
  std::size_t sep = endpoint.find("://");
  if (sep == std::string::npos) {
    throw Error::invalid_argument(endpoint, "",
                                  "S3 endpoint must be a URL such as http://127.0.0.1:9000");
  }
  std::string scheme = lowercase(endpoint.substr(0, sep));
  std::string rest = endpoint.substr(sep + 3);
  std::size_t slash = rest.find('/');
  std::string host = rest.substr(0, slash);
  // curl leaves a default port out of the Host header, so the signed host must too.
  const std::string default_port = scheme == "https" ? ":443" : scheme == "http" ? ":80" : "";
  if (!default_port.empty() && host.size() > default_port.size() && host.ends_with(default_port)) {
    host.resize(host.size() - default_port.size());
  }
  std::string base = slash == std::string::npos ? "" : rest.substr(slash);
  while (!base.empty() && base.back() == '/') base.pop_back();
  return {scheme, host, base + "/" + bucket};
}

}  // namespace wds::s3
