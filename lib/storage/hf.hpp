// Hugging Face Hub helpers (internal): hf:// URLs, the token and endpoint (HfOptions, the
// environment, the token file the Hub's tools write), the Hub's URLs, and the JSON and Link
// headers of its API. The backend itself (reads, listings, the revision pinned to a commit) is
// in lib/storage/hf_backend.cpp.
//
// Thread safety: everything is a pure function except resolve_config, which reads the
// environment and the token file.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wds/remote.hpp"

namespace wds::hf {

enum class RepoType { model, dataset, space };

// "hf://datasets/ORG/NAME@REV/PATH" -> {dataset, "ORG/NAME", "REV", "PATH"}. Models have no
// prefix ("hf://ORG/NAME/PATH"), spaces "spaces/". The revision is percent-decoded
// ("refs%2Fconvert%2Fparquet" -> "refs/convert/parquet"); the path is taken as written and may
// be empty or end in '/' (for listing). invalid_argument naming the URL if malformed.
struct Location {
  RepoType type = RepoType::model;
  std::string repo;                     // "ORG/NAME"
  std::optional<std::string> revision;  // none written: nullopt
  std::string path;
};
Location parse_hf_url(std::string_view url);

// The hf:// URL of `path` in the repository of `location` at `revision` (percent-encoded
// when it holds anything but letters, digits and "-_.~").
std::string hf_url(const Location& location, const std::string& revision, const std::string& path);

// Where and as whom to ask: HfOptions first, else the environment (HfOptions in
// wds/remote.hpp says which names). `token_source` names where the token came from, for
// messages (never the token). invalid_argument for an endpoint that is not http(s) or a token
// with characters a header cannot hold, naming neither the token nor the URL.
struct Config {
  std::string endpoint;  // no trailing '/'
  std::string token;     // empty: anonymous
  std::string token_source;
};
Config resolve_config(const HfOptions& options);

// {endpoint}/{datasets/|spaces/|}{repo}/resolve/{revision}/{path}: a file's bytes.
std::string resolve_url(const std::string& endpoint, const Location& location,
                        const std::string& revision, const std::string& path);
// {endpoint}/api/{datasets|models|spaces}/{repo}/{what}/{revision}[/{path}]: the API's
// "revision" (the commit of a branch or tag) and "tree" (a folder's entries).
std::string api_url(const std::string& endpoint, const Location& location, const std::string& what,
                    const std::string& revision, const std::string& path = "");

// True for a full commit id (40 hexadecimal digits), which needs no resolving.
bool is_commit(std::string_view revision);

// One entry of a tree page.
struct TreeEntry {
  bool is_file = false;
  std::string path;
};
// A tree page (a JSON array of {"type": "file"|"directory", "path": ...}); corrupt_data if it
// is not one.
std::vector<TreeEntry> parse_tree(std::string_view json);
// The "sha" of a revision answer; corrupt_data if there is none.
std::string parse_commit(std::string_view json);
// The URL of rel="next" in a Link header, if there is one.
std::optional<std::string> next_link(std::string_view link);
// An error answer's message for errors: the Hub's {"error": "..."}, else the body's text.
std::string error_summary(const std::string& body);

}  // namespace wds::hf
