// The XML bodies S3 servers answer with (lib/storage/s3.hpp): ListObjectsV2 pages, which list the shards
// of an s3:// prefix or glob, CreateMultipartUpload answers and <Error> documents.
//
// Input: the response body. Checks: no crash (deep nesting included), UB or leak, errors are
// wds::Error; error_summary never throws and stays short for a body that is no <Error>; a
// truncated page has a continuation token.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "lib/storage/s3.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view xml = wds_fuzz::as_text(data, size);
  try {
    wds::s3::ListPage page = wds::s3::parse_list_objects_v2(xml);
    wds_fuzz::check(!page.next_token || !page.next_token->empty(), "a token is not empty");
    for (const std::string& key : page.keys) wds_fuzz::check(!key.empty(), "keys are not empty");
  } catch (const wds::Error&) {
  }
  try {
    wds_fuzz::check(!wds::s3::parse_upload_id(xml).empty(), "an upload id is not empty");
  } catch (const wds::Error&) {
  }
  bool is_error = wds::s3::is_error_document(xml);
  std::string summary = wds::s3::error_summary(xml);
  wds_fuzz::check(is_error || summary.size() <= 200, "a summary of a non-error body is short");
  return 0;
}
