// S3 helpers: AWS Signature Version 4 over OpenSSL, credential and region lookup, s3:// URLs, and
// a small XML reader for ListObjectsV2 and error bodies.
#include "lib/s3.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>

#include "wds/error.hpp"

namespace wds::s3 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

[[noreturn]] void fail(ErrorCode code, std::string url, std::string cause) {
  throw Error(code, std::move(url), "", std::move(cause));
}

// An environment variable; unset and empty are the same, as in the AWS CLI.
std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool is_alnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

}  // namespace

std::string to_hex(const unsigned char* p, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 0xF];
  }
  return out;
}

namespace {

// ---- hashing ----------------------------------------------------------------------------------

using Digest = std::array<unsigned char, 32>;

Digest hmac_sha256(std::string_view key, std::string_view data) {
  Digest out{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len) ||
      len != out.size()) {
    fail(ErrorCode::unavailable, "", "OpenSSL HMAC-SHA256 failed");
  }
  return out;
}

std::string_view as_view(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

// ---- canonical request pieces -----------------------------------------------------------------

// RFC 7230 token characters: what a header name may be made of.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_alnum(c) && !std::strchr("!#$%&'*+-.^_`|~", c)) return false;
  }
  return true;
}

// A value that would break the request line or inject a header (CR, LF, NUL, other controls).
bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7F;
  });
}

// SigV4's Trimall: no leading or trailing blanks, inner runs of blanks as one space.
std::string trim_all(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      pending_space = !out.empty();
    } else {
      if (pending_space) out += ' ';
      pending_space = false;
      out += c;
    }
  }
  return out;
}

// Lowercased names, trimmed values, sorted by name; a repeated name becomes one entry with the
// values joined by ',' (how SigV4 and HTTP both read repeated headers).
HeaderList normalize_headers(const HeaderList& headers) {
  HeaderList out;
  for (const auto& [name, value] : headers) out.emplace_back(lower(trim(name)), trim_all(value));
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  HeaderList merged;
  for (auto& h : out) {
    if (!merged.empty() && merged.back().first == h.first) {
      merged.back().second += "," + h.second;
    } else {
      merged.push_back(std::move(h));
    }
  }
  return merged;
}

std::string canonical_uri(std::string_view path) {
  // S3 signs the path as sent: encoded once, '/' kept, no dot-segment or '//' normalisation.
  std::string p = path.starts_with('/') ? std::string(path) : "/" + std::string(path);
  return uri_encode(p, false);
}

std::string canonical_query(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(uri_encode(k, true), uri_encode(v, true));
  std::sort(enc.begin(), enc.end());  // by encoded name, then encoded value (byte order)
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

bool valid_amz_date(std::string_view d) {
  if (d.size() != 16 || d[8] != 'T' || d[15] != 'Z') return false;
  for (std::size_t i = 0; i < 15; ++i) {
    if (i != 8 && !is_digit(d[i])) return false;
  }
  return true;
}

// ---- INI files (~/.aws/credentials, ~/.aws/config) --------------------------------------------

using IniSection = std::map<std::string, std::string>;
using Ini = std::map<std::string, IniSection>;

// The AWS CLI's INI dialect (Python's configparser): [section], "key = value" or "key: value",
// keys case-insensitive, '#' and ';' comment lines. An indented line after a key continues that
// key's value (nested settings like "s3 =\n  region = x"), so it is skipped rather than read as
// a key of the section. "[profile   x]" is stored as "profile x".
Ini parse_ini(std::string_view text) {
  Ini ini;
  IniSection* section = nullptr;
  bool after_key = false;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    std::string_view t = trim(line);
    if (t.empty() || t.front() == '#' || t.front() == ';') continue;
    if (after_key && is_space(line.front())) continue;
    after_key = false;
    if (t.front() == '[') {
      section = nullptr;
      if (t.back() != ']') continue;  // malformed header: its keys belong to no section
      std::string_view name = trim(t.substr(1, t.size() - 2));
      if (name.starts_with("profile") && name.size() > 7 && is_space(name[7])) {
        section = &ini["profile " + std::string(trim(name.substr(7)))];
      } else {
        section = &ini[std::string(name)];
      }
      continue;
    }
    std::size_t sep = t.find_first_of("=:");
    if (!section || sep == std::string_view::npos) continue;
    (*section)[lower(trim(t.substr(0, sep)))] = std::string(trim(t.substr(sep + 1)));
    after_key = true;
  }
  return ini;
}

