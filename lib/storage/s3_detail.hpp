// What the S3 helpers' files (lib/s3*.cpp) share (internal to them).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include "wds/error.hpp"

namespace wds::s3::detail {

[[noreturn]] inline void fail(ErrorCode code, std::string url, std::string cause) {
  throw Error(code, std::move(url), "", std::move(cause));
}

// An environment variable; unset and empty are the same, as in the AWS CLI.
inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

}  // namespace wds::s3::detail
