// Shard index text: DALI's v1.1/v1.2 format (wds::parse_index), read from files or URLs next to
// the shards, and the wids JSON index (wds::parse_wids_index), read from a file or URL.
//
// Input: the index text, given to both parsers. Checks: no crash, UB or leak, no allocation
// beyond -malloc_limit_mb (the announced sample count is not reserved blindly), errors are
// wds::Error naming where the index came from; an index that format_index can write parses back
// to the same text; a wids index written by format_wids_index reads back to the same shards.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "wds/index.hpp"
#include "wds/wids_index.hpp"

namespace {

void check_wids(const std::string& text) {
  // Absolute, so that every url it resolves is written back in a form that resolves the same.
  const std::string where = "/fuzz/index.json";
  wds::WidsIndex index;
  try {
    index = wds::parse_wids_index(text, where);
  } catch (const wds::Error& e) {
    // A "datasets" entry naming another index is refused by its own message (no loader here).
    wds_fuzz::check(e.url() == where, "a wids index error names the index");
    return;
  }
  // Not caught: what parsed is written and reads back to the same shards.
  const wds::WidsIndex back = wds::parse_wids_index(wds::format_wids_index(index, where), where);
  wds_fuzz::check(back.urls() == index.urls() && back.nsamples() == index.nsamples(),
                  "format_wids_index output reads back to the same shards");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_wids(std::string(wds_fuzz::as_text(data, size)));
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
