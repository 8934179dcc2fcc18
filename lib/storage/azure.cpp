// Azure Blob Storage helpers: az:// URLs, accounts and credentials, Shared Key signing, base64
// and the List Blobs XML.
#include "lib/storage/azure.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <map>

#include "lib/storage/s3.hpp"
#include "lib/storage/s3_detail.hpp"
#include "lib/storage/s3_xml.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::azure {
namespace {

using s3::detail::env;

// Azurite's well-known development account (UseDevelopmentStorage=true), published by Microsoft.
constexpr const char* kDevAccount = "devstoreaccount1";
constexpr const char* kDevKey =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
constexpr const char* kDevEndpoint = "http://127.0.0.1:10000/devstoreaccount1";

constexpr const char* kHowToConfigure =
    "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or "
    "AZURE_STORAGE_SAS_TOKEN, or wds::AzureOptions in backend_options";

std::string strip_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// "Name: value" -> {lowercased name, trimmed value}; nullopt for a line without a colon.
std::optional<std::pair<std::string, std::string>> split_header(std::string_view line) {
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  return std::make_pair(lowercase(trim(line.substr(0, colon))),
                        std::string(trim(line.substr(colon + 1))));
}

class SigningConnection final : public http::Connection {
 public:
  SigningConnection(std::unique_ptr<http::Connection> inner, std::shared_ptr<const Account> account)
      : inner_(std::move(inner)), account_(std::move(account)) {}

  http::Outcome perform(const http::Request& request, http::ResponseHandler& handler) override {
    http::Request signed_request = request;
    signed_request.follow_redirects = false;  // the credentials go to the endpoint only
    sign(signed_request, *account_, http_date_now());
    return inner_->perform(signed_request, handler);
  }

 private:
  std::unique_ptr<http::Connection> inner_;
  std::shared_ptr<const Account> account_;
};

class SigningTransport final : public http::Transport {
 public:
  SigningTransport(std::shared_ptr<http::Transport> inner, Account account)
      : inner_(std::move(inner)), account_(std::make_shared<const Account>(std::move(account))) {}

  std::unique_ptr<http::Connection> connect(const HttpOptions& options) override {
    return std::make_unique<SigningConnection>(inner_->connect(options), account_);
  }

 private:
  std::shared_ptr<http::Transport> inner_;
  std::shared_ptr<const Account> account_;
};

}  // namespace

Location parse_az_url(std::string_view url) {
  const std::string u(url);
  if (lowercase(url.substr(0, 5)) != "az://") {
    throw Error::invalid_argument(u, "", "not an az://container/blob URL");
  }
  std::string_view rest = url.substr(5);
  const std::size_t slash = rest.find('/');
  Location l{std::string(rest.substr(0, slash)),
             slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1))};
  // Container names: lowercase letters, digits and '-' ("$root" and "$web" are Azure's own).
  const bool valid =
      !l.container.empty() && std::all_of(l.container.begin(), l.container.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || is_ascii_digit(c) || c == '-' || c == '$';
      });
  if (!valid) {
    throw Error::invalid_argument(
        u, "",
        l.container.empty()
            ? "names no container (az://container/blob)"
            : "'" + l.container + "' is not a container name (lowercase letters, digits, '-')");
  }
  return l;
}

Account parse_connection_string(std::string_view connection_string) {
  std::map<std::string, std::string> fields;
  std::string_view rest = connection_string;
  int parts = 0;
  while (!rest.empty()) {
    const std::size_t semi = rest.find(';');
    std::string_view part = trim(rest.substr(0, semi));
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    if (part.empty()) continue;
    ++parts;
    const std::size_t eq = part.find('=');  // values (keys, SAS tokens) may hold '=' themselves
    if (eq == std::string_view::npos || eq == 0) {
      // Not the part itself: it may be a secret.
      throw Error::invalid_argument("malformed Azure connection string: part " +
                                    std::to_string(parts) + " is not Name=Value");
    }
    fields[lowercase(trim(part.substr(0, eq)))] = std::string(trim(part.substr(eq + 1)));
  }
  auto get = [&](const char* name) {
    auto it = fields.find(name);
    return it == fields.end() ? std::string() : it->second;
  };
  Account a;
  if (lowercase(get("usedevelopmentstorage")) == "true") {
    a.name = kDevAccount;
    a.key = kDevKey;
    a.endpoint = kDevEndpoint;
    return a;
  }
  a.name = get("accountname");
  a.key = get("accountkey");
  a.sas = get("sharedaccesssignature");
  if (!a.sas.empty() && a.sas.front() == '?') a.sas.erase(0, 1);
  a.endpoint = strip_slashes(get("blobendpoint"));
  if (a.endpoint.empty()) {
    if (a.name.empty()) {
      throw Error::invalid_argument(
          "the Azure connection string has neither AccountName nor BlobEndpoint");
    }
    std::string protocol = lowercase(get("defaultendpointsprotocol"));
    std::string suffix = get("endpointsuffix");
    if (protocol.empty()) protocol = "https";
    if (suffix.empty()) suffix = "core.windows.net";
    if (protocol != "https" && protocol != "http") {
      throw Error::invalid_argument("the Azure connection string's DefaultEndpointsProtocol is '" +
                                    protocol + "', not https or http");
    }
    a.endpoint = protocol + "://" + a.name + ".blob." + suffix;
  }
  return a;
}

