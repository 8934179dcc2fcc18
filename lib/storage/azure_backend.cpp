// az:// blobs: reads and listings through the HTTP byte sources, uploads as block blobs, every
// request signed (Shared Key) or carrying the SAS token by a transport wrapped around the
// shared one (lib/storage/azure.hpp).
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "lib/storage/azure.hpp"
#include "lib/storage/backends.hpp"
#include "lib/storage/http_client.hpp"
#include "lib/storage/http_source.hpp"
#include "lib/storage/s3_backend.hpp"
#include "lib/storage/s3_xml.hpp"
#include "lib/storage/upload_sink.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kMaxPut = 5000 * kMiB;    // Azure: one Put Blob
constexpr std::uint64_t kMaxBlock = 4000 * kMiB;  // Azure: one Put Block
constexpr std::uint64_t kMaxBlocks = 50000;       // Azure: blocks of a blob

struct Context {
  azure::Location location;
  azure::Account account;
  std::shared_ptr<http::Transport> transport;  // signing
};

Context context_for(const std::string& url, const AzureOptions& options,
                    const BackendOptions& slots) {
  Context c;
  c.location = azure::parse_az_url(url);  // its errors name the URL
  try {
    c.account = azure::resolve_account(options);
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
  c.transport = azure::signing_transport(http::transport_for(slots), c.account);
  return c;
}

http::Summary summary() {
  return [](const std::string& body) { return xml::error_excerpt(body); };
}

std::unique_ptr<ByteSource> open_azure_source(const std::string& url, const OpenOptions& options) {
  Context c =
      context_for(url, options_of<AzureOptions>(options.backend_options), options.backend_options);
  if (c.location.blob.empty() || c.location.blob.back() == '/') {
    throw Error::invalid_argument(
        url, "", "names no blob (a prefix is listed by resolve_urls, with a trailing '/' or '*')");
  }
  const std::string blob_url = azure::resource_url(c.account, c.location);
  return open_http_body(
      url, [blob_url] { return http::Request{.url = blob_url}; },
      options_of<HttpOptions>(options.backend_options), options.offset, summary(), options.length,
      options.on_retry, c.transport, parts_of(options));
}

std::vector<std::string> list_azure(const std::string& pattern, const OpenOptions& options) {
  const AzureOptions& azure = options_of<AzureOptions>(options.backend_options);
  Context c = context_for(pattern, azure, options.backend_options);
  const std::string& blob = c.location.blob;
  const std::size_t star = blob.find('*');
  const std::string prefix = blob.substr(0, star == std::string::npos ? blob.size() : star);
  const HttpOptions& http = options_of<HttpOptions>(options.backend_options);
  std::vector<std::string> urls;
  std::optional<std::string> marker;
  do {
    // One level, as a directory listing is: blobs directly under the prefix's folder.
    std::vector<std::pair<std::string, std::string>> query = {
        {"restype", "container"},
        {"comp", "list"},
        {"prefix", prefix},
        {"delimiter", "/"},
        {"maxresults", std::to_string(std::clamp(azure.max_results, 1, 5000))}};
    if (marker) query.emplace_back("marker", *marker);
    const std::string list_url = azure::resource_url(c.account, {c.location.container, ""}, query);
    std::string body = http_get_body(
        pattern, [list_url] { return http::Request{.url = list_url}; }, http, summary(),
        options.on_retry, c.transport);
    azure::BlobPage page;
    try {
      page = azure::parse_list_blobs(body);
    } catch (const Error& e) {
      rethrow_for(pattern, e);
    }
    for (const std::string& name : page.names) {
      if (star != std::string::npos && ::fnmatch(blob.c_str(), name.c_str(), FNM_PATHNAME) != 0) {
        continue;
      }
      urls.push_back("az://" + c.location.container + "/" + name);
    }
    marker = page.next_marker;
  } while (marker);
  if (urls.empty()) throw Error::not_found(pattern, "", "no blobs match");
  std::sort(urls.begin(), urls.end());
  return urls;
}

// Spooled, then one Put Blob, or above single_limit Put Block for every block and Put Block
// List to commit them in order. Blocks never committed are dropped by Azure after a week, so a
// failed upload leaves no blob behind and nothing to clean up.
class AzureSink final : public SpoolSink {
 public:
  AzureSink(std::string url, Context context, const SinkOptions& options,
            std::uint64_t single_limit, std::uint64_t block_size)
      : SpoolSink(url, std::nullopt),
        context_(std::move(context)),
        single_limit_(single_limit),
        block_size_(block_size),
        client_(std::move(url), options_of<HttpOptions>(options.backend_options),
                context_.transport,
                [](const std::string& body) { return xml::error_excerpt(body); }) {}

 private:
  using Query = std::vector<std::pair<std::string, std::string>>;

  std::function<http::Request()> put(Query query, std::vector<std::string> headers,
                                     const http::Body* body) const {
    return
        [this, url = azure::resource_url(context_.account, context_.location, query),
         headers = std::move(headers), body] { return client_.request("PUT", url, headers, body); };
  }

  void upload() override {
    if (size() <= single_limit_) {
      const http::Body body{.fd = fd(), .offset = 0, .length = size()};
      client_.send("Put Blob", put({}, {"x-ms-blob-type: BlockBlob"}, &body));
      return;
    }
    std::uint64_t block = block_size_;
    if ((size() + block - 1) / block > kMaxBlocks) {
      block = ((size() + kMaxBlocks - 1) / kMaxBlocks + kMiB - 1) / kMiB * kMiB;
      if (block > kMaxBlock) {
        throw Error::invalid_argument(
            url(), "",
            "an Azure block blob holds at most 50000 blocks of 4000 MiB; " +
                std::to_string(size()) + " bytes were written");
      }
    }
    const std::size_t n = static_cast<std::size_t>((size() + block - 1) / block);
    std::string xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
    for (std::size_t i = 0; i < n; ++i) {
      // Every id of a blob has the same length, as Azure requires.
      char raw[32];
      std::snprintf(raw, sizeof raw, "wds-block-%08zu", i);
      const std::string id = azure::base64_encode(raw);
      const std::uint64_t at = i * block;
      const http::Body body{.fd = fd(), .offset = at, .length = std::min(block, size() - at)};
      client_.send("Put Block " + std::to_string(i + 1) + " of " + std::to_string(n),
                   put({{"comp", "block"}, {"blockid", id}}, {}, &body));
      xml += "<Latest>" + id + "</Latest>";
    }
    xml += "</BlockList>";
    const http::Body body{.length = xml.size(), .memory = xml};
    client_.send("Put Block List",
                 put({{"comp", "blocklist"}}, {"Content-Type: application/xml"}, &body));
  }

  Context context_;
  std::uint64_t single_limit_;
  std::uint64_t block_size_;
  http::Client client_;
};

std::unique_ptr<ByteSink> open_azure_sink(const std::string& url, const SinkOptions& options) {
  const AzureOptions& azure = options_of<AzureOptions>(options.backend_options);
  Context c = context_for(url, azure, options.backend_options);
  if (c.location.blob.empty() || c.location.blob.back() == '/') {
    throw Error::invalid_argument(url, "", "names no blob (az://container/blob)");
  }
  const std::uint64_t single = std::min(azure.single_put_limit, kMaxPut);
  const std::uint64_t block = std::clamp<std::uint64_t>(azure.block_size, 1, kMaxBlock);
  return std::make_unique<AzureSink>(url, std::move(c), options, single, block);
}

}  // namespace

Backend azure_backend() {
  return Backend{
      .schemes = {"az"},
      .open = open_azure_source,
      .list = list_azure,
      .open_sink = open_azure_sink,
  };
}

}  // namespace wds
