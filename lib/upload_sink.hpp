// Upload sinks (internal): s3://, http(s):// and pipe: destinations for open_sink, which picks
// them by scheme. What they do is described in wds/sink.hpp.
#pragma once

#include <memory>
#include <string>

#include "wds/sink.hpp"

namespace wds {

// s3://bucket/key: spooled, then one signed PUT or a multipart upload on close().
// invalid_argument for a malformed URL or one naming no object; permission_denied without
// credentials (checked here, before anything is written).
std::unique_ptr<ByteSink> open_s3_sink(const std::string& url, const SinkOptions& options);

// http(s)://host/path: spooled, then one PUT on close().
std::unique_ptr<ByteSink> open_http_sink(const std::string& url, const SinkOptions& options);

// pipe:CMD: CMD's standard input. permission_denied unless options.allow_pipe or
// WDS_ALLOW_PIPE=1.
std::unique_ptr<ByteSink> open_pipe_sink(const std::string& url, const SinkOptions& options);

}  // namespace wds
