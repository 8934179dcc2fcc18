// Google Cloud Storage helpers: gs:// URLs, key files, JWTs and the process's access tokens.
#include "lib/storage/gcs.hpp"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/fork.hpp"
#include "lib/storage/azure.hpp"
#include "lib/storage/http_client.hpp"
#include "lib/storage/s3.hpp"
#include "lib/storage/s3_xml.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::gcs {
namespace {

using Clock = std::chrono::steady_clock;

template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, Deleter<EVP_MD_CTX, EVP_MD_CTX_free>>;

// A string field of the key file; invalid_argument naming the file when it is missing.
std::string field(const nlohmann::json& j, const std::string& path, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty()) {
    throw Error::invalid_argument(path, "",
                                  std::string("the key file has no \"") + name + "\" string");
  }
  return it->get<std::string>();
}

// The PEM private key, or null.
Key load_key(const std::string& pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return Key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

std::string form_value(std::string_view s) {
  return s3::uri_encode(s, true);
}

// One key and scope's token, shared by every thread of a process; `mu` makes refreshes one at a
// time. It is held over the token request, so it is not held across fork(): a child forked
// meanwhile would find it held for good, so a child takes entries of its own (the key includes
// the process id).
struct CachedToken {
  std::mutex mu;
  std::string token;
  Clock::time_point refresh_at{};
};

std::shared_ptr<CachedToken> cache_entry(const KeyFile& key, const std::string& scope) {
  static std::mutex& mu = detail::new_mutex_held_across_fork();
  static auto& cache = *new std::map<std::string, std::shared_ptr<CachedToken>>;
  const std::string id = std::to_string(::getpid()) + '\n' + key.path + '\n' + key.client_email +
                         '\n' + key.client_id + '\n' + key.token_uri + '\n' + scope;
  std::lock_guard lock(mu);
  std::shared_ptr<CachedToken>& entry = cache[id];
  if (!entry) entry = std::make_shared<CachedToken>();
  return entry;
}

// The token endpoint's form for `key`: a JWT bearer grant, or a refresh token grant.
std::string token_request_form(const KeyFile& key, const std::string& scope) {
  if (key.type == KeyFile::Type::service_account) {
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    return "grant_type=" + form_value("urn:ietf:params:oauth:grant-type:jwt-bearer") +
           "&assertion=" + jwt_assertion(key, scope, now);
  }
  return "grant_type=refresh_token&client_id=" + form_value(key.client_id) +
         "&client_secret=" + form_value(key.client_secret) +
         "&refresh_token=" + form_value(key.refresh_token);
}

}  // namespace

Location parse_gs_url(std::string_view url) {
  s3::Location l = s3::parse_bucket_url(url, "gs", "use GcsOptions or the environment");
  return {std::move(l.bucket), std::move(l.key)};
}

KeyFile parse_key_file(const std::string& path, std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    throw Error::invalid_argument(path, "", "the key file is not a JSON object");
  }
  KeyFile key;
  key.path = path;
  const std::string type = field(j, path, "type");
  if (type == "service_account") {
    key.type = KeyFile::Type::service_account;
    key.client_email = field(j, path, "client_email");
    key.private_key = field(j, path, "private_key");
    key.token_uri = field(j, path, "token_uri");
    // Checked now, so that a bad key is reported as the file's fault, not the endpoint's.
    Key pkey = load_key(key.private_key);
    if (!pkey || EVP_PKEY_base_id(pkey.get()) != EVP_PKEY_RSA) {
      throw Error::invalid_argument(path, "",
                                    "the key file's private_key is not a PEM RSA private key");
    }
  } else if (type == "authorized_user") {
    key.type = KeyFile::Type::authorized_user;
    key.client_id = field(j, path, "client_id");
    key.client_secret = field(j, path, "client_secret");
    key.refresh_token = field(j, path, "refresh_token");
    auto uri = j.find("token_uri");
    key.token_uri = uri != j.end() && uri->is_string() ? uri->get<std::string>() : "";
    if (key.token_uri.empty()) key.token_uri = kDefaultTokenUri;
  } else {
    throw Error::invalid_argument(path, "",
                                  "the key file's type is \"" + one_line(type, 40) +
                                      "\", not \"service_account\" or \"authorized_user\"");
  }
  const std::string uri = lowercase(key.token_uri);
  if (!uri.starts_with("http://") && !uri.starts_with("https://")) {
    throw Error::invalid_argument(path, "", "the key file's token_uri is not an http(s) URL");
  }
  return key;
}

