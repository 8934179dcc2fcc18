// Google Cloud Storage helpers (internal): gs:// URLs, JSON key files, and OAuth2 access tokens
// for them (a service account's JWT, or gcloud's refresh token, exchanged at a token endpoint).
//
//   gcs::KeyFile key = gcs::read_key_file(path);
//   std::string token = gcs::access_token(key, gcs::kReadOnlyScope, http, transport);
//   // send "Authorization: Bearer " + token
//
// Thread safety: access_token may be called from any thread; the tokens of one key and scope are
// fetched one at a time and shared by the whole process. The rest are pure functions (but
// read_key_file reads the file).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lib/storage/http_transport.hpp"
#include "wds/remote.hpp"

namespace wds::gcs {

inline constexpr const char* kReadOnlyScope =
    "https://www.googleapis.com/auth/devstorage.read_only";
inline constexpr const char* kReadWriteScope =
    "https://www.googleapis.com/auth/devstorage.read_write";
// Where gcloud's user credentials are refreshed (their file names no token_uri).
inline constexpr const char* kDefaultTokenUri = "https://oauth2.googleapis.com/token";

// "gs://bucket/object" -> {bucket, object}. The object is taken as written (not
// percent-decoded) and may be empty or end in '/', for listing. invalid_argument if malformed.
struct Location {
  std::string bucket, object;
};
Location parse_gs_url(std::string_view url);

// A JSON key file: a service account's key (type "service_account": client_email, private_key
// in PEM, token_uri) or gcloud's user credentials (type "authorized_user": client_id,
// client_secret, refresh_token; token_uri if present, else kDefaultTokenUri).
struct KeyFile {
  enum class Type { service_account, authorized_user };
  Type type = Type::service_account;
  std::string path;  // where it was read, for messages
  std::string client_email, private_key;
  std::string client_id, client_secret, refresh_token;
  std::string token_uri;
};

// invalid_argument naming `path` when `json` is not such a key (not JSON, another type, a
// field missing, a private key that is not PEM); never shows a secret.
KeyFile parse_key_file(const std::string& path, std::string_view json);
// The file read and parsed; not_found when it does not exist, permission_denied when it cannot
// be read.
KeyFile read_key_file(const std::string& path);

// Who the key is, for messages: "service account NAME (key file PATH)".
std::string describe(const KeyFile& key);

// Base64url (RFC 4648 section 5) without padding, as JWTs use.
std::string base64url(std::string_view bytes);

// A service account's JWT assertion "header.claims.signature": header
// {"alg":"RS256","typ":"JWT"}, claims iss = client_email, scope, aud = token_uri, iat = now,
// exp = now + 3600; signed RS256 with the private key.
std::string jwt_assertion(const KeyFile& key, const std::string& scope, std::int64_t now_seconds);

// An access token for `key` and `scope`: the process's cached one, or a new one from the key's
// token endpoint when none is cached or the cached one expires within min(5 minutes, half its
// life). Errors name the token endpoint: permission_denied (with the endpoint's error text) when
// it refuses the key, unavailable when it cannot be reached after the retries.
std::string access_token(const KeyFile& key, const std::string& scope, const HttpOptions& http,
                         const std::shared_ptr<http::Transport>& transport);

// The summary of an error response from Google's JSON APIs ({"error":{"message":..}}, or
// OAuth2's {"error":"invalid_grant","error_description":..}); else a short excerpt.
std::string json_error_summary(const std::string& body);

}  // namespace wds::gcs