struct FileRead {
  enum { ok, missing, unreadable } state = missing;
  std::string text;
  std::string error;  // strerror when unreadable
};

FileRead read_file(const std::string& path) {
  FileRead r;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    r.state = errno == ENOENT || errno == ENOTDIR ? FileRead::missing : FileRead::unreadable;
    r.error = std::strerror(errno);
    return r;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.text.append(buf, n);
  if (std::ferror(f)) {
    r.state = FileRead::unreadable;
    r.error = std::strerror(errno);
  } else {
    r.state = FileRead::ok;
  }
  std::fclose(f);
  return r;
}

// The file named by `var`, else $HOME/<home_relative>; nullopt when neither is set.
std::optional<std::string> aws_file(const char* var, const char* home_relative) {
  if (auto p = env(var)) return p;
  if (auto home = env("HOME")) return *home + "/" + home_relative;
  return std::nullopt;
}

const IniSection* find_section(const Ini& ini, const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}

std::string get(const IniSection& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? std::string() : it->second;
}

// ---- XML --------------------------------------------------------------------------------------

// Just enough XML for S3's responses: elements, their character data (entities and CDATA
// decoded), comments and declarations skipped. Attributes are skipped; a DTD is refused, so no
// entity is ever defined by the document.
struct Element {
  std::string name;
  std::string text;  // the element's own character data
  std::vector<Element> children;

  const Element* child(std::string_view n) const {
    for (const Element& c : children) {
      if (c.name == n) return &c;
    }
    return nullptr;
  }
};

constexpr std::size_t kMaxXmlDepth = 64;  // S3 nests 3 deep; bounds the tree's recursion

void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool decode_entities(std::string_view text, std::string& out, std::string& error) {
  while (!text.empty()) {
    std::size_t amp = text.find('&');
    out.append(text.substr(0, amp));
    if (amp == std::string_view::npos) break;
    std::size_t semi = text.find(';', amp);
    if (semi == std::string_view::npos || semi - amp > 12) {
      error = "a '&' that starts no entity";
      return false;
    }
    std::string_view ent = text.substr(amp + 1, semi - amp - 1);
    text.remove_prefix(semi + 1);
    if (ent == "amp") {
      out += '&';
    } else if (ent == "lt") {
      out += '<';
    } else if (ent == "gt") {
      out += '>';
    } else if (ent == "quot") {
      out += '"';
    } else if (ent == "apos") {
      out += '\'';
    } else if (ent.size() >= 2 && ent[0] == '#') {
      bool hex = ent[1] == 'x';
      std::string_view digits = ent.substr(hex ? 2 : 1);
      unsigned long cp = 0;
      bool ok = !digits.empty() && digits.size() <= 8;
      for (char c : digits) {
        int d = is_digit(c)                   ? c - '0'
                : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
                : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                              : -1;
        if (d < 0) ok = false;
        cp = cp * (hex ? 16 : 10) + static_cast<unsigned long>(d < 0 ? 0 : d);
      }
      if (!ok || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        error = "invalid character reference '&" + std::string(ent) + ";'";
        return false;
      }
      append_utf8(out, cp);
    } else {
      error = "unknown entity '&" + std::string(ent) + ";'";
      return false;
    }
  }
  return true;
}

bool valid_xml_name(std::string_view n) {
  if (n.empty() || is_digit(n[0]) || n[0] == '-' || n[0] == '.') return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return is_alnum(c) || c == '-' || c == '.' || c == '_' || c == ':' ||
           static_cast<unsigned char>(c) >= 0x80;
  });
}

