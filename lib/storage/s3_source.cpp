// s3:// shards and listings: SigV4-signed requests read through the HTTP byte sources.
#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>

#include "lib/storage/backends.hpp"
#include "lib/storage/http_client.hpp"
#include "lib/storage/http_source.hpp"
#include "lib/storage/s3.hpp"
#include "lib/storage/s3_backend.hpp"
#include "lib/storage/upload_sink.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

struct Context {
  S3Target target;
  HttpOptions http;
  std::shared_ptr<http::Transport> transport;
};

Context context_for(S3Target target, const OpenOptions& options) {
  return Context{
      std::move(target),
      options_of<HttpOptions>(options.backend_options),
      http::transport_for(options.backend_options),
  };
}

// A signed GET, made afresh for every attempt (the signature covers the time).
RequestFactory signed_get(const Context& c, std::string path,
                          std::vector<std::pair<std::string, std::string>> query) {
  return [target = c.target, path = std::move(path), query = std::move(query)] {
    return sign_s3_request(target, "GET", path, query);
  };
}

http::Summary s3_summary(const Context& c) {
  return [target = c.target](const std::string& body) { return s3_error_summary(target, body); };
}

// True if some object's key starts with `prefix`. One request for at most one key, not retried:
// it only adds a hint to an error.
bool has_objects_under(const Context& c, const std::string& prefix) {
  HttpOptions http = c.http;
  http.max_retries = 0;
  std::string body =
      http_get_body(c.target.scheme + "://" + c.target.location.bucket + "/" + prefix,
                    signed_get(c, c.target.endpoint.bucket_path + "/",
                               {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", "1"}}),
                    http, s3_summary(c), nullptr, c.transport);
  return !s3::parse_list_objects_v2(body).keys.empty();
}

// The summary of a GET's error response; for a missing key that is the "folder" of other
// objects (s3://b/train for s3://b/train/...), how to list them. The listing is asked for only
// then, on the error path.
http::Summary object_summary(const Context& c, const std::string& url) {
  return [c, url](const std::string& body) {
    std::string summary = s3_error_summary(c.target, body);
    if (summary.rfind("NoSuchKey", 0) != 0) return summary;
    try {
      if (has_objects_under(c, c.target.location.key + "/")) {
        summary += " (objects exist under " + url + "/: give " + url + "/ to list them)";
      }
    } catch (const std::exception&) {
      // No permission to list, or the listing failed: the error stays as it was.
    }
    return summary;
  };
}

std::unique_ptr<ByteSource> open_s3_source(const std::string& url, const OpenOptions& options) {
  return open_s3_object(url, resolve_s3_target(url, options_of<S3Options>(options.backend_options)),
                        options);
}

std::vector<std::string> list_s3(const std::string& pattern, const OpenOptions& options) {
  return list_s3_objects(
      pattern, resolve_s3_target(pattern, options_of<S3Options>(options.backend_options)), options);
}

}  // namespace

std::unique_ptr<ByteSource> open_s3_object(const std::string& url, S3Target target,
                                           const OpenOptions& options) {
  Context c = context_for(std::move(target), options);
  if (c.target.location.key.empty() || c.target.location.key.back() == '/') {
    throw Error::invalid_argument(url, "",
                                  "names no object (a prefix is listed by "
                                  "resolve_urls, with a trailing '/' or '*')");
  }
  return open_http_body(
      url, signed_get(c, c.target.endpoint.bucket_path + "/" + c.target.location.key, {}), c.http,
      options.offset, object_summary(c, url), options.length, options.on_retry, c.transport,
      parts_of(options));
}

std::vector<std::string> list_s3_objects(const std::string& pattern, S3Target target,
                                         const OpenOptions& options) {
  Context c = context_for(std::move(target), options);
  const std::string& key = c.target.location.key;
  const std::size_t star = key.find('*');
  const std::string prefix = key.substr(0, star == std::string::npos ? key.size() : star);
  std::vector<std::string> urls;
  std::optional<std::string> token;
  do {
    // One level, as a directory listing is: keys directly under the prefix's folder.
    std::vector<std::pair<std::string, std::string>> query = {
        {"list-type", "2"}, {"prefix", prefix}, {"delimiter", "/"}};
    if (token) query.emplace_back("continuation-token", *token);
    std::string body =
        http_get_body(pattern, signed_get(c, c.target.endpoint.bucket_path + "/", std::move(query)),
                      c.http, s3_summary(c), options.on_retry, c.transport);
    s3::ListPage page = s3::parse_list_objects_v2(body);
    for (const std::string& k : page.keys) {
      if (star != std::string::npos && ::fnmatch(key.c_str(), k.c_str(), FNM_PATHNAME) != 0) {
        continue;
      }
      urls.push_back(c.target.scheme + "://" + c.target.location.bucket + "/" + k);
    }
    token = page.next_token;
  } while (token);
  if (urls.empty()) throw Error::not_found(pattern, "", "no objects match");
  std::sort(urls.begin(), urls.end());
  return urls;
}

S3Target resolve_s3_target(const std::string& url, const S3Options& options) {
  S3Target t;
  t.location = s3::parse_s3_url(url);  // its errors name the URL (never credentials in it)
  t.anonymous = options.anonymous || no_sign_request_from_env();
  try {
    if (!t.anonymous) t.credentials = s3::resolve_credentials(options.profile);
    t.region = options.region.empty() ? s3::resolve_region(options.profile) : options.region;
    t.endpoint = s3::resolve_endpoint(t.location.bucket, options.endpoint, t.region);
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
  if (t.endpoint.scheme != "http" && t.endpoint.scheme != "https") {
    throw Error(
        ErrorCode::invalid_argument, url, "",
        "the S3 endpoint must be an http:// or https:// URL, not " + t.endpoint.scheme + "://");
  }
  return t;
}

http::Request sign_s3_request(const S3Target& target, const std::string& method,
                              const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& query,
                              const std::string& payload_sha256) {
  s3::Request r;
  r.method = method;
  r.host = target.endpoint.host;
  r.path = path;
  r.query = query;
  r.payload_sha256 = payload_sha256;
  http::Request out{.method = method, .url = s3::request_url(r, target.endpoint.scheme)};
  if (target.anonymous) return out;
  for (const auto& [name, value] :
       s3::sign(r, target.credentials, target.region, "s3", s3::amz_date_now())) {
    if (name != "host") out.headers.push_back(name + ": " + value);  // curl sends Host
  }
  return out;
}

std::string s3_error_summary(const S3Target& target, const std::string& body) {
  std::string summary = s3::error_summary(body);
  if (!target.credential.empty()) summary += " (sent with " + target.credential + ")";
  return summary;
}

bool no_sign_request_from_env() {
  const char* v = std::getenv("AWS_NO_SIGN_REQUEST");
  if (!v) return false;
  const std::string value = lowercase(trim(v));
  return value == "yes" || value == "true" || value == "1";
}

void rethrow_for(const std::string& url, const Error& e) {
  std::string cause = e.cause();
  if (!e.url().empty() && e.url() != url) cause += " (" + e.url() + ")";
  throw Error(e.code(), url, e.member(), cause);
}

Backend s3_backend() {
  return Backend{
      .schemes = {"s3"},
      .open = open_s3_source,
      .list = list_s3,
      .open_sink = open_s3_sink,
  };
}

}  // namespace wds
