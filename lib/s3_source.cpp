// s3:// shards and listings: SigV4-signed requests sent through the HTTP stream.
#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>

#include "lib/backends.hpp"
#include "lib/http_source.hpp"
#include "lib/s3.hpp"
#include "lib/upload_sink.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

struct Context {
  s3::Location location;
  s3::Credentials credentials;
  std::string region;
  s3::Endpoint target;  // where requests go (s3::resolve_endpoint)
  HttpOptions http;
};

Context context_for(const std::string& url, const OpenOptions& options) {
  const S3Options& s3o = options_of(options.backend_options, options.s3.get());
  Context c;
  c.location = s3::parse_s3_url(url);
  c.credentials = s3::resolve_credentials(s3o.profile);
  c.region = s3o.region.empty() ? s3::resolve_region(s3o.profile) : s3o.region;
  c.target = s3::resolve_endpoint(c.location.bucket, s3o.endpoint, c.region);
  c.http = options_of(options.backend_options, options.http.get());
  return c;
}

// A signed GET, made afresh for every attempt (the signature covers the time).
RequestFactory signed_get(const Context& c, std::string path,
                          std::vector<std::pair<std::string, std::string>> query) {
  return [c, path = std::move(path), query = std::move(query)] {
    s3::Request r;
    r.method = "GET";
    r.host = c.target.host;
    r.path = std::move(path);
    r.query = query;
    HttpRequest out;
    out.url = s3::request_url(r, c.target.scheme);
    for (const auto& [name, value] :
         s3::sign(r, c.credentials, c.region, "s3", s3::amz_date_now())) {
      if (name != "host") out.headers.push_back(name + ": " + value);
    }
    return out;
  };
}

ErrorBodySummary s3_summary() {
  return [](const std::string& body) { return s3::error_summary(body); };
}

// True if some object's key starts with `prefix`. One request for at most one key, not retried:
// it only adds a hint to an error.
bool has_objects_under(const Context& c, const std::string& prefix) {
  HttpOptions http = c.http;
  http.max_retries = 0;
  std::string body =
      http_get_body("s3://" + c.location.bucket + "/" + prefix,
                    signed_get(c, c.target.bucket_path + "/",
                               {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", "1"}}),
                    http, s3_summary());
  return !s3::parse_list_objects_v2(body).keys.empty();
}

// The summary of a GET's error response; for a missing key that is the "folder" of other
// objects (s3://b/train for s3://b/train/...), how to list them. The listing is asked for only
// then, on the error path.
ErrorBodySummary object_summary(const Context& c, const std::string& url) {
  return [c, url](const std::string& body) {
    std::string summary = s3::error_summary(body);
    if (summary.rfind("NoSuchKey", 0) != 0) return summary;
    try {
      if (has_objects_under(c, c.location.key + "/")) {
        summary += " (objects exist under " + url + "/: give " + url + "/ to list them)";
      }
    } catch (const std::exception&) {
      // No permission to list, or the listing failed: the error stays as it was.
    }
    return summary;
  };
}

}  // namespace

std::unique_ptr<ByteSource> open_s3_source(const std::string& url, const OpenOptions& options) {
  Context c = context_for(url, options);
  if (c.location.key.empty() || c.location.key.back() == '/') {
    throw Error(ErrorCode::invalid_argument, url, "",
                "names no object (a prefix is listed by "
                "resolve_urls, with a trailing '/' or '*')");
  }
  return open_http_stream(url, signed_get(c, c.target.bucket_path + "/" + c.location.key, {}),
                          c.http, options.offset, object_summary(c, url), options.length,
                          options.on_retry);
}

std::vector<std::string> list_s3(const std::string& pattern, const OpenOptions& options) {
  Context c = context_for(pattern, options);
  const std::string& key = c.location.key;
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
        http_get_body(pattern, signed_get(c, c.target.bucket_path + "/", std::move(query)), c.http,
                      s3_summary(), options.on_retry);
    s3::ListPage page = s3::parse_list_objects_v2(body);
    for (const std::string& k : page.keys) {
      if (star != std::string::npos && ::fnmatch(key.c_str(), k.c_str(), FNM_PATHNAME) != 0) {
        continue;
      }
      urls.push_back("s3://" + c.location.bucket + "/" + k);
    }
    token = page.next_token;
  } while (token);
  if (urls.empty()) throw Error(ErrorCode::not_found, pattern, "", "no objects match");
  std::sort(urls.begin(), urls.end());
  return urls;
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
