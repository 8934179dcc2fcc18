// wds/brace.hpp: shard-name patterns, expanded exactly as WebDataset expands them.
//
//   wds::brace_expand("shard-{000..002}.tar")
//     -> shard-000.tar shard-001.tar shard-002.tar
//   wds::expand_urls("${ROOT}/a-{0..1}.tar::/b/c.tar")   // with WDS_ROOT=/data in the environment
//     -> /data/a-0.tar /data/a-1.tar /b/c.tar
//
// brace_expand follows Python's braceexpand 0.1.7: comma lists, integer ranges (inclusive, with
// step, descending, zero padding kept from either padded end), letter ranges over A..Z then a..z,
// nesting, a cartesian product of several groups (leftmost varying slowest), backslash escapes,
// braces that are neither a range nor a list kept literally. An unbalanced '{' or '}' is an
// invalid_argument Error whose message gives the position.
//
// Limits: patterns come from configs and WDS_* variables, so a slip must end in an error naming
// the pattern, not in a crash or a huge allocation. Braces nest at most kMaxBraceDepth levels,
// and a call produces at most ExpandOptions::max_names names, counted before any is built.
//
// Thread safety: both functions are pure (expand_urls reads the environment) and may be called
// concurrently.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace wds {

// Parsing and expanding recurse once per nesting level; deeper braces are an invalid_argument
// Error (no real shard name nests more than a few).
inline constexpr std::size_t kMaxBraceDepth = 100;

struct ExpandOptions {
  // The most names one call may produce (expand_urls: all "::" pieces together). More is an
  // invalid_argument Error giving the count, raised before anything is allocated. The default
  // holds ten million names (about 0.5 GB of strings).
  std::size_t max_names = 10'000'000;
};

// Expands one pattern. With escape=true (WebDataset's setting) a backslash makes the next character
// literal and is removed from the output.
std::vector<std::string> brace_expand(std::string_view pattern, bool escape = true,
                                      const ExpandOptions& options = {});

// WebDataset's URL-string expansion: split on every "::" (empty pieces kept), replace each
// ${NAME} with the environment variable WDS_NAME (substituted values may hold further ${...},
// up to 10 rounds; a missing variable is an invalid_argument Error), then brace-expand each piece,
// concatenating the results in order.
std::vector<std::string> expand_urls(std::string_view urls, const ExpandOptions& options = {});

}  // namespace wds
