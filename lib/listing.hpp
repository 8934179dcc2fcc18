// Listing local shards: a directory ("data/") or a glob ("data/train-*.tar") to a sorted list of
// files.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace wds {

// The regular files `pattern` names, sorted bytewise (never an empty list):
//   - "dir/" (a trailing '/'): the files directly in the directory, as "dir/" + name;
//   - a pattern holding '*', '?' or '[': POSIX glob(3) over paths (no brace expansion; expand
//     braces first), matching only regular files;
//   - anything else: the file itself, if it exists.
// Symbolic links to regular files count as files; names starting with '.' are left out, as
// glob's '*' leaves them out. A "file:" prefix is kept on the outputs (a '%' in a name found is
// written "%25" there, so that the URL reads back as the same path).
//
// Errors: not_found "no files match" when nothing matches; the error of a directory that cannot
// be read (permission_denied, not_found, ...); invalid_argument for an empty pattern.
std::vector<std::string> list_local(const std::string& pattern);

// Whether `url` is a pattern to list rather than one shard: it ends in '/' or holds a '*', or,
// for a local path or file: URL, holds a '?' or '[' (in other URLs those start a query or are
// literal). pipe: URLs are shell commands, never patterns.
bool is_listing_pattern(std::string_view url);

}  // namespace wds
