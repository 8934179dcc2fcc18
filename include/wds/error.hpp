// wds/error.hpp: the one exception type of the library, and error handlers.
//
// Every failure is reported as a wds::Error carrying a category (ErrorCode), the URL and the tar
// member it concerns (either may be empty) and the cause. Its what() reads
//
//   "corrupt data: s3://b/shard-000003.tar: member 'img7.cls': truncated tar archive"
//
// so a log line alone says what broke where. Exceptions rather than status codes, because a
// forgotten status check in a training loop would end an epoch silently.
//
// Stages that read many items (shards, members, samples) route their errors through an
// ErrorHandler, as WebDataset does: the handler returns true to skip the bad item and go on,
// false to end the stage's stream cleanly, or throws (reraise_exception, the default).
//
//   wds::TarSamplesOptions opts;
//   opts.handler = wds::warn_and_continue;  // log broken shards, keep training
//
// Thread safety: Error is an immutable value. The provided handlers may be called from any thread.
#pragma once

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace wds {

enum class ErrorCode {
  not_found,          // no such file, key or object (ENOENT, HTTP 404)
  unavailable,        // transient: I/O failure, network, 5xx; retrying may succeed
  corrupt_data,       // the bytes are not what they claim to be (bad tar, truncated shard)
  invalid_argument,   // the caller asked for something malformed (bad pattern, bad option)
  permission_denied,  // EACCES, HTTP 401/403
};

constexpr std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::not_found:
      return "not found";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::corrupt_data:
      return "corrupt data";
    case ErrorCode::invalid_argument:
      return "invalid argument";
    case ErrorCode::permission_denied:
      return "permission denied";
  }
  return "error";
}

class Error : public std::runtime_error {
 public:
  // url and member may be empty when the error is not about one.
  Error(ErrorCode code, std::string url, std::string member, std::string cause)
      : std::runtime_error(format(code, url, member, cause)),
        code_(code),
        url_(std::move(url)),
        member_(std::move(member)),
        cause_(std::move(cause)) {}

  // The usual way to make one: the category's name, with the cause alone (an error about no
  // URL or member in particular) or with the URL and member it concerns.
  //   throw wds::Error::invalid_argument("shuffle: a buffer of 0 samples");
  //   throw wds::Error::corrupt_data(url, member, "truncated tar archive");
  static Error not_found(std::string cause) { return of(ErrorCode::not_found, std::move(cause)); }
  static Error unavailable(std::string cause) {
    return of(ErrorCode::unavailable, std::move(cause));
  }
  static Error corrupt_data(std::string cause) {
    return of(ErrorCode::corrupt_data, std::move(cause));
  }
  static Error invalid_argument(std::string cause) {
    return of(ErrorCode::invalid_argument, std::move(cause));
  }
  static Error permission_denied(std::string cause) {
    return of(ErrorCode::permission_denied, std::move(cause));
  }
  static Error not_found(std::string url, std::string member, std::string cause) {
    return Error(ErrorCode::not_found, std::move(url), std::move(member), std::move(cause));
  }
  static Error unavailable(std::string url, std::string member, std::string cause) {
    return Error(ErrorCode::unavailable, std::move(url), std::move(member), std::move(cause));
  }
  static Error corrupt_data(std::string url, std::string member, std::string cause) {
    return Error(ErrorCode::corrupt_data, std::move(url), std::move(member), std::move(cause));
  }
  static Error invalid_argument(std::string url, std::string member, std::string cause) {
    return Error(ErrorCode::invalid_argument, std::move(url), std::move(member), std::move(cause));
  }
  static Error permission_denied(std::string url, std::string member, std::string cause) {
    return Error(ErrorCode::permission_denied, std::move(url), std::move(member), std::move(cause));
  }

  ErrorCode code() const noexcept { return code_; }
  const std::string& url() const noexcept { return url_; }
  const std::string& member() const noexcept { return member_; }
  const std::string& cause() const noexcept { return cause_; }
  // True for errors where trying the same thing again may succeed.
  bool retryable() const noexcept { return code_ == ErrorCode::unavailable; }

 private:
  static Error of(ErrorCode code, std::string cause) {
    return Error(code, std::string(), std::string(), std::move(cause));
  }
  static std::string format(ErrorCode code, const std::string& url, const std::string& member,
                            const std::string& cause) {
    std::string s(to_string(code));
    s += ": ";
    if (!url.empty()) s += url + ": ";
    if (!member.empty()) s += "member '" + member + "': ";
    s += cause;
    return s;
  }

  ErrorCode code_;
  std::string url_;
  std::string member_;
  std::string cause_;
};

// Decides what a stage does with a failed item: true = skip it and continue, false = end the
// stream cleanly, throw = abort (the error reaches the caller).
using ErrorHandler = std::function<bool(const Error&)>;

// WebDataset's handler names and meanings. The warn_ variants print what() to stderr.
[[noreturn]] inline bool reraise_exception(const Error& e) {
  throw e;
}
inline bool ignore_and_continue(const Error&) {
  return true;
}
inline bool ignore_and_stop(const Error&) {
  return false;
}
inline bool warn_and_continue(const Error& e) {
  std::fprintf(stderr, "wds: warning: %s (skipped)\n", e.what());
  return true;
}
inline bool warn_and_stop(const Error& e) {
  std::fprintf(stderr, "wds: warning: %s (stopping)\n", e.what());
  return false;
}

}  // namespace wds
