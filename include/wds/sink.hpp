// wds/sink.hpp: ByteSink, where written shards go.
//
//   auto sink = wds::open_sink("/data/out-000000.tar");   // or "-" for stdout
//   sink->write(bytes);
//   sink->close();   // reports any error; a sink destroyed without close() discards
//
//   wds::TarWriter tar(wds::open_sink("s3://bucket/train/shard-000000.tar"));
//   wds::ShardWriter out("https://upload.example/train-%06d.tar");
//
// URLs:
// - a plain path or file:// URL: written to "<path>.tmp-<pid>-<n>" and renamed into place on
//   close(), so a reader never sees a half-written shard under the final name and a failed
//   write leaves nothing behind.
// - "-": standard output.
// - s3://bucket/key, http://host/path, https://host/path: an upload. Written bytes are spooled
//   to an unlinked temporary file in $TMPDIR (else /tmp), so memory stays bounded for
//   multi-GB shards and the temporary disappears whatever happens; close() uploads it, and a
//   sink destroyed without close() uploads nothing. Nothing is sent before close(), so a wrong
//   bucket or key shows up there (a missing credential or a malformed URL already at open).
//   S3 is signed with SigV4 as the s3:// source is (credentials, region and endpoint as in
//   wds/remote.hpp, an S3Options in SinkOptions::backend_options first): up to
//   multipart_threshold bytes go in one PUT whose x-amz-content-sha256 is the payload's
//   SHA-256, computed while spooling; a larger object goes up as a multipart upload
//   (CreateMultipartUpload, UploadPart of part_size bytes, at least 5 MiB and grown as needed
//   to stay within S3's 10000 parts, CompleteMultipartUpload), aborted with
//   AbortMultipartUpload if any step fails, so no partial object or stray upload remains.
//   http(s):// is a plain PUT with Content-Length and the HttpOptions' extra headers (e.g.
//   Authorization); redirects are not followed. Every request is retried after an exponential
//   backoff on 5xx, 429 and network errors, up to HttpOptions::max_retries times in a row, as
//   sources are; TLS follows its verify_tls and ca_file.
// - pipe:CMD: CMD run by /bin/sh -c with the written bytes on its standard input (stdout and
//   stderr inherited), e.g. "pipe:gsutil cp - gs://b/x.tar". Refused unless
//   SinkOptions::allow_pipe or WDS_ALLOW_PIPE=1, since the URL is a shell command. close()
//   waits for the command and fails if it exits with a non-zero status; a sink destroyed
//   without close() stops it (SIGTERM to its process group, then SIGKILL) without ending its
//   input, though the command may already have acted on the bytes it was given.
//
// Errors: wds::Error naming the URL. Uploads: the cause names the request ("PUT", "UploadPart 2
// of 3", ...), the HTTP status and, for S3, the error's Code and Message:
// permission_denied for 401/403 (and no credentials, or an untrusted certificate), not_found
// for 404 (no such bucket), unavailable for 5xx, 429 and network errors once retries run out
// (and local I/O errors on the spool file), invalid_argument for a malformed URL or another
// status. Secrets never appear in messages.
// Thread safety: a ByteSink is used by one thread at a time; distinct sinks may be used from
// different threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "wds/remote.hpp"
#include "wds/source.hpp"

namespace wds {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  ByteSink(const ByteSink&) = delete;
  ByteSink& operator=(const ByteSink&) = delete;

  virtual void write(std::span<const std::byte> bytes) = 0;
  // Flushes and commits. Must be called once, after the last write.
  virtual void close() = 0;

  const std::string& url() const noexcept { return url_; }

 protected:
  explicit ByteSink(std::string url) : url_(std::move(url)) {}

 private:
  std::string url_;
};

// How uploads are made (s3://, http://, https://, pipe:); local sinks ignore it.
struct SinkOptions {
  // S3 objects larger than this go up as multipart uploads (at most 5 GiB in one PUT).
  std::uint64_t multipart_threshold = std::uint64_t{64} << 20;
  // Size of each part but the last (S3's minimum of 5 MiB applies).
  std::uint64_t part_size = std::uint64_t{16} << 20;
  // pipe: sinks run shell commands: refused unless allowed here or by WDS_ALLOW_PIPE=1.
  bool allow_pipe = false;
  // Options of the backends, by type (wds/source.hpp): HttpOptions (retries, backoff,
  // timeouts, TLS, extra headers; buffer_bytes unused), S3Options (endpoint, region, profile),
  // AzureOptions, a user backend's own.
  BackendOptions backend_options;
};

// A plain path, file:// URL, "-" for standard output, s3://, http(s):// or pipe: (see above),
// or a scheme whose backend was registered with a sink (wds/backend.hpp); with default
// SinkOptions. invalid_argument for a scheme no backend writes.
std::unique_ptr<ByteSink> open_sink(const std::string& url);
std::unique_ptr<ByteSink> open_sink(const std::string& url, const SinkOptions& options);

// A sink that appends to `out` in memory. `out` must outlive the sink.
std::unique_ptr<ByteSink> open_memory_sink(std::string url, std::string& out);

}  // namespace wds