bool parse_xml(std::string_view in, Element& root, std::string& error) {
  std::vector<Element*> open;  // ancestors of the current position; their vectors do not grow
  bool have_root = false;
  std::size_t i = in.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  auto skip_past = [&](std::string_view end, std::size_t from, const char* what) {
    std::size_t e = in.find(end, from);
    if (e == std::string_view::npos) {
      error = std::string("unterminated ") + what;
      return false;
    }
    i = e + end.size();
    return true;
  };
  while (i < in.size()) {
    if (in[i] != '<') {
      std::size_t end = std::min(in.find('<', i), in.size());
      std::string_view text = in.substr(i, end - i);
      i = end;
      if (!open.empty()) {
        if (!decode_entities(text, open.back()->text, error)) return false;
      } else if (!trim(text).empty()) {
        error = "text outside the root element";
        return false;
      }
      continue;
    }
    std::string_view rest = in.substr(i);
    if (rest.starts_with("<?")) {
      if (!skip_past("?>", i + 2, "processing instruction")) return false;
      continue;
    }
    if (rest.starts_with("<!--")) {
      if (!skip_past("-->", i + 4, "comment")) return false;
      continue;
    }
    if (rest.starts_with("<![CDATA[")) {
      std::size_t start = i + 9;
      if (!skip_past("]]>", start, "CDATA section")) return false;
      if (open.empty()) {
        error = "CDATA outside the root element";
        return false;
      }
      open.back()->text.append(in.substr(start, i - 3 - start));
      continue;
    }
    if (rest.starts_with("<!")) {
      error = "unexpected DOCTYPE or declaration";
      return false;
    }
    // A tag ends at the first '>' outside a quoted attribute value.
    std::size_t j = i + 1;
    for (char quote = 0; j < in.size(); ++j) {
      char c = in[j];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '>') {
        break;
      }
    }
    if (j >= in.size()) {
      error = "unterminated tag";
      return false;
    }
    std::string_view tag = in.substr(i + 1, j - i - 1);
    i = j + 1;
    if (tag.starts_with('/')) {
      std::string_view name = trim(tag.substr(1));
      if (open.empty() || open.back()->name != name) {
        error = "unexpected </" + std::string(name) + ">";
        return false;
      }
      open.pop_back();
      continue;
    }
    bool self_closing = tag.ends_with('/');
    if (self_closing) tag.remove_suffix(1);
    std::string_view name = tag.substr(0, tag.find_first_of(" \t\r\n"));
    if (!valid_xml_name(name)) {
      error = "malformed tag <" + std::string(tag.substr(0, 40)) + ">";
      return false;
    }
    Element* e;
    if (open.empty()) {
      if (have_root) {
        error = "more than one root element";
        return false;
      }
      have_root = true;
      root = Element{std::string(name), {}, {}};
      e = &root;
    } else {
      if (open.size() >= kMaxXmlDepth) {
        error = "elements nested too deeply";
        return false;
      }
      open.back()->children.push_back(Element{std::string(name), {}, {}});
      e = &open.back()->children.back();
    }
    if (!self_closing) open.push_back(e);
  }
  if (!open.empty()) {
    error = "the document ends inside <" + open.back()->name + "> (truncated?)";
    return false;
  }
  if (!have_root) {
    error = "no XML element";
    return false;
  }
  return true;
}

// encoding-type=url listings: S3 form-encodes keys ('+' is a space), as botocore's decoding has it.
bool url_decode_form(std::string_view s, std::string& out) {
  auto hexval = [](char c) {
    return is_digit(c)            ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size() || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) return false;
      out += static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return true;
}

}  // namespace

// ---- public API -------------------------------------------------------------------------------

std::string uri_encode(std::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (is_alnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out += c;
    } else {
      auto u = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    }
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr)) {
    fail(ErrorCode::unavailable, "", "OpenSSL SHA-256 failed");
  }
  return to_hex(md, len);
}

std::string canonical_request(const Request& r, const HeaderList& signed_headers_lowercase_sorted) {
  HeaderList headers = normalize_headers(signed_headers_lowercase_sorted);
  std::string out =
      r.method + "\n" + canonical_uri(r.path) + "\n" + canonical_query(r.query) + "\n";
  std::string names;
  for (const auto& [name, value] : headers) {
    out += name + ":" + value + "\n";
    if (!names.empty()) names += ';';
    names += name;
  }
  out += "\n" + names + "\n" + r.payload_sha256;
  return out;
}

std::string string_to_sign(std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request_hash) {
  std::string out(kAlgorithm);
  out += '\n';
  out += amz_date;
  out += '\n';
  out += scope;
  out += '\n';
  out += canonical_request_hash;
  return out;
}

