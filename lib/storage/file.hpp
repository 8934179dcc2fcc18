// The local file backend (lib/storage/backends.hpp: "", "file" and "-"): local files and standard
// input as ByteSources, files and standard output as ByteSinks, and listing local shards (a
// directory or a glob to a sorted list of files).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wds/sink.hpp"
#include "wds/source.hpp"

namespace wds {

// Opens a plain path, a file: URL, or "-" (stdin).
std::unique_ptr<ByteSource> open_file_source(const std::string& url, const OpenOptions& options);

// A plain path or file: URL, written to "<path>.tmp-<pid>-<n>" and renamed into place on
// close(); "-" is standard output.
std::unique_ptr<ByteSink> open_file_sink(const std::string& url);

// The local path a plain path or file: URL names ("file:///a%20b.tar" -> "/a b.tar").
std::string file_url_to_path(const std::string& url);

// Writes all of `bytes` to fd (again after EINTR and short writes). Errors: throw_errno(url,
// what, errno).
void write_all(int fd, std::span<const std::byte> bytes, const std::string& url,
               const std::string& what);
// Reads out.size() bytes at `offset` (pread, again after EINTR and short reads), fewer only when
// the file ends first: returns how many. Errors: throw_errno(url, what, errno).
std::size_t pread_upto(int fd, std::span<std::byte> out, std::uint64_t offset,
                       const std::string& url, const std::string& what);
// pread_upto, and a file that ends before out.size() bytes is unavailable.
void pread_all(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& url,
               const std::string& what);

// A file written under a temporary name beside `path` ("<path><marker><pid>-<n>") and renamed
// into place by commit(), so that no reader sees a partial file under `path`; destroyed
// uncommitted, or abandoned, it is removed. Errors name `url`; `kind` says what the file is in
// them ("cache file"), empty for nothing.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string_view marker, std::string url, std::string kind = "");
  ~AtomicFile() { abandon(); }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Whether it is still being written (neither committed nor abandoned).
  bool is_open() const noexcept { return fd_ >= 0; }
  void write(std::span<const std::byte> bytes);
  // Closes the file (after fsync when `sync`) and renames it into place; on failure the
  // temporary file is removed and the error thrown.
  void commit(bool sync);
  void abandon() noexcept;

 private:
  std::string path_, temp_, url_;
  int fd_ = -1;
};

// A wds::Error for a failed system call on `url`, with the category errno implies.
[[noreturn]] void throw_errno(const std::string& url, const std::string& what, int err);

// Listing local shards.
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
