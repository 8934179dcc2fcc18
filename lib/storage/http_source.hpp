// HTTP(S) byte sources through the HTTP client (lib/storage/http_client.hpp): the transfer thread,
// retries with Range resume, and a whole-body GET for small responses (listings).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/storage/http_client.hpp"
#include "lib/storage/http_transport.hpp"
#include "wds/error.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"

namespace wds {

// The request to read with, made for every attempt so that a signed request gets a fresh date:
// its method (GET), URL and headers; HttpOptions::headers and Range are added to them.
using RequestFactory = std::function<http::Request()>;

// How a large resource is read by ranged GETs in parallel (OpenOptions::parallel_parts and
// part_size). parallel 1: one GET.
struct RangedParts {
  std::size_t parallel = 1;
  std::uint64_t size = std::uint64_t{8} << 20;
  double single_stream_rate = 250e6;  // bytes per second; 0: parts whatever the rate
};
RangedParts parts_of(const OpenOptions& options);

// The resource's body from byte `offset`, `length` bytes if set (else to the end): one GET,
// resumed with Range requests, or ranged parts read in parallel as `parts` says. `url` names it
// in errors and Sample::url(). `on_retry` (OpenOptions::on_retry) is called on the transfer
// thread before each retry. `transport`: null for curl's. `parts`: unset, OpenOptions'
// defaults.
std::unique_ptr<ByteSource> open_http_body(std::string url, RequestFactory make,
                                           const HttpOptions& options, std::uint64_t offset,
                                           http::Summary summary = nullptr,
                                           std::optional<std::uint64_t> length = std::nullopt,
                                           RetryHook on_retry = nullptr,
                                           std::shared_ptr<http::Transport> transport = nullptr,
                                           std::optional<RangedParts> parts = std::nullopt);

// The whole body of a small resource, with the same retries and error mapping.
std::string http_get_body(const std::string& url, const RequestFactory& make,
                          const HttpOptions& options, http::Summary summary = nullptr,
                          RetryHook on_retry = nullptr,
                          std::shared_ptr<http::Transport> transport = nullptr);

// The factory open_url uses for http and https URLs.
std::unique_ptr<ByteSource> open_http_source(const std::string& url, const OpenOptions& options);

}  // namespace wds