HeaderList sign(const Request& r, const Credentials& c, const std::string& region,
                const std::string& service, std::string_view amz_date) {
  auto invalid = [](std::string cause) { fail(ErrorCode::invalid_argument, "", std::move(cause)); };
  if (!valid_amz_date(amz_date)) {
    invalid("SigV4 date '" + std::string(amz_date.substr(0, 40)) + "' is not YYYYMMDDTHHMMSSZ");
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    invalid("cannot sign an S3 request without an access key id and a secret access key");
  }
  if (has_control(c.access_key_id) || c.access_key_id.find('/') != std::string::npos ||
      has_control(c.session_token)) {
    invalid("the access key id or session token contains characters a header cannot carry");
  }
  for (const std::string* part : {&region, &service}) {
    if (part->empty() || part->find('/') != std::string::npos || has_control(*part)) {
      invalid("region and service must be non-empty, without '/' (got '" + region + "', '" +
              service + "')");
    }
  }
  if (!is_token(r.method)) invalid("malformed HTTP method '" + r.method + "'");
  if (r.host.empty() || has_control(r.host) ||
      r.host.find_first_of(" \t/?#@") != std::string::npos) {
    invalid("malformed host '" + r.host + "'");
  }
  if (r.payload_sha256.empty() || has_control(r.payload_sha256)) {
    invalid("malformed payload hash '" + r.payload_sha256 + "'");
  }

  HeaderList own;
  for (const auto& [name, value] : r.headers) {
    std::string n = lower(trim(name));
    if (!is_token(n)) invalid("malformed header name '" + name + "'");
    if (has_control(value)) invalid("the value of header '" + n + "' contains control characters");
    if (n == "host" || n == "x-amz-date" || n == "x-amz-content-sha256" ||
        n == "x-amz-security-token" || n == "authorization") {
      invalid("header '" + n + "' is set by the signer; pass it through Request or Credentials");
    }
    own.emplace_back(std::move(n), value);
  }
  own = normalize_headers(own);

  HeaderList out = {{"host", r.host},
                    {"x-amz-date", std::string(amz_date)},
                    {"x-amz-content-sha256", r.payload_sha256}};
  if (!c.session_token.empty()) out.emplace_back("x-amz-security-token", c.session_token);
  out.insert(out.end(), own.begin(), own.end());

  HeaderList signed_headers = normalize_headers(out);
  std::string names;
  for (const auto& h : signed_headers) names += (names.empty() ? "" : ";") + h.first;

  std::string_view date = amz_date.substr(0, 8);
  std::string scope = std::string(date) + "/" + region + "/" + service + "/aws4_request";
  std::string sts =
      string_to_sign(amz_date, scope, sha256_hex(canonical_request(r, signed_headers)));

  std::string secret = "AWS4" + c.secret_access_key;
  Digest key = hmac_sha256(secret, date);
  OPENSSL_cleanse(secret.data(), secret.size());
  key = hmac_sha256(as_view(key), region);
  key = hmac_sha256(as_view(key), service);
  key = hmac_sha256(as_view(key), "aws4_request");
  Digest sig = hmac_sha256(as_view(key), sts);
  OPENSSL_cleanse(key.data(), key.size());

  out.emplace_back("authorization", std::string(kAlgorithm) + " Credential=" + c.access_key_id +
                                        "/" + scope + ", SignedHeaders=" + names +
                                        ", Signature=" + to_hex(sig.data(), sig.size()));
  return out;
}

std::string request_url(const Request& r, std::string_view scheme) {
  if (scheme != "http" && scheme != "https") {
    fail(ErrorCode::invalid_argument, "",
         "S3 request scheme must be http or https, not '" + std::string(scheme) + "'");
  }
  std::string url = std::string(scheme) + "://" + r.host + canonical_uri(r.path);
  std::string q = canonical_query(r.query);
  if (!q.empty()) url += "?" + q;
  return url;
}

std::string amz_date_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return std::string(buf, n);
}

