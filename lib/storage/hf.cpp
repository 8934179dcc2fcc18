#include "lib/storage/hf.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lib/storage/s3.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::hf {
namespace {

constexpr const char* kDefaultEndpoint = "https://huggingface.co";

// Letters, digits, '-', '_' and '.': what the Hub allows in an owner's or a repository's name.
bool valid_name(std::string_view s) {
  return !s.empty() && s.size() <= 96 && std::all_of(s.begin(), s.end(), [](char c) {
    return is_ascii_alnum(c) || c == '-' || c == '_' || c == '.';
  });
}

// Percent-decoding that refuses a '%' not followed by two hexadecimal digits.
std::optional<std::string> strict_percent_decode(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') continue;
    if (i + 2 >= s.size() || hex_digit_value(s[i + 1]) < 0 || hex_digit_value(s[i + 2]) < 0) {
      return std::nullopt;
    }
  }
  return percent_decode(s);
}

// "datasets", "models", "spaces": the API's name for each type.
const char* api_kind(RepoType type) {
  switch (type) {
    case RepoType::dataset:
      return "datasets";
    case RepoType::space:
      return "spaces";
    case RepoType::model:
      break;
  }
  return "models";
}

// What comes before ORG/NAME in the Hub's (and hf://) paths: models have nothing.
std::string repo_prefix(RepoType type) {
  return type == RepoType::model ? std::string() : std::string(api_kind(type)) + "/";
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(trim(v)) : std::string();
}

// The token file the Hub's tools write (`hf auth login`): HF_TOKEN_PATH, else $HF_HOME/token.
std::string token_path() {
  if (std::string path = env_or_empty("HF_TOKEN_PATH"); !path.empty()) return path;
  std::string home = env_or_empty("HF_HOME");
  if (home.empty()) {
    std::string cache = env_or_empty("XDG_CACHE_HOME");
    if (cache.empty()) {
      const std::string user_home = env_or_empty("HOME");
      if (user_home.empty()) return "";
      cache = user_home + "/.cache";
    }
    home = cache + "/huggingface";
  }
  return home + "/token";
}

std::optional<nlohmann::json> parse_json(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

}  // namespace

Location parse_hf_url(std::string_view url) {
  const std::string u(url);
  auto bad = [&u](const std::string& why) {
    throw Error::invalid_argument(
        u, "",
        why +
            " (hf:// URLs are hf://datasets/ORG/NAME[@REVISION]/PATH, hf://ORG/NAME/... for "
            "models, hf://spaces/ORG/NAME/...)");
  };
  if (lowercase(url.substr(0, 5)) != "hf://") bad("not an hf:// URL");
  std::string_view rest = url.substr(5);
  Location l;
  if (rest.substr(0, 9) == "datasets/") {
    l.type = RepoType::dataset;
    rest.remove_prefix(9);
  } else if (rest.substr(0, 7) == "spaces/") {
    l.type = RepoType::space;
    rest.remove_prefix(7);
  }
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) bad("names no repository as ORG/NAME");
  const std::string_view owner = rest.substr(0, slash);
  rest.remove_prefix(slash + 1);
  const std::size_t end = std::min(rest.find('/'), rest.size());
  std::string_view name = rest.substr(0, end);
  l.path = std::string(end < rest.size() ? rest.substr(end + 1) : std::string_view());
  if (const std::size_t at = name.find('@'); at != std::string_view::npos) {
    const std::string_view written = name.substr(at + 1);
    name = name.substr(0, at);
    std::optional<std::string> revision = strict_percent_decode(written);
    if (written.empty()) bad("an empty revision after '@'");
    if (!revision) bad("a revision with a '%' not followed by two hexadecimal digits");
    if (*revision == "refs") {
      bad("a revision holding '/' must be written percent-encoded (@refs%2Fconvert%2Fparquet)");
    }
    l.revision = std::move(*revision);
  }
  if (!valid_name(owner) || !valid_name(name)) {
    bad("'" + std::string(owner) + "/" + std::string(name) +
        "' is not a repository name (letters, digits, '-', '_', '.')");
  }
  l.repo = std::string(owner) + "/" + std::string(name);
  return l;
}

std::string hf_url(const Location& location, const std::string& revision, const std::string& path) {
  return "hf://" + repo_prefix(location.type) + location.repo + "@" +
         s3::uri_encode(revision, true) + "/" + path;
}

