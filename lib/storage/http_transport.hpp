// The transport under the HTTP client (internal): sends one request and reports its response as
// it arrives. libcurl is the real one; a test puts its own in its place (through
// OpenOptions/SinkOptions::backend_options, as a TransportOption) to test retries, Range resume
// and multipart uploads without a server.
//
// A Transport hands out Connections; a Connection sends one request at a time, and the curl one
// keeps its connections open for the next request (all of them share one connection cache, so
// a shard opened after another reuses its connection). A request either runs to its end in
// perform(), or is started and then moved on by its caller, step by step (start()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wds/remote.hpp"

namespace wds::http {

// A request body: `length` bytes of the file `fd` from `offset` (read with pread, so that an
// attempt can start over), or of `memory` when fd < 0.
struct Body {
  int fd = -1;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string_view memory{};
};

struct Request {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers{};  // "Name: value", HttpOptions::headers included
  const Body* body = nullptr;
  // Uploads are never redirected: the redirect would carry their credentials elsewhere.
  bool follow_redirects = false;
};

// Told of the response while it arrives.
class ResponseHandler {
 public:
  virtual ~ResponseHandler() = default;
  // A response starts with this status (a redirect or "100 Continue" makes several); the
  // headers after it are its own.
  virtual void on_status(long status) = 0;
  // A header of the current response: the name lowercased, the value without surrounding
  // white space.
  virtual void on_header(std::string_view name, std::string_view value) = 0;
  // Body bytes of the final response. false ends the transfer (Outcome::aborted).
  virtual bool on_body(std::span<const std::byte> bytes) = 0;
  // Asked now and then, even while no byte arrives: true ends the transfer (aborted).
  virtual bool cancelled() { return false; }
  // Asked before body bytes are handed over in a Transfer's step: true keeps them for the next
  // step (the caller has enough for now). A transport may hand over some anyway.
  virtual bool paused() { return false; }
};

// How one request ended.
struct Outcome {
  enum class Kind {
    responded,  // a whole response arrived: see status (any status, errors included)
    aborted,    // the handler ended it, or the body could not be read (read_errno)
    bad_url,    // the URL cannot be sent (malformed, not http or https)
    untrusted,  // the server's certificate is not trusted (retrying cannot help)
    redirects,  // more redirects than allowed: a loop (retrying cannot help)
    failed,     // a network failure (refused, reset, timed out, body cut short)
  };
  Kind kind = Kind::failed;
  long status = 0;     // of the last response, 0 if none
  std::string error;   // what went wrong, for all but responded
  int read_errno = 0;  // the request body could not be read: errno
};

// A request under way that its caller moves on (Connection::start): the handler is told of the
// response inside step(), on the caller's thread, so nothing runs between steps but the
// network's own buffering.
class Transfer {
 public:
  virtual ~Transfer() = default;  // ends the request if it still runs
  // Moves the request on, waiting at most `wait` for the network: its outcome once it ended
  // (then call no more), else nullopt.
  virtual std::optional<Outcome> step(std::chrono::milliseconds wait) = 0;
};

class Connection {
 public:
  virtual ~Connection() = default;
  // Sends `request` and returns once the whole response arrived (or failed).
  virtual Outcome perform(const Request& request, ResponseHandler& handler) = 0;
  // Starts `request` without waiting for its response (curl sends it as far as the network takes
  // it at once). `request` and `handler` must outlive the Transfer, and the connection sends
  // nothing else meanwhile. By default the first step performs the whole request.
  virtual std::unique_ptr<Transfer> start(const Request& request, ResponseHandler& handler);
};

class Transport {
 public:
  virtual ~Transport() = default;
  // A connection set up as `options` says (timeouts, TLS).
  virtual std::unique_ptr<Connection> connect(const HttpOptions& options) = 0;
};

// Why `url` cannot be sent, "no host" say, or nullopt when it can (as curl parses it).
std::optional<std::string> url_problem(const std::string& url);

// libcurl, with one connection cache (and DNS and TLS session cache) for the whole process.
std::shared_ptr<Transport> curl_transport();

// The transport the http and s3 backends use when one is set in backend_options.
struct TransportOption {
  std::shared_ptr<Transport> transport;
};

}  // namespace wds::http
