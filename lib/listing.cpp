// Listing local shards: directory listings and glob patterns.
#include "lib/listing.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <new>

#include "lib/file_source.hpp"
#include "wds/error.hpp"
#include "wds/source.hpp"

namespace wds {
namespace {

bool has_glob_magic(std::string_view s) {
  return s.find_first_of("*?[") != std::string_view::npos;
}

// The part of a file: URL before its path ("file://host", "file://", "file:"), or "" for a
// plain path. file_url_to_path gives the path after it.
std::string url_prefix(const std::string& pattern) {
  if (url_scheme(pattern) != "file") return "";
  if (pattern.compare(5, 2, "//") != 0) return pattern.substr(0, 5);
  return pattern.substr(0, std::min(pattern.find('/', 7), pattern.size()));
}

// `path` as written after `prefix`: file_url_to_path decodes %XX, so in a URL a literal '%' is
// escaped.
std::string escape_path(const std::string& prefix, std::string_view path) {
  if (prefix.empty()) return std::string(path);
  std::string out;
  for (char c : path) {
    if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

bool is_hidden(std::string_view name) {
  return !name.empty() && name.front() == '.';
}

// Whether `path` (relative to dirfd) is a regular file, following symbolic links. A name that
// vanished or a dangling link is not; other failures are errors.
bool is_regular_file(int dirfd, const char* path, const std::string& pattern) {
  struct stat st {};
  if (::fstatat(dirfd, path, &st, 0) == 0) return S_ISREG(st.st_mode);
  if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return false;
  throw_errno(pattern, std::string("stat ") + path, errno);
}

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

std::vector<std::string> list_directory(const std::string& pattern, const std::string& prefix,
                                        const std::string& dir) {
  std::unique_ptr<DIR, DirCloser> d(::opendir(dir.c_str()));
  if (!d) throw_errno(pattern, "open directory", errno);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d.get());
    if (e == nullptr) {
      if (errno != 0) throw_errno(pattern, "read directory", errno);
      break;
    }
    std::string_view name(e->d_name);
    if (is_hidden(name)) continue;  // also "." and ".."
    bool regular = e->d_type == DT_REG;
    // A link or a file system without d_type needs a stat to tell.
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      regular = is_regular_file(::dirfd(d.get()), e->d_name, pattern);
    }
    if (regular) names.emplace_back(name);
  }
  if (names.empty()) {
    throw Error(ErrorCode::not_found, pattern, "",
                "no files match: the directory holds no regular files");
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  out.reserve(names.size());
  // The pattern is kept as written; only the names found need escaping in a URL.
  for (const std::string& name : names) out.push_back(pattern + escape_path(prefix, name));
  return out;
}

// glob's error callback takes no context argument; one glob runs per thread at a time.
thread_local int glob_errno = 0;
thread_local std::string glob_error_path;

int on_glob_error(const char* path, int err) {
  // A directory missing on one branch of "a/*/b/*.tar" just does not match there.
  if (err == ENOENT || err == ENOTDIR) return 0;
  glob_errno = err;
  glob_error_path = path;
  return 1;  // stop: a directory we cannot read might hold matches
}

struct GlobFree {
  void operator()(glob_t* g) const { ::globfree(g); }
};

std::vector<std::string> list_glob(const std::string& pattern, const std::string& prefix,
                                   const std::string& path_pattern) {
  glob_t g{};
  glob_errno = 0;
  glob_error_path.clear();
  // GLOB_NOSORT: glob sorts by the locale's collation; the result is sorted bytewise below.
  int rc = ::glob(path_pattern.c_str(), GLOB_NOSORT, on_glob_error, &g);
  std::unique_ptr<glob_t, GlobFree> owner(&g);
  if (rc == GLOB_ABORTED) {
    throw_errno(pattern, "read directory " + glob_error_path, glob_errno ? glob_errno : EIO);
  }
  if (rc == GLOB_NOSPACE) throw std::bad_alloc();
  std::vector<std::string> paths;
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) {
      if (is_regular_file(AT_FDCWD, g.gl_pathv[i], pattern)) paths.emplace_back(g.gl_pathv[i]);
    }
  }
  if (paths.empty()) throw Error(ErrorCode::not_found, pattern, "", "no files match");
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const std::string& p : paths) out.push_back(prefix + escape_path(prefix, p));
  return out;
}

}  // namespace

std::vector<std::string> list_local(const std::string& pattern) {
  if (pattern.empty()) throw Error(ErrorCode::invalid_argument, pattern, "", "empty pattern");
  std::string prefix = url_prefix(pattern);
  // file_url_to_path knows "file:" and "FILE:" only; the scheme matches in any case.
  std::string path = prefix.empty() ? pattern : file_url_to_path("file:" + pattern.substr(5));
  if (path.empty()) throw Error(ErrorCode::invalid_argument, pattern, "", "URL names no path");
  if (path.back() == '/' && !has_glob_magic(path)) return list_directory(pattern, prefix, path);
  // "shards-*/" lists the files of every matching directory, as "dir/" lists one.
  if (path.back() == '/') path += '*';
  return list_glob(pattern, prefix, path);
}

bool is_listing_pattern(std::string_view url) {
  if (url.empty() || url == "-") return false;
  std::string scheme = url_scheme(url);
  if (scheme == "pipe") return false;
  if (url.back() == '/' || url.find('*') != std::string_view::npos) return true;
  return (scheme.empty() || scheme == "file") && has_glob_magic(url);
}

}  // namespace wds
