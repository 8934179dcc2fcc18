// The s3:// sink: the spooled object goes up in one signed PUT whose x-amz-content-sha256 is
// the payload's SHA-256 (computed while spooling), or above the threshold as a multipart upload
// (CreateMultipartUpload, UploadPart, CompleteMultipartUpload), aborted if any step fails.
#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lib/sha256.hpp"
#include "lib/storage/backends.hpp"
#include "lib/storage/http_client.hpp"
#include "lib/storage/s3.hpp"
#include "lib/storage/s3_backend.hpp"
#include "lib/storage/upload_sink.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kMinPart = 5 * kMiB;         // S3: every part but the last
constexpr std::uint64_t kMaxPart = 5 * 1024 * kMiB;  // S3: 5 GiB per part or single PUT
constexpr std::uint64_t kMaxParts = 10000;           // S3: parts per upload
constexpr int kAbortRetries = 2;                     // AbortMultipartUpload, best effort

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

class S3Sink final : public SpoolSink {
 public:
  S3Sink(std::string url, S3Target target, const SinkOptions& options, std::uint64_t single_limit,
         std::uint64_t part_size)
      : SpoolSink(url, Hashing{single_limit, part_size}),
        target_(std::move(target)),
        single_limit_(single_limit),
        part_size_(part_size),
        path_(target_.endpoint.bucket_path + "/" + target_.location.key),
        client_(std::move(url), options_of<HttpOptions>(options.backend_options),
                http::transport_for(options.backend_options),
                [target = target_](const std::string& body) {
                  return s3_error_summary(target, body);
                }) {}

 private:
  using Query = std::vector<std::pair<std::string, std::string>>;

  // A request made afresh for every attempt (the signature covers the time).
  std::function<http::Request()> signed_request(std::string method, Query query,
                                                std::string payload_sha256,
                                                const http::Body* body) const {
    return [this, method = std::move(method), query = std::move(query),
            payload_sha256 = std::move(payload_sha256), body] {
      http::Request made = sign_s3_request(target_, method, path_, query, payload_sha256);
      return client_.request(made.method, std::move(made.url), made.headers, body);
    };
  }

  void upload() override {
    if (size() <= single_limit_) {
      const http::Body body{.fd = fd(), .offset = 0, .length = size()};
      client_.send("PUT", signed_request("PUT", {}, *whole_hash(), &body));
    } else {
      multipart();
    }
  }

  void multipart() {
    // Parts of part_size_ (their hashes are ready), unless that makes more than S3 allows:
    // then bigger parts, hashed now from the file.
    std::uint64_t part = part_size_;
    std::vector<std::string> hashes = part_hashes();
    if ((size() + part - 1) / part > kMaxParts) {
      part = ((size() + kMaxParts - 1) / kMaxParts + kMiB - 1) / kMiB * kMiB;
      if (part > kMaxPart) {
        throw Error(
            ErrorCode::invalid_argument, url(), "",
            "an S3 object holds at most 5 TiB; " + std::to_string(size()) + " bytes were written");
      }
      hashes.clear();
      for (std::uint64_t at = 0; at < size(); at += part) {
        hashes.push_back(hash_range(at, std::min(part, size() - at)));
      }
    }
    const std::size_t n = hashes.size();

    const http::Body empty;
    http::Response created = client_.send(
        "CreateMultipartUpload", signed_request("POST", {{"uploads", ""}}, sha256_hex(""), &empty));
    std::string upload_id;
    try {
      upload_id = s3::parse_upload_id(created.body);
    } catch (const Error& e) {
      rethrow_for(url(), e);
    }

    try {
      std::string xml = "<CompleteMultipartUpload>";
      for (std::size_t i = 0; i < n; ++i) {
        const std::string number = std::to_string(i + 1);
        const std::string what = "UploadPart " + number + " of " + std::to_string(n);
        const std::uint64_t at = i * part;
        const http::Body body{.fd = fd(), .offset = at, .length = std::min(part, size() - at)};
        http::Response r = client_.send(
            what, signed_request("PUT", {{"partNumber", number}, {"uploadId", upload_id}},
                                 hashes[i], &body));
        if (r.etag.empty()) {
          throw Error::corrupt_data(url(), "", what + ": the answer has no ETag");
        }
        xml += "<Part><PartNumber>" + number + "</PartNumber><ETag>" + xml_escape(r.etag) +
               "</ETag></Part>";
      }
      xml += "</CompleteMultipartUpload>";
      const http::Body body{.length = xml.size(), .memory = xml};
      // It can answer 200 and still fail, with an error document as its body: retried.
      client_.send("CompleteMultipartUpload",
                   signed_request("POST", {{"uploadId", upload_id}}, sha256_hex(xml), &body),
                   [](const std::string& b) { return s3::is_error_document(b); });
    } catch (const Error& e) {
      abort_upload(upload_id, e);
    }
  }

  // Aborts the multipart upload, so that its parts are not kept (and billed), and throws the
  // error that ended it, saying if the abort failed too.
  [[noreturn]] void abort_upload(const std::string& upload_id, const Error& cause) {
    try {
      client_.send("AbortMultipartUpload",
                   signed_request("DELETE", {{"uploadId", upload_id}}, sha256_hex(""), nullptr),
                   nullptr, kAbortRetries);
    } catch (const Error& e) {
      throw Error(cause.code(), cause.url(), cause.member(),
                  cause.cause() + " (and AbortMultipartUpload of upload " + upload_id +
                      " failed too: " + e.cause() + "; its parts remain until it is aborted)");
    }
    throw cause;
  }

  S3Target target_;
  std::uint64_t single_limit_;
  std::uint64_t part_size_;
  std::string path_;
  http::Client client_;
};

}  // namespace

std::unique_ptr<ByteSink> open_s3_sink(const std::string& url, const SinkOptions& options) {
  s3::Location location = s3::parse_s3_url(url);  // its errors name the URL
  if (location.key.empty() || location.key.back() == '/') {
    throw Error::invalid_argument(url, "", "names no object (s3://bucket/key)");
  }
  return open_s3_object_sink(
      url, resolve_s3_target(url, options_of<S3Options>(options.backend_options)), options);
}

std::unique_ptr<ByteSink> open_s3_object_sink(const std::string& url, S3Target t,
                                              const SinkOptions& options) {
  if (t.location.key.empty() || t.location.key.back() == '/') {
    throw Error::invalid_argument(url, "", "names no object");
  }
  // Up to 5 GiB go in one PUT; parts are at least 5 MiB and at most 5 GiB.
  const std::uint64_t single = std::min(options.multipart_threshold, kMaxPart);
  const std::uint64_t part = std::clamp(options.part_size, kMinPart, kMaxPart);
  return std::make_unique<S3Sink>(url, std::move(t), options, single, part);
}

}  // namespace wds
