// gs:// objects. With HMAC keys, GCS's XML API, which speaks S3: the s3 backend's reads,
// listings and uploads with a SigV4 target (region "auto"). Otherwise the JSON API, with an
// OAuth2 bearer token (lib/storage/gcs.hpp) or none: it is the API the emulators serve, so one
// code path serves the cloud, the emulators and public objects alike.
#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lib/storage/backends.hpp"
#include "lib/storage/gcs.hpp"
#include "lib/storage/http_client.hpp"
#include "lib/storage/http_source.hpp"
#include "lib/storage/s3.hpp"
#include "lib/storage/s3_backend.hpp"
#include "lib/storage/s3_detail.hpp"
#include "lib/storage/upload_sink.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using s3::detail::env;

constexpr const char* kDefaultEndpoint = "https://storage.googleapis.com";

// A gs:// URL's requests through the JSON API.
struct JsonTarget {
  gcs::Location location;
  std::string base;                 // the endpoint, without a trailing '/'
  std::optional<gcs::KeyFile> key;  // set: a bearer token of `scope`
  std::string scope;
  std::string credential;  // which one is used, for messages
  HttpOptions http;
  std::shared_ptr<http::Transport> transport;
};

// One of the two ways a URL is served.
struct Target {
  std::optional<S3Target> xml;  // HMAC keys
  JsonTarget json;
};

struct HmacKeys {
  std::string key, secret, from;
};

// A pair of settings that must come together: both, neither, or invalid_argument.
std::optional<HmacKeys> pair_of(std::optional<std::string> key, std::optional<std::string> secret,
                                const std::string& key_name, const std::string& secret_name) {
  if (!key && !secret) return std::nullopt;
  if (!key || !secret) {
    throw Error::invalid_argument((key ? secret_name : key_name) + " is not set, but " +
                                  (key ? key_name : secret_name) + " is: set both or neither");
  }
  return HmacKeys{*key, *secret, key_name + "/" + secret_name};
}

