// NumPy .npz archives (wds/npy.hpp): a zip of .npy members, read and written with libarchive.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "wds/error.hpp"
#include "wds/npy.hpp"

namespace wds {

namespace {

constexpr std::string_view kNpySuffix = ".npy";
constexpr std::string_view kNpyMagic("\x93NUMPY", 6);
// Deflate expands at most 1032:1: no member of `n` compressed bytes holds more than this.
constexpr std::size_t kMaxDeflateRatio = 1032;

using ArchivePtr = std::unique_ptr<archive, int (*)(archive*)>;

[[noreturn]] void fail(std::string_view url, std::string_view member, std::string cause) {
  throw Error::corrupt_data(std::string(url), std::string(member), std::move(cause));
}

std::string libarchive_error(archive* a) {
  const char* msg = archive_error_string(a);
  return msg ? msg : "unknown error";
}

// One member's bytes, at most `budget` of them: a buffer sized from the size the archive
// states (bounded by what the input could expand to), grown while data keeps coming.
Bytes read_member(archive* a, std::size_t stated, std::size_t budget, std::size_t limit,
                  std::size_t input_size, const std::string& name, std::string_view url,
                  std::string_view member) {
  auto too_big = [&] {
    fail(url, member,
         "decompresses to more than " + std::to_string(limit) + " bytes (at '" + name +
             "'), the limit (DecodeOptions::max_decompressed_size)");
  };
  if (stated > budget) too_big();
  std::size_t cap =
      std::min({stated, budget, kMaxDeflateRatio * std::max<std::size_t>(input_size, 1)});
  Bytes out(std::max<std::size_t>(cap, 1));
  std::size_t filled = 0;
  for (;;) {
    if (filled == out.size()) {
      if (filled >= budget) {
        char probe;
        const la_ssize_t n = archive_read_data(a, &probe, 1);
        if (n < 0) fail(url, member, "in '" + name + "': " + libarchive_error(a));
        if (n == 0) break;
        too_big();
      }
      Bytes bigger(std::min(budget, filled + std::max<std::size_t>(filled, 64 * 1024)));
      std::memcpy(bigger.data(), out.data(), filled);
      out = std::move(bigger);
    }
    const la_ssize_t n = archive_read_data(a, out.data() + filled, out.size() - filled);
    if (n < 0) fail(url, member, "in '" + name + "': " + libarchive_error(a));
    if (n == 0) break;
    filled += static_cast<std::size_t>(n);
  }
  if (filled > budget) too_big();  // the one byte read into a buffer for nothing
  out.shrink(filled);
  return out;
}

}  // namespace

Dict parse_npz(std::span<const std::byte> data, std::size_t max_size, std::string_view url,
               std::string_view member) {
  ArchivePtr a(archive_read_new(), archive_read_free);
  archive_read_support_format_zip(a.get());
  if (archive_read_open_memory(a.get(), data.data(), data.size()) != ARCHIVE_OK) {
    fail(url, member, "not an .npz file (zip): " + libarchive_error(a.get()));
  }
  Dict out;
  std::size_t budget = max_size;
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      fail(url, member, "not an .npz file (zip): " + libarchive_error(a.get()));
    }
    if (archive_entry_filetype(e) != AE_IFREG) continue;  // directories
    const char* path = archive_entry_pathname(e);
    const std::string name = path ? path : "";
    const std::size_t stated = archive_entry_size_is_set(e) && archive_entry_size(e) >= 0
                                   ? static_cast<std::size_t>(archive_entry_size(e))
                                   : 0;
    Bytes bytes = read_member(a.get(), stated, budget, max_size, data.size(), name, url, member);
    budget -= bytes.size();
    // numpy.load's names: "x.npy" is x, other members keep their names.
    std::string key = name;
    if (key.ends_with(kNpySuffix)) key.resize(key.size() - kNpySuffix.size());
    if (find(out, key)) fail(url, member, "two members named '" + name + "'");
    if (!bytes.str().starts_with(kNpyMagic)) {
      out.push_back(DictItem{std::move(key), Value(std::move(bytes))});
      continue;
    }
    try {
      out.push_back(DictItem{std::move(key), Value(parse_npy(std::move(bytes)))});
    } catch (const Error& err) {
      fail(url, member, "in '" + name + "': " + err.cause());
    }
  }
  return out;
}

Bytes write_npz(const Dict& arrays) {
  std::vector<std::byte> out;
  ArchivePtr a(archive_write_new(), archive_write_free);
  auto write = +[](archive*, void* sink, const void* buffer, size_t length) -> la_ssize_t {
    auto* bytes = static_cast<const std::byte*>(buffer);
    static_cast<std::vector<std::byte>*>(sink)->insert(
        static_cast<std::vector<std::byte>*>(sink)->end(), bytes, bytes + length);
    return static_cast<la_ssize_t>(length);
  };
  auto refuse = [&](const std::string& cause) {
    throw Error::invalid_argument("write_npz: " + cause);
  };
  if (archive_write_set_format_zip(a.get()) != ARCHIVE_OK ||
      archive_write_set_options(a.get(), "zip:compression=store") != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(a.get(), 0) != ARCHIVE_OK ||
      archive_write_open(a.get(), &out, nullptr, write, nullptr) != ARCHIVE_OK) {
    refuse(libarchive_error(a.get()));
  }
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const DictItem& item = arrays[i];
    const Tensor* t = item.value.get_if<Tensor>();
    if (!t) refuse("'" + item.name + "' is " + item.value.describe() + ", not a tensor");
    if (item.name.empty()) refuse("an array without a name");
    // libarchive's zip reader (parse_npz) takes a backslash in a name without '/' for a Windows
    // separator and reads it back as '/': such a name would not come back.
    if (item.name.find('\\') != std::string::npos && item.name.find('/') == std::string::npos) {
      refuse("'" + item.name + "': a name with '\\' and no '/' reads back with '/'");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (arrays[j].name == item.name) refuse("two arrays named '" + item.name + "'");
    }
    const Bytes npy = write_npy(*t);
    std::unique_ptr<archive_entry, void (*)(archive_entry*)> e(archive_entry_new(),
                                                               archive_entry_free);
    archive_entry_set_pathname(e.get(), (item.name + std::string(kNpySuffix)).c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0644);
    // A fixed time (1980-01-02, within zip's range in any time zone): the same arrays always
    // give the same bytes.
    archive_entry_set_mtime(e.get(), 315619200, 0);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(npy.size()));
    if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK ||
        archive_write_data(a.get(), npy.data(), npy.size()) !=
            static_cast<la_ssize_t>(npy.size())) {
      refuse("'" + item.name + "': " + libarchive_error(a.get()));
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) refuse(libarchive_error(a.get()));
  return Bytes::copy_of(std::span<const std::byte>(out));
}

}  // namespace wds
