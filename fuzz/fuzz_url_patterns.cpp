// URL strings as WebDataset takes them (wds::expand_urls: "::" lists, ${NAME} from WDS_NAME,
// braces), then the URL helpers every expanded name meets: url_scheme, is_listing_pattern and,
// for s3:// URLs, s3::parse_s3_url.
//
// Input: the URL string. A few WDS_* variables are set once, among them ones that refer to
// themselves and grow each round. Checks: no crash, UB or leak, errors are wds::Error; a scheme
// is lowercase; a parsed s3:// URL has a bucket.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "lib/storage/file.hpp"
#include "lib/storage/s3.hpp"
#include "wds/brace.hpp"
#include "wds/source.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("WDS_ROOT", "s3://bucket/data", 1);
  setenv("WDS_SHARDS", "train-{000..003}.tar", 1);
  setenv("WDS_SELF", "${SELF}${SELF}", 1);  // doubles in each of the 10 rounds
  setenv("WDS_EMPTY", "", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    wds::ExpandOptions options;
    options.max_names = 100'000;  // a few names make the point; millions only take time
    std::vector<std::string> urls = wds::expand_urls(wds_fuzz::as_text(data, size), options);
    std::size_t n = 0;
    for (const std::string& url : urls) {
      if (++n > 64) break;  // enough to meet every kind of name in the input
      std::string scheme = wds::url_scheme(url);
      for (char c : scheme) {
        wds_fuzz::check(!std::isupper(static_cast<unsigned char>(c)), "schemes lowercased");
      }
      (void)wds::is_listing_pattern(url);
      if (scheme == "s3") {
        try {
          wds::s3::Location loc = wds::s3::parse_s3_url(url);
          wds_fuzz::check(!loc.bucket.empty(), "an s3 URL has a bucket");
        } catch (const wds::Error&) {
        }
      }
    }
  } catch (const wds::Error&) {
  }
  return 0;
}
