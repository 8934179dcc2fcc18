// A stand-in on 127.0.0.1 for Google's OAuth2 token endpoint and Cloud Storage's JSON API, for
// the gs:// backend's tests: objects held in memory, read (with Range), listed (prefix,
// delimiter "/", pages of page_size) and uploaded (uploadType=media); POST /token hands out
// tokens "token-1", "token-2", ... or the error it is told to give. With require_bearer, object
// requests without a token it handed out are answered 401, as Google answers them.
//
//   wds::test::GcsServer gcs;
//   gcs.put("bucket", "a/b.tar", bytes);
//   std::string token_uri = gcs.url("/token"), endpoint = gcs.endpoint();
//
// Thread-safety: every member may be called from any thread. One request per connection
// (tests/support/script_server.hpp serves it).
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lib/text.hpp"
#include "tests/support/script_server.hpp"

namespace wds::test {

class GcsServer {
 public:
  struct Exchange {
    std::string method, path;                    // path without the query, still encoded
    std::map<std::string, std::string> query;    // decoded
    std::map<std::string, std::string> headers;  // names lowercased
    std::string body;
  };

  GcsServer() = default;
  GcsServer(const GcsServer&) = delete;
  GcsServer& operator=(const GcsServer&) = delete;

  std::string endpoint() const { return server_.url(""); }
  std::string host() const { return "127.0.0.1:" + std::to_string(server_.port()); }
  std::string url(const std::string& path) const { return server_.url(path); }