Account resolve_account(const AzureOptions& options) {
  Account a;
  std::string where;  // where the account came from, for messages
  if (!options.connection_string.empty()) {
    a = parse_connection_string(options.connection_string);
    where = "AzureOptions::connection_string";
  } else if (!options.account.empty()) {
    a.name = options.account;
    where = "AzureOptions";
  } else if (auto cs = env("AZURE_STORAGE_CONNECTION_STRING")) {
    try {
      a = parse_connection_string(*cs);
    } catch (const Error& e) {
      throw Error(e.code(), "", "", "AZURE_STORAGE_CONNECTION_STRING: " + e.cause());
    }
    where = "AZURE_STORAGE_CONNECTION_STRING";
  } else if (auto name = env("AZURE_STORAGE_ACCOUNT")) {
    a.name = *name;
    a.key = env("AZURE_STORAGE_KEY").value_or("");
    a.sas = env("AZURE_STORAGE_SAS_TOKEN").value_or("");
    where = "AZURE_STORAGE_ACCOUNT";
  }
  if (!options.key.empty()) a.key = options.key;
  if (!options.sas_token.empty()) a.sas = options.sas_token;
  if (!options.endpoint.empty()) a.endpoint = strip_slashes(options.endpoint);
  if (!a.sas.empty() && a.sas.front() == '?') a.sas.erase(0, 1);
  a.anonymous = options.anonymous;
  if (a.endpoint.empty()) {
    if (a.name.empty())
      throw Error::permission_denied(std::string("no Azure storage account: ") + kHowToConfigure);
    a.endpoint = "https://" + a.name + ".blob.core.windows.net";
  }
  if (a.anonymous) {
    a.key.clear();
    a.sas.clear();
    return a;
  }
  if (a.key.empty() && a.sas.empty()) {
    throw Error::permission_denied(
        "no key or SAS token for Azure storage " +
        (a.name.empty() ? "at " + a.endpoint : "account '" + a.name + "'") +
        (where.empty() ? "" : " (from " + where + ")") + ": " + kHowToConfigure +
        " (AzureOptions::anonymous for public containers)");
  }
  if (!a.key.empty()) {
    if (a.name.empty()) {
      throw Error::invalid_argument(
          "an Azure account key needs the account's name (AccountName, AZURE_STORAGE_ACCOUNT or "
          "AzureOptions::account)");
    }
    if (!base64_decode(a.key)) {
      throw Error::invalid_argument("the key of Azure storage account '" + a.name + "'" +
                                    (where.empty() ? "" : " (from " + where + ")") +
                                    " is not base64");
    }
  }
  return a;
}

std::string resource_url(const Account& account, const Location& location,
                         const std::vector<std::pair<std::string, std::string>>& query) {
  std::string url = account.endpoint + "/" + location.container;
  if (!location.blob.empty()) url += "/" + s3::uri_encode(location.blob, false);
  char sep = '?';
  for (const auto& [name, value] : query) {
    url += sep + s3::uri_encode(name, true) + "=" + s3::uri_encode(value, true);
    sep = '&';
  }
  if (!account.sas.empty()) url += sep + account.sas;
  return url;
}

