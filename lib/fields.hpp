// Field lookup by extension (internal), shared by Sample (bytes) and DecodedSample (values) so
// that both find fields, and say which ones a sample has, the same way.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "wds/error.hpp"

namespace wds::detail {

// The first of `fields` (each with a std::string member `ext`) named `ext`, or fields.end().
template <class Fields>
auto find_field(Fields& fields, std::string_view ext) noexcept {
  return std::find_if(fields.begin(), fields.end(), [ext](const auto& f) { return f.ext == ext; });
}

// What at() throws for a field the sample lacks: an invalid_argument Error naming the sample
// and the fields it has.
template <class Fields>
Error missing_field(const Fields& fields, std::string_view ext, const std::string& url,
                    const std::string& key) {
  std::string have;
  for (const auto& f : fields) have += (have.empty() ? "" : ", ") + f.ext;
  return Error::invalid_argument(url, key,
                                 "sample has no field '" + std::string(ext) +
                                     "' (it has: " + (have.empty() ? "none" : have) + ")");
}

}  // namespace wds::detail
