// Local files and standard input as ByteSources (registered for "", "file" and "-").
#pragma once

#include <memory>
#include <string>

#include "wds/source.hpp"

namespace wds {

// Opens a plain path, a file: URL, or "-" (stdin).
std::unique_ptr<ByteSource> open_file_source(const std::string& url, const OpenOptions& options);

// The local path a plain path or file: URL names ("file:///a%20b.tar" -> "/a b.tar").
std::string file_url_to_path(const std::string& url);

// A wds::Error for a failed system call on `url`, with the category errno implies.
[[noreturn]] void throw_errno(const std::string& url, const std::string& what, int err);

}  // namespace wds