Config resolve_config(const HfOptions& options) {
  Config c;
  c.endpoint = !options.endpoint.empty() ? options.endpoint : env_or_empty("HF_ENDPOINT");
  if (c.endpoint.empty()) c.endpoint = kDefaultEndpoint;
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  const std::string scheme = lowercase(c.endpoint.substr(0, c.endpoint.find("://")));
  if ((scheme != "http" && scheme != "https") || c.endpoint.find("://") == std::string::npos) {
    throw Error::invalid_argument(
        "the Hub endpoint (HfOptions::endpoint or HF_ENDPOINT) must be "
        "an http:// or https:// URL, not '" +
        c.endpoint + "'");
  }
  if (options.anonymous) return c;
  if (!options.token.empty()) {
    c.token = options.token;
    c.token_source = "HfOptions::token";
  } else if (std::string t = env_or_empty("HF_TOKEN"); !t.empty()) {
    c.token = std::move(t);
    c.token_source = "HF_TOKEN";
  } else if (std::string old = env_or_empty("HUGGING_FACE_HUB_TOKEN"); !old.empty()) {
    c.token = std::move(old);
    c.token_source = "HUGGING_FACE_HUB_TOKEN";
  } else if (const std::string path = token_path(); !path.empty()) {
    std::ifstream in(path);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      c.token = std::string(trim(text.str()));
      c.token_source = "the token file " + path;
    }
  }
  // A header holds no control characters or spaces: refused rather than sent mangled.
  if (std::any_of(c.token.begin(), c.token.end(), [](char ch) {
        return static_cast<unsigned char>(ch) <= 0x20 || static_cast<unsigned char>(ch) == 0x7f;
      })) {
    throw Error::invalid_argument("the Hub token from " + c.token_source +
                                  " holds spaces or control characters");
  }
  return c;
}

std::string resolve_url(const std::string& endpoint, const Location& location,
                        const std::string& revision, const std::string& path) {
  return endpoint + "/" + repo_prefix(location.type) + location.repo + "/resolve/" +
         s3::uri_encode(revision, true) + "/" + s3::uri_encode(path, false);
}

std::string api_url(const std::string& endpoint, const Location& location, const std::string& what,
                    const std::string& revision, const std::string& path) {
  std::string url = endpoint + "/api/" + api_kind(location.type) + "/" + location.repo + "/" +
                    what + "/" + s3::uri_encode(revision, true);
  if (!path.empty()) url += "/" + s3::uri_encode(path, false);
  return url;
}

bool is_commit(std::string_view revision) {
  return revision.size() == 40 && std::all_of(revision.begin(), revision.end(),
                                              [](char c) { return hex_digit_value(c) >= 0; });
}

std::vector<TreeEntry> parse_tree(std::string_view json) {
  std::optional<nlohmann::json> j = parse_json(json);
  if (!j || !j->is_array()) {
    throw Error::corrupt_data("the Hub's tree answer is not a JSON array: " + one_line(json, 80));
  }
  std::vector<TreeEntry> out;
  for (const nlohmann::json& e : *j) {
    if (!e.is_object() || !e.contains("path") || !e["path"].is_string() || !e.contains("type") ||
        !e["type"].is_string()) {
      throw Error::corrupt_data("the Hub's tree answer has an entry without a type and a path: " +
                                one_line(e.dump(), 80));
    }
    out.push_back({e["type"].get<std::string>() == "file", e["path"].get<std::string>()});
  }
  return out;
}

std::string parse_commit(std::string_view json) {
  std::optional<nlohmann::json> j = parse_json(json);
  if (!j || !j->is_object() || !j->contains("sha") || !(*j)["sha"].is_string() ||
      !is_commit((*j)["sha"].get<std::string>())) {
    throw Error::corrupt_data("the Hub's revision answer holds no commit \"sha\": " +
                              one_line(json, 80));
  }
  return (*j)["sha"].get<std::string>();
}

std::optional<std::string> next_link(std::string_view link) {
  // <url>; rel="next", <url>; rel="prev"
  while (!link.empty()) {
    const std::size_t open = link.find('<');
    const std::size_t close = link.find('>', open);
    if (open == std::string_view::npos || close == std::string_view::npos) return std::nullopt;
    const std::string_view url = link.substr(open + 1, close - open - 1);
    link.remove_prefix(close + 1);
    const std::string_view params = link.substr(0, link.find('<'));
    const std::string p = lowercase(params);
    if (p.find("rel=\"next\"") != std::string::npos || p.find("rel=next") != std::string::npos) {
      return std::string(url);
    }
  }
  return std::nullopt;
}

std::string error_summary(const std::string& body) {
  if (std::optional<nlohmann::json> j = parse_json(body);
      j && j->is_object() && j->contains("error") && (*j)["error"].is_string()) {
    return one_line((*j)["error"].get<std::string>());
  }
  return text_excerpt(body);
}

}  // namespace wds::hf
