// Brace expansion of shard-name patterns (wds::brace_expand), which also come from configs and
// WDS_* environment variables.
//
// Input: one byte (bit 0: escape mode), then the pattern. The limit is 10^5 names rather than
// the default 10^7, so that fuzzing does not spend its time building ten million names. Checks: no
// crash (deep nesting must not overflow the stack), UB or leak, no allocation beyond
// -malloc_limit_mb (a huge range is refused, not allocated), errors are wds::Error; a pattern
// holding no brace or backslash expands to itself alone.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "wds/brace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  bool escape = (data[0] & 1) != 0;
  wds::ExpandOptions options;
  options.max_names = 100'000;
  std::string_view pattern = wds_fuzz::as_text(data + 1, size - 1);
  try {
    std::vector<std::string> names = wds::brace_expand(pattern, escape, options);
    if (pattern.find_first_of("{}\\") == std::string_view::npos) {
      wds_fuzz::check(names.size() == 1 && names[0] == pattern, "plain text expands to itself");
    }
    wds_fuzz::check(names.size() <= options.max_names, "at most max_names names");
  } catch (const wds::Error&) {
  }
  return 0;
}
