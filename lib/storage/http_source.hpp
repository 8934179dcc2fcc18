// HTTP(S) byte sources through the HTTP client (lib/storage/http_client.hpp): a transfer thread
// or the reader's own, retries with Range resume, and a whole-body GET for small responses
// (listings).
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
// in errors and Sample::url(). `on_retry` (OpenOptions::on_retry) is called before each retry,
// on the transfer thread or the reader's. `transport`: null for curl's. `parts`: unset,
// OpenOptions' defaults. From a host where one GET per shard does (a first GET measured at
// parts.single_stream_rate, or parts that did not pay off), the body is read by one GET moved on
// by read() on the reader's thread (arriving that fast, it renews the host's record); else by a
// transfer thread that reads ahead (into HttpOptions::buffer_bytes) and, on a slow connection,
// opens parts.
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

// Records `host` ("scheme://authority") as one where one GET per shard does, as a first GET
// measured fast does: the next shards opened from it are read on their reader's thread. For
// tests that read through that path from their first shard.
void record_one_get_host(const std::string& host);

// The factory open_url uses for http and https URLs.
std::unique_ptr<ByteSource> open_http_source(const std::string& url, const OpenOptions& options);

}  // namespace wds
