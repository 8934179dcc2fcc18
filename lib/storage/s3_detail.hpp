// What the S3 helpers' files (lib/storage/s3*.cpp, azure.cpp) share (internal to them).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace wds::s3::detail {

// An environment variable; unset and empty are the same, as in the AWS CLI.
inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

}  // namespace wds::s3::detail