std::string string_to_sign(const http::Request& request, const std::string& account) {
  std::map<std::string, std::string> standard;  // lowercased name -> value
  std::vector<std::pair<std::string, std::string>> ms;
  for (const std::string& line : request.headers) {
    auto h = split_header(line);
    if (!h) continue;
    if (h->first.rfind("x-ms-", 0) == 0) {
      ms.push_back(std::move(*h));
    } else {
      standard[h->first] = h->second;
    }
  }
  // Content-Length is what curl sends for the body: "" when there is none or it is empty.
  standard["content-length"] =
      request.body && request.body->length > 0 ? std::to_string(request.body->length) : "";
  standard["date"] = "";  // x-ms-date stands for it
  std::string out = request.method + "\n";
  for (const char* name :
       {"content-encoding", "content-language", "content-length", "content-md5", "content-type",
        "date", "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"}) {
    auto it = standard.find(name);
    out += (it == standard.end() ? std::string() : it->second) + "\n";
  }
  std::stable_sort(ms.begin(), ms.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [name, value] : ms) {
    std::string v;  // runs of white space unfolded to one space
    for (char c : value) {
      if (is_ascii_space(c)) {
        if (!v.empty() && v.back() != ' ') v += ' ';
      } else {
        v += c;
      }
    }
    out += name + ":" + v + "\n";
  }
  // The path as the URL has it (encoded), after scheme and host.
  const std::string& url = request.url;
  const std::size_t scheme_end = url.find("://");
  const std::size_t path_start =
      url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  const std::size_t query_start = url.find('?');
  std::string path =
      path_start == std::string::npos || path_start > query_start
          ? std::string("/")
          : url.substr(path_start, query_start == std::string::npos ? std::string::npos
                                                                    : query_start - path_start);
  out += "/" + account + path;
  std::map<std::string, std::vector<std::string>> params;
  if (query_start != std::string::npos) {
    std::string_view q = std::string_view(url).substr(query_start + 1);
    while (!q.empty()) {
      const std::size_t amp = q.find('&');
      std::string_view p = q.substr(0, amp);
      q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
      if (p.empty()) continue;
      const std::size_t eq = p.find('=');
      params[lowercase(percent_decode(p.substr(0, eq)))].push_back(
          eq == std::string_view::npos ? std::string() : percent_decode(p.substr(eq + 1)));
    }
  }
  for (auto& [name, values] : params) {
    std::sort(values.begin(), values.end());
    out += "\n" + name + ":";
    for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + values[i];
  }
  return out;
}

void sign(http::Request& request, const Account& account, const std::string& date) {
  request.headers.push_back("x-ms-version: " + std::string(kVersion));
  if (account.key.empty()) return;  // a SAS token in the URL, or anonymous
  request.headers.push_back("x-ms-date: " + date);
  const std::optional<std::string> key = base64_decode(account.key);
  if (!key) throw Error::invalid_argument("the Azure account key is not base64");
  const std::string sts = string_to_sign(request, account.name);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!HMAC(EVP_sha256(), key->data(), static_cast<int>(key->size()),
            reinterpret_cast<const unsigned char*>(sts.data()), sts.size(), mac, &n)) {
    throw Error::unavailable("OpenSSL HMAC-SHA256 failed");
  }
  request.headers.push_back("Authorization: SharedKey " + account.name + ":" +
                            base64_encode(std::string_view(reinterpret_cast<const char*>(mac), n)));
}

std::string http_date_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday],
                tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                tm.tm_sec);
  return buf;
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(std::max(n, 0)));
  return out;
}

std::optional<std::string> base64_decode(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  const bool valid = std::all_of(s.begin(), s.end(), [](char c) {
    return is_ascii_alnum(c) || c == '+' || c == '/' || c == '=';
  });
  if (!valid) return std::nullopt;
  std::string out(3 * (s.size() / 4), '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  std::size_t pad = 0;
  if (s.ends_with("==")) {
    pad = 2;
  } else if (s.ends_with('=')) {
    pad = 1;
  }
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

std::shared_ptr<http::Transport> signing_transport(std::shared_ptr<http::Transport> inner,
                                                   Account account) {
  return std::make_shared<SigningTransport>(std::move(inner), std::move(account));
}

BlobPage parse_list_blobs(std::string_view body) {
  auto corrupt = [](const std::string& why) {
    throw Error::corrupt_data("Azure List Blobs response: " + why);
  };
  xml::Element root;
  std::string error;
  if (!xml::parse(body, root, error)) corrupt("not well-formed XML: " + error);
  if (root.name != "EnumerationResults") {
    corrupt("the root element is <" + root.name + ">, not <EnumerationResults>" +
            (root.name == "Error" ? " (" + xml::error_excerpt(body) + ")" : ""));
  }
  BlobPage page;
  if (const xml::Element* blobs = root.child("Blobs")) {
    for (const xml::Element& b : blobs->children) {
      if (b.name != "Blob") continue;  // <BlobPrefix>: a "folder" below, not listed
      const xml::Element* name = b.child("Name");
      if (!name || name->text.empty()) corrupt("a <Blob> without a <Name>");
      page.names.push_back(name->text);
    }
  }
  if (const xml::Element* next = root.child("NextMarker")) {
    std::string_view marker = trim(next->text);
    if (!marker.empty()) page.next_marker = std::string(marker);
  }
  return page;
}

}  // namespace wds::azure