  void put(const std::string& bucket, const std::string& name, std::string bytes) {
    std::lock_guard lock(mu_);
    objects_[bucket + "/" + name] = std::move(bytes);
  }
  std::optional<std::string> object(const std::string& bucket, const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = objects_.find(bucket + "/" + name);
    return it == objects_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  // Every request so far, in order of arrival.
  std::vector<Exchange> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::vector<Exchange> requests_to(const std::string& path_prefix) const {
    std::vector<Exchange> out;
    for (Exchange& e : requests()) {
      if (e.path.starts_with(path_prefix)) out.push_back(std::move(e));
    }
    return out;
  }

  // What POST /token answers: tokens that last expires_in seconds, or (token_status other
  // than 200) token_error as the body.
  void set_token_answer(int status, std::string error_body = "", int expires_in = 3600) {
    std::lock_guard lock(mu_);
    token_status_ = status;
    token_error_ = std::move(error_body);
    expires_in_ = expires_in;
  }
  void require_bearer(bool on) {
    std::lock_guard lock(mu_);
    require_bearer_ = on;
  }
  void set_page_size(std::size_t n) {
    std::lock_guard lock(mu_);
    page_size_ = n;
  }

 private:
  struct Answer {
    int status = 200;
    std::string body;
    std::string headers{};
  };

  static Answer json_error(int status, const std::string& message) {
    return {status, nlohmann::json{{"error", {{"code", status}, {"message", message}}}}.dump()};
  }

  Answer handle(const Exchange& e) {
    std::lock_guard lock(mu_);
    requests_.push_back(e);
    if (e.method == "POST" && e.path == "/token") {
      if (token_status_ != 200) return {token_status_, token_error_};
      tokens_.push_back("token-" + std::to_string(tokens_.size() + 1));
      return {200, nlohmann::json{{"access_token", tokens_.back()},
                                  {"expires_in", expires_in_},
                                  {"token_type", "Bearer"}}
                       .dump()};
    }
    if (require_bearer_) {
      auto auth = e.headers.find("authorization");
      const bool known =
          auth != e.headers.end() && auth->second.starts_with("Bearer ") &&
          std::find(tokens_.begin(), tokens_.end(), auth->second.substr(7)) != tokens_.end();
      if (!known) return json_error(401, "Anonymous caller does not have storage.objects.get");
    }
    const std::string api = "/storage/v1/b/", upload = "/upload/storage/v1/b/";
    if (e.method == "POST" && e.path.starts_with(upload) && e.path.ends_with("/o")) {
      const std::string bucket =
          percent_decode(e.path.substr(upload.size(), e.path.size() - upload.size() - 2));
      auto name = e.query.find("name");
      if (e.query.count("uploadType") == 0 || name == e.query.end()) {
        return json_error(400, "uploadType and name are required");
      }
      objects_[bucket + "/" + name->second] = e.body;
      return {200, nlohmann::json{{"bucket", bucket}, {"name", name->second}}.dump()};
    }
    if (e.method != "GET" || !e.path.starts_with(api)) return json_error(404, "Not Found");
    const std::string rest = e.path.substr(api.size());
    const std::size_t o = rest.find("/o");
    if (o == std::string::npos) return json_error(404, "Not Found");
    const std::string bucket = percent_decode(rest.substr(0, o));
    if (rest.size() == o + 2) return list(bucket, e);
    const std::string name = percent_decode(rest.substr(o + 3));
    auto it = objects_.find(bucket + "/" + name);
    if (it == objects_.end()) return json_error(404, "No such object: " + bucket + "/" + name);
    if (e.query.count("alt") == 0) return {200, nlohmann::json{{"name", name}}.dump()};
    const std::string& bytes = it->second;
    auto range = e.headers.find("range");
    if (range == e.headers.end()) return {200, bytes};
    // "bytes=A-" or "bytes=A-B", the only forms the client sends.
    const std::string spec = range->second.substr(6);
    const std::size_t from = std::stoull(spec.substr(0, spec.find('-')));
    const std::string last = spec.substr(spec.find('-') + 1);
    std::size_t to = last.empty() ? bytes.size() - 1 : std::stoull(last);
    to = std::min(to, bytes.size() - 1);
    if (from >= bytes.size()) return {416, ""};
    return {206, bytes.substr(from, to - from + 1),
            "Content-Range: bytes " + std::to_string(from) + "-" + std::to_string(to) + "/" +
                std::to_string(bytes.size()) + "\r\n"};
  }

  Answer list(const std::string& bucket, const Exchange& e) {
    const std::string prefix = e.query.count("prefix") ? e.query.at("prefix") : "";
    const bool folders = e.query.count("delimiter") && e.query.at("delimiter") == "/";
    std::vector<std::string> names;
    for (const auto& [key, bytes] : objects_) {
      if (!key.starts_with(bucket + "/")) continue;
      const std::string name = key.substr(bucket.size() + 1);
      if (!name.starts_with(prefix)) continue;
      if (folders && name.find('/', prefix.size()) != std::string::npos) continue;
      names.push_back(name);
    }
    const std::size_t start = e.query.count("pageToken") ? std::stoul(e.query.at("pageToken")) : 0;
    nlohmann::json page = {{"kind", "storage#objects"}, {"items", nlohmann::json::array()}};
    for (std::size_t i = start; i < names.size() && i < start + page_size_; ++i) {
      page["items"].push_back({{"name", names[i]}, {"bucket", bucket}});
    }
    if (start + page_size_ < names.size())
      page["nextPageToken"] = std::to_string(start + page_size_);
    return {200, page.dump()};
  }

  // The request's line and headers parsed, handled, and the answer as ScriptServer sends it.
  Reply answer(const std::string& head, const std::string& body) {
    Exchange e;
    e.body = body;
    std::size_t line_end = head.find("\r\n");
    const std::string line = head.substr(0, line_end);
    e.method = line.substr(0, line.find(' '));
    const std::string target =
        line.substr(e.method.size() + 1, line.rfind(' ') - e.method.size() - 1);
    e.path = target.substr(0, target.find('?'));
    const std::size_t question = target.find('?');
    const std::string q = question == std::string::npos ? "" : target.substr(question + 1);
    for (std::size_t at = 0; at < q.size();) {
      std::size_t amp = q.find('&', at);
      if (amp == std::string::npos) amp = q.size();
      const std::string pair = q.substr(at, amp - at);
      const std::size_t eq = pair.find('=');
      e.query[percent_decode(pair.substr(0, eq))] =
          eq == std::string::npos ? "" : percent_decode(pair.substr(eq + 1));
      at = amp + 1;
    }
    while (line_end + 2 < head.size()) {
      const std::size_t next = head.find("\r\n", line_end + 2);
      const std::string h = head.substr(line_end + 2, next - line_end - 2);
      const std::size_t colon = h.find(':');
      if (colon != std::string::npos) {
        e.headers[lowercase(h.substr(0, colon))] = std::string(trim(h.substr(colon + 1)));
      }
      line_end = next;
    }
    const Answer a = handle(e);
    return {"HTTP/1.1 " + std::to_string(a.status) + " X\r\n" + a.headers +
                "Content-Type: application/json\r\n",
            a.body};
  }

  mutable std::mutex mu_;
  std::map<std::string, std::string> objects_;  // "bucket/name" -> bytes
  std::vector<Exchange> requests_;
  std::vector<std::string> tokens_;  // handed out so far
  int token_status_ = 200;
  std::string token_error_;
  int expires_in_ = 3600;
  bool require_bearer_ = false;
  std::size_t page_size_ = 1000;
  // Last: it starts serving when made, once everything above is ready, and stops first.
  ScriptServer server_{
      [this](const std::string& head, const std::string& body) { return answer(head, body); }};
};

}  // namespace wds::test