Credentials resolve_credentials(const std::string& profile) {
  auto id = env("AWS_ACCESS_KEY_ID");
  auto secret = env("AWS_SECRET_ACCESS_KEY");
  if (id && secret) return {*id, *secret, env("AWS_SESSION_TOKEN").value_or("")};
  if (id || secret) {
    fail(ErrorCode::invalid_argument, "",
         std::string(id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                        : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not") +
             "; set both (and AWS_SESSION_TOKEN for temporary credentials), or neither to use "
             "the shared credentials file");
  }

  std::string name = profile;
  std::string name_from = "the argument";
  if (name.empty()) {
    auto p = env("AWS_PROFILE");
    name = p.value_or("default");
    name_from = p ? "AWS_PROFILE" : "the default";
  }
  std::optional<std::string> path = aws_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  std::string where = path ? *path : "~/.aws/credentials";
  std::string how =
      "; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for "
      "temporary credentials), or put aws_access_key_id and aws_secret_access_key "
      "in section [" +
      name + "] of " + where +
      " (AWS_SHARED_CREDENTIALS_FILE names another file, AWS_PROFILE another "
      "profile)";
  std::string lead = "no AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set";
  auto denied = [&](const std::string& why) {
    fail(ErrorCode::permission_denied, "", lead + ", and " + why + how);
  };

  if (!path) denied("HOME is not set, so there is no ~/.aws/credentials");
  FileRead file = read_file(*path);
  if (file.state == FileRead::missing) denied(*path + " does not exist");
  if (file.state == FileRead::unreadable) {
    denied("the credentials file " + *path + " cannot be read (" + file.error + ")");
  }
  Ini ini = parse_ini(file.text);
  const IniSection* s = find_section(ini, name);
  if (!s) denied(*path + " has no section [" + name + "] (profile from " + name_from + ")");
  Credentials c{get(*s, "aws_access_key_id"), get(*s, "aws_secret_access_key"),
                get(*s, "aws_session_token")};
  if (c.access_key_id.empty() && c.secret_access_key.empty()) {
    denied("section [" + name + "] of " + *path +
           " has no aws_access_key_id / aws_secret_access_key (only static keys are read: for "
           "SSO, role or credential_process profiles, export them with `aws configure "
           "export-credentials --profile " +
           name + " --format env`)");
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    fail(ErrorCode::invalid_argument, "",
         "section [" + name + "] of " + *path + " has " +
             (c.access_key_id.empty() ? "aws_secret_access_key but no aws_access_key_id"
                                      : "aws_access_key_id but no aws_secret_access_key"));
  }
  return c;
}

std::string resolve_region(const std::string& profile) {
  if (auto r = env("AWS_REGION")) return *r;
  if (auto r = env("AWS_DEFAULT_REGION")) return *r;
  std::string name = profile.empty() ? env("AWS_PROFILE").value_or("default") : profile;
  if (auto path = aws_file("AWS_CONFIG_FILE", ".aws/config")) {
    FileRead file = read_file(*path);
    if (file.state == FileRead::ok) {
      Ini ini = parse_ini(file.text);
      // The config file names profiles "[profile NAME]"; the default one also plain "[default]".
      for (const std::string& section :
           {"profile " + name, name == "default" ? name : std::string()}) {
        if (section.empty()) continue;
        if (const IniSection* s = find_section(ini, section)) {
          std::string region = get(*s, "region");
          if (!region.empty()) return region;
        }
      }
    }
  }
  return "us-east-1";
}

Location parse_s3_url(std::string_view url) {
  auto invalid = [](std::string shown, const std::string& why) {
    fail(ErrorCode::invalid_argument, std::move(shown), why + " (expected s3://bucket/key)");
  };
  if (url.size() < 5 || lower(url.substr(0, 5)) != "s3://") {
    invalid(std::string(url), "not an s3:// URL");
  }
  std::string_view rest = url.substr(5);
  std::size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  std::string_view key = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  if (std::size_t at = bucket.rfind('@'); at != std::string_view::npos) {
    // Never echo what precedes '@': it would be a key or a secret.
    invalid("s3://...@" + std::string(rest.substr(at + 1)),
            "credentials in the URL are not supported; use the environment or ~/.aws/credentials");
  }
  if (bucket.empty()) invalid(std::string(url), "no bucket name");
  for (char c : bucket) {
    if (!is_alnum(c) && c != '.' && c != '-' && c != '_') {
      invalid(std::string(url), "bucket name '" + std::string(bucket) +
                                    "' may only contain letters, digits, '.', '-' and '_'");
    }
  }
  return {std::string(bucket), std::string(key)};
}

ListPage parse_list_objects_v2(std::string_view xml) {
  auto corrupt = [](const std::string& why) {
    fail(ErrorCode::corrupt_data, "", "S3 ListObjectsV2 response: " + why);
  };
  Element root;
  std::string error;
  if (!parse_xml(xml, root, error)) corrupt("not well-formed XML: " + error);
  if (root.name != "ListBucketResult") {
    corrupt("the root element is <" + root.name + ">, not <ListBucketResult>" +
            (root.name == "Error" ? " (" + error_summary(xml) + ")" : ""));
  }
  bool url_encoded = false;
  if (const Element* e = root.child("EncodingType")) {
    std::string_view t = trim(e->text);
    if (t != "url" && !t.empty()) corrupt("unknown EncodingType '" + std::string(t) + "'");
    url_encoded = t == "url";
  }
  ListPage page;
  for (const Element& c : root.children) {
    if (c.name != "Contents") continue;
    const Element* k = c.child("Key");
    if (!k || k->text.empty()) corrupt("a <Contents> without a <Key>");
    if (!url_encoded) {
      page.keys.push_back(k->text);
      continue;
    }
    std::string key;
    if (!url_decode_form(k->text, key)) corrupt("malformed url-encoded key '" + k->text + "'");
    page.keys.push_back(std::move(key));
  }
  bool truncated = false;
  if (const Element* t = root.child("IsTruncated")) {
    std::string_view v = trim(t->text);
    if (v != "true" && v != "false") corrupt("IsTruncated is '" + std::string(v) + "'");
    truncated = v == "true";
  }
  if (truncated) {
    const Element* t = root.child("NextContinuationToken");
    std::string_view token = t ? trim(t->text) : std::string_view();
    // Without a token the rest of the listing cannot be fetched: fail rather than stop short.
    if (token.empty()) corrupt("IsTruncated is true but there is no NextContinuationToken");
    page.next_token = std::string(token);
  }
  return page;
}

Endpoint resolve_endpoint(const std::string& bucket, const std::string& endpoint_option,
                          const std::string& region) {
  std::string endpoint = endpoint_option;
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL").value_or("");
  if (endpoint.empty()) {
    // A bucket name with dots is not covered by AWS's certificate as a virtual host.
    if (bucket.find('.') != std::string::npos) {
      return {"https", "s3." + region + ".amazonaws.com", "/" + bucket};
    }
    return {"https", bucket + ".s3." + region + ".amazonaws.com", ""};
  }
  std::size_t sep = endpoint.find("://");
  if (sep == std::string::npos) {
    fail(ErrorCode::invalid_argument, endpoint,
         "S3 endpoint must be a URL such as http://127.0.0.1:9000");
  }
  std::string scheme = lower(endpoint.substr(0, sep));
  std::string rest = endpoint.substr(sep + 3);
  std::size_t slash = rest.find('/');
  std::string host = rest.substr(0, slash);
  // curl leaves a default port out of the Host header, so the signed host must too.
  const std::string default_port = scheme == "https" ? ":443" : scheme == "http" ? ":80" : "";
  if (!default_port.empty() && host.size() > default_port.size() && host.ends_with(default_port)) {
    host.resize(host.size() - default_port.size());
  }
  std::string base = slash == std::string::npos ? "" : rest.substr(slash);
  while (!base.empty() && base.back() == '/') base.pop_back();
  return {scheme, host, base + "/" + bucket};
}

std::string parse_upload_id(std::string_view xml) {
  auto corrupt = [](const std::string& why) {
    fail(ErrorCode::corrupt_data, "", "S3 CreateMultipartUpload response: " + why);
  };
  Element root;
  std::string error;
  if (!parse_xml(xml, root, error)) corrupt("not well-formed XML: " + error);
  if (root.name != "InitiateMultipartUploadResult") {
    corrupt("the root element is <" + root.name + ">, not <InitiateMultipartUploadResult>" +
            (root.name == "Error" ? " (" + error_summary(xml) + ")" : ""));
  }
  const Element* id = root.child("UploadId");
  std::string_view t = id ? trim(id->text) : std::string_view();
  if (t.empty()) corrupt("no <UploadId>");
  return std::string(t);
}

bool is_error_document(std::string_view body) {
  Element root;
  std::string error;
  return parse_xml(body, root, error) && root.name == "Error";
}

std::string error_summary(std::string_view body) {
  Element root;
  std::string error;
  if (parse_xml(body, root, error) && root.name == "Error") {
    const Element* code = root.child("Code");
    const Element* message = root.child("Message");
    std::string c(code ? trim(code->text) : "");
    std::string m(message ? trim(message->text) : "");
    if (!c.empty()) return m.empty() ? c : c + ": " + m;
    if (!m.empty()) return m;
  }
  return std::string(body.substr(0, 200));
}

}  // namespace wds::s3
