// s3:// shards and listings: SigV4-signed requests sent through the HTTP stream.
#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>

#include "lib/http_source.hpp"
#include "lib/s3.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

// Where requests for a bucket go: AWS's virtual-hosted style by default; any other endpoint is
// addressed path-style (endpoint/bucket/key), which S3-compatible servers expect.
struct Target {
  std::string scheme;
  std::string host;
  std::string bucket_path;  // "/bucket" path-style, "" virtual-hosted
};

Target target_for(const std::string& bucket, const S3Options& options, const std::string& region) {
  std::string endpoint = options.endpoint;
  if (endpoint.empty()) {
    if (const char* env = std::getenv("AWS_ENDPOINT_URL")) endpoint = env;
  }
  if (endpoint.empty()) {
    // A bucket name with dots is not covered by AWS's certificate as a virtual host.
    if (bucket.find('.') != std::string::npos) {
      return {"https", "s3." + region + ".amazonaws.com", "/" + bucket};
    }
    return {"https", bucket + ".s3." + region + ".amazonaws.com", ""};
  }
  std::size_t sep = endpoint.find("://");
  if (sep == std::string::npos) {
    throw Error(ErrorCode::invalid_argument, endpoint, "",
                "S3 endpoint must be a URL such as http://127.0.0.1:9000");
  }
  std::string scheme = endpoint.substr(0, sep);
  std::string rest = endpoint.substr(sep + 3);
  std::size_t slash = rest.find('/');
  std::string host = rest.substr(0, slash);
  // curl leaves a default port out of the Host header, so the signed host must too.
  const std::string default_port = scheme == "https" ? ":443" : scheme == "http" ? ":80" : "";
  if (!default_port.empty() && host.size() > default_port.size() &&
      host.compare(host.size() - default_port.size(), default_port.size(), default_port) == 0) {
    host.resize(host.size() - default_port.size());
  }
  std::string base = slash == std::string::npos ? "" : rest.substr(slash);
  while (!base.empty() && base.back() == '/') base.pop_back();
  return {scheme, host, base + "/" + bucket};
}

struct Context {
  s3::Location location;
  s3::Credentials credentials;
  std::string region;
  Target target;
  HttpOptions http;
};

Context context_for(const std::string& url, const OpenOptions& options) {
  S3Options s3o = options.s3 ? *options.s3 : S3Options{};
  Context c;
  c.location = s3::parse_s3_url(url);
  c.credentials = s3::resolve_credentials(s3o.profile);
  c.region = s3o.region.empty() ? s3::resolve_region(s3o.profile) : s3o.region;
  c.target = target_for(c.location.bucket, s3o, c.region);
  c.http = options.http ? *options.http : HttpOptions{};
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

}  // namespace

std::unique_ptr<ByteSource> open_s3_source(const std::string& url, const OpenOptions& options) {
  Context c = context_for(url, options);
  if (c.location.key.empty() || c.location.key.back() == '/') {
    throw Error(ErrorCode::invalid_argument, url, "",
                "names no object (a prefix is listed by "
                "resolve_urls, with a trailing '/' or '*')");
  }
  return open_http_stream(url, signed_get(c, c.target.bucket_path + "/" + c.location.key, {}),
                          c.http, options.offset, s3_summary(), options.length);
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
    std::string body = http_get_body(
        pattern, signed_get(c, c.target.bucket_path + "/", std::move(query)), c.http, s3_summary());
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

}  // namespace wds
