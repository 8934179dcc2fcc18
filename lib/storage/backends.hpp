// The backend table (internal): what open_url, resolve_urls and open_sink look schemes up in,
// and the built-in backends, each defined beside its source.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "wds/backend.hpp"

namespace wds {

// "" and file: (local paths, "-" for stdin and stdout), in lib/storage/file.cpp.
Backend file_backend();
// http: and https:, in lib/storage/http_source.cpp.
Backend http_backend();
// s3:, in lib/storage/s3_source.cpp.
Backend s3_backend();
// pipe:, in lib/storage/pipe.cpp.
Backend pipe_backend();
// az: (Azure Blob Storage), in lib/storage/azure_backend.cpp.
Backend azure_backend();
// gs: (Google Cloud Storage), in lib/storage/gcs_backend.cpp.
Backend gcs_backend();
// hf: (the Hugging Face Hub), in lib/storage/hf_backend.cpp.
Backend hf_backend();

// Splits "scheme://authority/path" into "scheme://authority" and "/path"; a plain path or a URL
// without an authority has an empty prefix... except for its scheme, which stays with it.
std::pair<std::string, std::string> split_authority(const std::string& url);

// The backend serving `scheme` (as url_scheme gives it), or null.
std::shared_ptr<const Backend> find_backend(const std::string& scheme);

// The schemes whose backend has the function `has` asks about, for error messages: "file:,
// http:, ...", a plain path written as "local paths".
std::string schemes_that(bool (*has)(const Backend&));

// A backend's options of type T: the one set in `slots`, else T's defaults.
template <class T>
const T& options_of(const BackendOptions& slots) {
  static const T defaults{};
  const T* set = slots.get<T>();
  return set ? *set : defaults;
}

}  // namespace wds