std::optional<std::string> nonempty(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

std::optional<HmacKeys> hmac_keys(const GcsOptions& o) {
  if (auto k = pair_of(nonempty(o.hmac_key), nonempty(o.hmac_secret), "GcsOptions::hmac_key",
                       "GcsOptions::hmac_secret")) {
    return k;
  }
  if (auto k = pair_of(env("GCS_KEY"), env("GCS_SECRET"), "GCS_KEY", "GCS_SECRET")) return k;
  return pair_of(env("GS_ACCESS_KEY_ID"), env("GS_SECRET_ACCESS_KEY"), "GS_ACCESS_KEY_ID",
                 "GS_SECRET_ACCESS_KEY");
}

// The key file to use: named by the options or GOOGLE_APPLICATION_CREDENTIALS (it must exist
// then), else gcloud's application default credentials when that file exists.
std::optional<std::string> key_file_path(const GcsOptions& o) {
  if (!o.credentials_file.empty()) return o.credentials_file;
  if (auto path = env("GOOGLE_APPLICATION_CREDENTIALS")) return path;
  std::filesystem::path dir;
  if (auto config = env("CLOUDSDK_CONFIG")) {
    dir = *config;
  } else if (auto home = env("HOME")) {
    dir = std::filesystem::path(*home) / ".config" / "gcloud";
  } else {
    return std::nullopt;
  }
  std::error_code ec;
  const std::filesystem::path adc = dir / "application_default_credentials.json";
  if (std::filesystem::exists(adc, ec)) return adc.string();
  return std::nullopt;
}

// GcsOptions::endpoint, else STORAGE_EMULATOR_HOST (a bare host:port is http), else Google's.
std::string endpoint_of(const GcsOptions& o) {
  std::string endpoint = o.endpoint;
  if (endpoint.empty()) {
    if (auto emulator = env("STORAGE_EMULATOR_HOST")) {
      endpoint = emulator->find("://") == std::string::npos ? "http://" + *emulator : *emulator;
    }
  }
  if (endpoint.empty()) endpoint = kDefaultEndpoint;
  while (endpoint.ends_with('/')) endpoint.pop_back();
  const std::string lower = lowercase(endpoint);
  if (!lower.starts_with("http://") && !lower.starts_with("https://")) {
    throw Error::invalid_argument(endpoint, "",
                                  "the GCS endpoint must be an http:// or https:// URL");
  }
  return endpoint;
}

Target resolve(const std::string& url, const BackendOptions& slots, bool write) {
  const GcsOptions& o = options_of<GcsOptions>(slots);
  Target t;
  t.json.location = gcs::parse_gs_url(url);  // its errors name the URL
  t.json.http = options_of<HttpOptions>(slots);
  t.json.transport = http::transport_for(slots);
  try {
    t.json.base = endpoint_of(o);
    std::optional<HmacKeys> hmac;
    if (o.anonymous) {
      t.json.credential = "no credentials (GcsOptions::anonymous)";
    } else if ((hmac = hmac_keys(o))) {
      S3Target x;
      x.location = {t.json.location.bucket, t.json.location.object};
      x.credentials = {hmac->key, hmac->secret, ""};
      x.region = "auto";  // what GCS's XML API signs with
      x.endpoint = s3::resolve_endpoint(x.location.bucket, t.json.base, x.region);
      x.scheme = "gs";
      x.credential = "the HMAC key from " + hmac->from;
      t.xml = std::move(x);
    } else if (env("STORAGE_EMULATOR_HOST")) {
      t.json.credential = "no credentials (STORAGE_EMULATOR_HOST)";
    } else if (std::optional<std::string> path = key_file_path(o)) {
      t.json.key = gcs::read_key_file(*path);
      t.json.scope = write ? gcs::kReadWriteScope : gcs::kReadOnlyScope;
      t.json.credential = "the token of " + gcs::describe(*t.json.key);
    } else {
      t.json.credential =
          "no credentials (none found: set GCS_KEY and GCS_SECRET, or "
          "GOOGLE_APPLICATION_CREDENTIALS)";
    }
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
  return t;
}

std::string encoded(std::string_view s) {
  return s3::uri_encode(s, true);
}

std::string bucket_url(const JsonTarget& t) {
  return t.base + "/storage/v1/b/" + encoded(t.location.bucket) + "/o";
}

// A JSON API request, with a bearer token (fetched or refreshed as needed) when there is a key.
http::Request json_request(const JsonTarget& t, std::string method, std::string url) {
  http::Request r{.method = std::move(method), .url = std::move(url)};
  if (t.key) {
    r.headers.push_back("Authorization: Bearer " +
                        gcs::access_token(*t.key, t.scope, t.http, t.transport));
  }
  return r;
}

http::Summary json_summary(const JsonTarget& t) {
  return [credential = t.credential](const std::string& body) {
    return gcs::json_error_summary(body) + " (sent with " + credential + ")";
  };
}

// The token, fetched now so that a key the endpoint refuses fails the open, naming `url`.
void check_token(const std::string& url, const JsonTarget& t) {
  if (!t.key) return;
  try {
    gcs::access_token(*t.key, t.scope, t.http, t.transport);
  } catch (const Error& e) {
    rethrow_for(url, e);
  }
}

std::unique_ptr<ByteSource> open_gcs_source(const std::string& url, const OpenOptions& options) {
  Target t = resolve(url, options.backend_options, false);
  if (t.xml) return open_s3_object(url, std::move(*t.xml), options);
  const JsonTarget& j = t.json;
  if (j.location.object.empty() || j.location.object.back() == '/') {
    throw Error::invalid_argument(url, "",
                                  "names no object (a prefix is listed by resolve_urls, with a "
                                  "trailing '/' or '*')");
  }
  check_token(url, j);
  const std::string object_url = bucket_url(j) + "/" + encoded(j.location.object) + "?alt=media";
  return open_http_body(
      url, [j, object_url] { return json_request(j, "GET", object_url); }, j.http, options.offset,
      json_summary(j), options.length, options.on_retry, j.transport, parts_of(options));
}

std::vector<std::string> list_gcs(const std::string& pattern, const OpenOptions& options) {
  Target t = resolve(pattern, options.backend_options, false);
  if (t.xml) return list_s3_objects(pattern, std::move(*t.xml), options);
  const JsonTarget& j = t.json;
  check_token(pattern, j);
  const std::string& object = j.location.object;
  const std::size_t star = object.find('*');
  const std::string prefix = object.substr(0, star == std::string::npos ? object.size() : star);
  std::vector<std::string> urls;
  std::optional<std::string> page_token;
  do {
    // One level, as a directory listing is: objects directly under the prefix's folder.
    std::string list_url = bucket_url(j) + "?delimiter=%2F&prefix=" + encoded(prefix) +
                           "&fields=" + encoded("items(name),nextPageToken");
    if (page_token) list_url += "&pageToken=" + encoded(*page_token);
    const std::string body = http_get_body(
        pattern, [&j, list_url] { return json_request(j, "GET", list_url); }, j.http,
        json_summary(j), options.on_retry, j.transport);
    const nlohmann::json page = nlohmann::json::parse(body, nullptr, false);
    if (!page.is_object()) {
      throw Error::corrupt_data(pattern, "", "the object listing is not a JSON object");
    }
    page_token.reset();
    if (auto next = page.find("nextPageToken"); next != page.end() && next->is_string()) {
      page_token = next->get<std::string>();
    }
    auto items = page.find("items");
    if (items == page.end()) continue;  // an empty page
    if (!items->is_array()) {
      throw Error::corrupt_data(pattern, "", "the object listing's items is not an array");
    }
    for (const nlohmann::json& item : *items) {
      auto name = item.is_object() ? item.find("name") : item.end();
      if (name == item.end() || !name->is_string()) {
        throw Error::corrupt_data(pattern, "", "an item of the object listing has no name");
      }
      const std::string& n = name->get_ref<const std::string&>();
      if (star != std::string::npos && ::fnmatch(object.c_str(), n.c_str(), FNM_PATHNAME) != 0) {
        continue;
      }
      urls.push_back("gs://" + j.location.bucket + "/" + n);
    }
  } while (page_token);
  if (urls.empty()) throw Error::not_found(pattern, "", "no objects match");
  std::sort(urls.begin(), urls.end());
  return urls;
}

// The JSON API's upload: the spooled object in one media upload request (POST), retried whole.
class GcsUploadSink final : public SpoolSink {
 public:
  GcsUploadSink(std::string url, JsonTarget target)
      : SpoolSink(url, std::nullopt),
        target_(std::move(target)),
        upload_url_(target_.base + "/upload/storage/v1/b/" + encoded(target_.location.bucket) +
                    "/o?uploadType=media&name=" + encoded(target_.location.object)),
        client_(std::move(url), target_.http, target_.transport, json_summary(target_)) {}

 private:
  void upload() override {
    const http::Body body{.fd = fd(), .offset = 0, .length = size()};
    client_.send("upload", [this, &body] {
      http::Request made = json_request(target_, "POST", upload_url_);
      made.headers.push_back("Content-Type: application/octet-stream");
      return client_.request(made.method, std::move(made.url), made.headers, &body);
    });
  }

  JsonTarget target_;
  std::string upload_url_;
  http::Client client_;
};

std::unique_ptr<ByteSink> open_gcs_sink(const std::string& url, const SinkOptions& options) {
  Target t = resolve(url, options.backend_options, true);
  if (t.xml) return open_s3_object_sink(url, std::move(*t.xml), options);
  if (t.json.location.object.empty() || t.json.location.object.back() == '/') {
    throw Error::invalid_argument(url, "", "names no object (gs://bucket/object)");
  }
  check_token(url, t.json);
  return std::make_unique<GcsUploadSink>(url, std::move(t.json));
}

}  // namespace

Backend gcs_backend() {
  return Backend{
      .schemes = {"gs"},
      .open = open_gcs_source,
      .list = list_gcs,
      .open_sink = open_gcs_sink,
  };
}

}  // namespace wds
