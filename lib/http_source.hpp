// HTTP(S) byte sources over libcurl: the transfer thread, retries with Range resume, and a
// whole-body GET for small responses (listings).
#pragma once

#include <curl/curl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wds/error.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"

namespace wds {

struct HttpRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
};
// Called for every attempt, so that a signed request gets a fresh date.
using RequestFactory = std::function<HttpRequest()>;
// Turns an error response's body into a short message ("NoSuchKey: ...").
using ErrorBodySummary = std::function<std::string(const std::string& body)>;

// Streams the resource from byte `offset`, `length` bytes if set (else to the end). `url` names
// it in errors and Sample::url(). `on_retry` (OpenOptions::on_retry) is called on the transfer
// thread before each retry.
std::unique_ptr<ByteSource> open_http_stream(std::string url, RequestFactory make,
                                             const HttpOptions& options, std::uint64_t offset,
                                             ErrorBodySummary summary = nullptr,
                                             std::optional<std::uint64_t> length = std::nullopt,
                                             RetryHook on_retry = nullptr);

// The whole body of a small resource, with the same retries and error mapping.
std::string http_get_body(const std::string& url, const RequestFactory& make,
                          const HttpOptions& options, ErrorBodySummary summary = nullptr,
                          RetryHook on_retry = nullptr);

// How an HTTP status that is an error is reported: 404 and 410 as not_found, 401 and 403 as
// permission_denied, any other as invalid_argument (meaningful for statuses that are not
// transient).
ErrorCode http_status_error_code(long status);
// True for the statuses worth trying again: 429 and 5xx.
bool http_status_transient(long status);
// Sets on a curl handle what HttpOptions says of connections: the connect timeout, the
// low-speed limit, TLS verification and the CA file.
void set_connection_options(CURL* handle, const HttpOptions& options);

// The factories open_url uses for http, https and s3 URLs.
std::unique_ptr<ByteSource> open_http_source(const std::string& url, const OpenOptions& options);
std::unique_ptr<ByteSource> open_s3_source(const std::string& url, const OpenOptions& options);
// The objects an s3:// pattern (trailing '/' or '*') names, sorted.
std::vector<std::string> list_s3(const std::string& pattern, const OpenOptions& options);

}  // namespace wds
