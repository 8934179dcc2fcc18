// The s3 backend's shared pieces (internal): where an s3:// URL's requests go and how they are
// signed, resolved once for reads, listings and uploads alike.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/storage/http_transport.hpp"
#include "lib/storage/s3.hpp"
#include "wds/backend.hpp"
#include "wds/remote.hpp"

namespace wds {

struct S3Target {
  s3::Location location;
  // Unsigned requests, no credentials (S3Options::anonymous, AWS_NO_SIGN_REQUEST).
  bool anonymous = false;
  s3::Credentials credentials;
  std::string region;
  s3::Endpoint endpoint;
  // The scheme of the URLs listings give ("gs" for GCS's XML API, which speaks S3).
  std::string scheme = "s3";
  // Which credential signs the requests, added to error messages (never a secret); "": none.
  std::string credential{};
};

// Parses `url` (s3://bucket/key) and resolves credentials (none when anonymous), region and
// endpoint as `options` and the environment say (lib/storage/s3.hpp). Errors name `url` (and, for a
// bad endpoint, it too); invalid_argument for an endpoint that is not http:// or https://.
S3Target resolve_s3_target(const std::string& url, const S3Options& options);

// A `method` request for `path` (e.g. bucket_path + "/" + key) signed with SigV4 now: its URL
// and the headers to send (Host left to the HTTP client, which sends the one signed).
// Anonymous: no headers.
http::Request sign_s3_request(const S3Target& target, const std::string& method,
                              const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& query,
                              const std::string& payload_sha256 = s3::sha256_hex(""));

// Reads, lists and writes with a target resolved already, as the s3 backend does (the gs
// backend's HMAC keys go through these too). Errors name `url` or `pattern`.
std::unique_ptr<ByteSource> open_s3_object(const std::string& url, S3Target target,
                                           const OpenOptions& options);
std::vector<std::string> list_s3_objects(const std::string& pattern, S3Target target,
                                         const OpenOptions& options);
std::unique_ptr<ByteSink> open_s3_object_sink(const std::string& url, S3Target target,
                                              const SinkOptions& options);

// An error response's summary (s3::error_summary), with target.credential when it is set.
std::string s3_error_summary(const S3Target& target, const std::string& body);

// True when AWS_NO_SIGN_REQUEST asks for unsigned requests ("YES", "true" or "1", in any case).
bool no_sign_request_from_env();

// An error from a helper that names no URL (or another one), as an error about `url`.
[[noreturn]] void rethrow_for(const std::string& url, const Error& e);

}  // namespace wds
