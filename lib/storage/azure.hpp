// Azure Blob Storage helpers (internal): az:// URLs, the account and credentials (connection
// strings, the environment, AzureOptions), Shared Key signing and the XML of List Blobs. The
// backend itself (reads, listings, block blob uploads) is in lib/storage/azure_backend.cpp.
//
// Requests are signed by a Transport wrapped around the real one (signing_transport), at the
// moment each is sent: Shared Key covers the Range header, which the HTTP byte source adds to
// every attempt itself, and the time.
//
// Thread safety: everything is a pure function except resolve_account, which reads the
// environment; a signing transport is as thread-safe as the one it wraps.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib/storage/http_transport.hpp"
#include "wds/remote.hpp"

namespace wds::azure {

// "az://container/blob" -> {container, blob}; blob may be empty or end in '/' (for listing).
// invalid_argument naming the URL if malformed (no container, or one with characters Azure's
// container names do not have).
struct Location {
  std::string container, blob;
};
Location parse_az_url(std::string_view url);

struct Account {
  std::string name;      // the storage account, "devstoreaccount1"
  std::string key;       // the account key, base64 (decoded when signing)
  std::string sas;       // a SAS token, without '?'
  std::string endpoint;  // the blob service's URL, no trailing '/'
  bool anonymous = false;
};

// The account a connection string describes (keys matched without regard to case, unknown ones
// ignored). invalid_argument for a malformed string, naming the part but never a secret.
Account parse_connection_string(std::string_view connection_string);

// The account as wds/remote.hpp (AzureOptions) describes it: options, else
// AZURE_STORAGE_CONNECTION_STRING, else AZURE_STORAGE_ACCOUNT + AZURE_STORAGE_KEY or
// AZURE_STORAGE_SAS_TOKEN; options.key, sas_token and endpoint override what was found.
// permission_denied when there is no account or no credential (unless anonymous), saying how to
// give them; invalid_argument for a key that is not base64. Errors name no URL.
Account resolve_account(const AzureOptions& options);

// The URL of a container (blob empty) or blob: endpoint/container/blob, the blob's name
// percent-encoded ('/' kept), then `query` (raw names and values, encoded here) and the SAS.
std::string resource_url(const Account& account, const Location& location,
                         const std::vector<std::pair<std::string, std::string>>& query = {});

// The Shared Key string to sign for `request` as it will be sent (its headers must already hold
// x-ms-date and x-ms-version): the verb, the standard headers (Content-Length from the body, ""
// for none or 0), the x-ms- headers canonicalized, and the canonicalized resource
// "/<account><path>" with the query's parameters, one per line, names lowercased.
std::string string_to_sign(const http::Request& request, const std::string& account);

// Adds x-ms-date (`date`, RFC 1123), x-ms-version and, with a key, the Authorization header
// ("SharedKey account:signature") to `request`.
void sign(http::Request& request, const Account& account, const std::string& date);

// The current time as HTTP dates are written: "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date_now();

// Base64 (RFC 4648, with padding). decode: nullopt if `s` is not base64.
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view s);

// A transport that signs every request for `account` (or adds its SAS token's headers) right
// before `inner` sends it, and never follows a redirect with the credentials.
std::shared_ptr<http::Transport> signing_transport(std::shared_ptr<http::Transport> inner,
                                                   Account account);

// A List Blobs response body -> the blob names of its <Blobs> and the NextMarker when there is
// one. corrupt_data if it is not an <EnumerationResults> document.
struct BlobPage {
  std::vector<std::string> names;
  std::optional<std::string> next_marker;
};
BlobPage parse_list_blobs(std::string_view xml);

// The API version sent as x-ms-version.
inline constexpr const char* kVersion = "2021-08-06";

}  // namespace wds::azure
