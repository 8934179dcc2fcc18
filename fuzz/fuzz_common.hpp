// Shared pieces of the fuzz targets: a ByteSource over the fuzzer's bytes, and the check that
// every failure is a wds::Error.
//
// A target catches wds::Error only: any other exception (std::bad_alloc, std::out_of_range, ...)
// escapes LLVMFuzzerTestOneInput, terminates the process and is reported as a crash, which is
// how "errors are always wds::Error" is checked. Crashes, ASan and UBSan reports, leaks and
// libFuzzer's -malloc_limit_mb (a single allocation beyond it) are the other failures.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "wds/bytes.hpp"
#include "wds/error.hpp"
#include "wds/source.hpp"

namespace wds_fuzz {

// Fails the run with a message: an invariant the target asserts does not hold.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
  std::abort();
}

inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

inline std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The fuzzer's bytes as a shard: handed out in chunks of `chunk` bytes (so that headers and data
// straddle reads), with the total size known up front or not (a pipe or a chunked HTTP body),
// which changes how the reader may check declared member sizes. It lends parts of its bytes, as
// the file and HTTP sources do (ByteSource::lend).
class ChunkSource final : public wds::ByteSource {
 public:
  ChunkSource(std::string url, std::span<const std::byte> data, std::size_t chunk, bool sized)
      : wds::ByteSource(std::move(url)),
        data_(wds::Bytes::copy_of(data)),
        chunk_(std::max<std::size_t>(chunk, 1)),
        sized_(sized) {}

  std::span<const std::byte> read() override {
    std::size_t n = std::min(chunk_, data_.size() - pos_);
    std::span<const std::byte> out = data_.span().subspan(pos_, n);
    pos_ += n;
    return out;
  }
  wds::Bytes lend(std::span<const std::byte> part) override {
    return wds::detail::lend_bytes(data_, part);
  }
  std::optional<std::uint64_t> size() const override {
    if (sized_) return data_.size();
    return std::nullopt;
  }

 private:
  wds::Bytes data_;
  std::size_t chunk_;
  bool sized_;
  std::size_t pos_ = 0;
};

// Chunk size and sizedness from one control byte: bit 7 picks 512 B, 4 KiB, 700 B or 1 MiB
// chunks (bits 0-1), else 1..64 bytes (bits 0-5); bit 6 says whether the size is known. 700 is
// no multiple of a tar block: headers straddle chunks.
inline std::unique_ptr<wds::ByteSource> source_from(std::string url, std::uint8_t control,
                                                    std::span<const std::byte> data) {
  static constexpr std::size_t big[] = {512, 4096, 700, 1 << 20};
  std::size_t chunk = (control & 0x80) ? big[control & 3] : std::size_t{control & 0x3fu} + 1;
  bool sized = (control & 0x40) != 0;
  return std::make_unique<ChunkSource>(std::move(url), data, chunk, sized);
}

}  // namespace wds_fuzz
