// Shard index text (wds::parse_index, DALI's v1.1/v1.2 format), read from files or URLs next to
// the shards.
//
// Input: the index text. Checks: no crash, UB or leak, no allocation beyond -malloc_limit_mb
// (the announced sample count is not reserved blindly), errors are wds::Error naming where the
// index came from; an index that format_index can write parses back to the same text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "wds/index.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string where = "fuzz.idx";
  wds::ShardIndex index;
  try {
    index = wds::parse_index(wds_fuzz::as_text(data, size), where);
  } catch (const wds::Error& e) {
    wds_fuzz::check(e.url() == where, "an index error names the index");
    return 0;
  }
  try {
    wds::check_index_bounds(index, size, "fuzz.tar");
  } catch (const wds::Error&) {
  }
  std::string text;
  try {
    text = wds::format_index(index);
  } catch (const wds::Error&) {
    return 0;  // v1.1 (no names) cannot be written as v1.2
  }
  // Not caught: the text format_index writes must parse.
  wds_fuzz::check(wds::format_index(wds::parse_index(text, where)) == text,
                  "format_index output parses back to itself");
  return 0;
}