KeyFile read_key_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) throw Error::not_found(path, "", "no such key file");
    throw Error::permission_denied(path, "", "cannot read the key file");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_key_file(path, text.str());
}

std::string describe(const KeyFile& key) {
  if (key.type == KeyFile::Type::service_account) {
    return "service account " + key.client_email + " (key file " + key.path + ")";
  }
  return "gcloud user credentials (key file " + key.path + ")";
}

std::string base64url(std::string_view bytes) {
  std::string s = azure::base64_encode(bytes);
  while (!s.empty() && s.back() == '=') s.pop_back();
  for (char& c : s) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return s;
}

std::string jwt_assertion(const KeyFile& key, const std::string& scope, std::int64_t now_seconds) {
  const nlohmann::json claims = {{"iss", key.client_email},
                                 {"scope", scope},
                                 {"aud", key.token_uri},
                                 {"iat", now_seconds},
                                 {"exp", now_seconds + 3600}};
  const std::string signed_part =
      base64url(R"({"alg":"RS256","typ":"JWT"})") + "." + base64url(claims.dump());
  Key pkey = load_key(key.private_key);
  MdCtx ctx(EVP_MD_CTX_new());
  std::size_t length = 0;
  if (!pkey || !ctx ||
      EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, pkey.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &length,
                     reinterpret_cast<const unsigned char*>(signed_part.data()),
                     signed_part.size()) != 1) {
    throw Error::invalid_argument(key.path, "", "cannot sign with the key file's private_key");
  }
  std::string signature(length, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &length,
                     reinterpret_cast<const unsigned char*>(signed_part.data()),
                     signed_part.size()) != 1) {
    throw Error::invalid_argument(key.path, "", "cannot sign with the key file's private_key");
  }
  signature.resize(length);
  return signed_part + "." + base64url(signature);
}

std::string access_token(const KeyFile& key, const std::string& scope, const HttpOptions& http,
                         const std::shared_ptr<http::Transport>& transport) {
  std::shared_ptr<CachedToken> entry = cache_entry(key, scope);
  std::lock_guard lock(entry->mu);
  if (!entry->token.empty() && Clock::now() < entry->refresh_at) return entry->token;

  const std::string form = token_request_form(key, scope);
  const http::Body body{.length = form.size(), .memory = form};
  http::Client client(key.token_uri, http, transport,
                      [](const std::string& b) { return json_error_summary(b); });
  http::Response response;
  try {
    response = client.send("token request", [&] {
      return client.request("POST", key.token_uri,
                            {"Content-Type: application/x-www-form-urlencoded"}, &body);
    });
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable) throw;
    throw Error::permission_denied(
        key.token_uri, "", "the token endpoint refused " + describe(key) + ": " + e.cause());
  }
  nlohmann::json j = nlohmann::json::parse(response.body, nullptr, false);
  auto token = j.is_object() ? j.find("access_token") : j.end();
  if (!j.is_object() || token == j.end() || !token->is_string() ||
      token->get_ref<const std::string&>().empty()) {
    throw Error::corrupt_data(
        key.token_uri, "",
        "the token endpoint's answer has no access_token: " + text_excerpt(response.body, 80));
  }
  std::int64_t lifetime = 3600;  // OAuth2's expires_in is optional; Google's tokens last an hour
  if (auto e = j.find("expires_in"); e != j.end() && e->is_number()) {
    lifetime = std::max<std::int64_t>(e->get<std::int64_t>(), 0);
  }
  const auto life = std::chrono::milliseconds(lifetime * 1000);
  const auto margin = std::min<std::chrono::milliseconds>(std::chrono::minutes(5), life / 2);
  entry->token = token->get<std::string>();
  entry->refresh_at = Clock::now() + life - margin;
  return entry->token;
}

std::string json_error_summary(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    auto error = j.find("error");
    if (error != j.end() && error->is_object()) {
      auto message = error->find("message");
      if (message != error->end() && message->is_string()) {
        return one_line(message->get<std::string>());
      }
    }
    if (error != j.end() && error->is_string()) {
      std::string out = error->get<std::string>();
      auto description = j.find("error_description");
      if (description != j.end() && description->is_string()) {
        out += ": " + description->get<std::string>();
      }
      return one_line(out);
    }
  }
  return xml::error_excerpt(body);
}

}  // namespace wds::gcs
