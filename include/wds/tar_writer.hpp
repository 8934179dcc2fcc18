// wds/tar_writer.hpp: TarWriter, writes tar archives (WebDataset shards) to a ByteSink.
//
//   wds::TarWriter tar(wds::open_sink("out-000000.tar"));
//   tar.write(sample);                        // members "<key>.<ext>", fields in sorted order
//   tar.write_file("extra.txt", bytes);       // any member
//   tar.close();                              // writes the end-of-archive blocks, commits
//
// The default format is ustar, as WebDataset writes (names up to 255 bytes split at a '/');
// pax lifts every limit. Compression is optional. A writer destroyed without close() leaves no
// shard behind (the file sink discards).
//
// Errors: wds::Error naming the sink URL and member (invalid_argument for a bad key or a name the
// format cannot hold, or the sink's I/O error).
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wds/sample.hpp"
#include "wds/sink.hpp"

namespace wds {

class DecodedSample;
struct EncodeOptions;

enum class TarFormat { ustar, pax, gnu };
enum class Compression { none, gzip, bzip2, xz, zstd };

struct TarWriterOptions {
  TarFormat format = TarFormat::ustar;
  Compression compression = Compression::none;
  // Modification time of every member (seconds since 1970); unset = the time of writing. Set it
  // for byte-identical output from identical input.
  std::optional<std::int64_t> mtime;
  int mode = 0444;
};

class TarWriter {
 public:
  explicit TarWriter(std::unique_ptr<ByteSink> sink, TarWriterOptions options = {});
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Writes one member per field, named "<key>.<ext>", fields sorted by extension. The key must be
  // non-empty, relative, free of ".." components, and have no '.' in its last component (it would
  // split differently on reading).
  void write(const Sample& sample);
  // Encodes the values by extension first (wds/encode.hpp: strings, JSON, ints, images, npy).
  void write(const DecodedSample& sample);
  void write(const DecodedSample& sample, const EncodeOptions& options);
  void write_file(std::string_view name, std::span<const std::byte> data);
  void write_file(std::string_view name, std::string_view data) {
    write_file(name, std::as_bytes(std::span(data)));
  }
  void write_directory(std::string_view name);
  void write_symlink(std::string_view name, std::string_view target);
  void write_hardlink(std::string_view name, std::string_view target);
  // Finishes the archive and commits the sink. Further writes are errors.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes samples into numbered shards, starting a new one before a sample would pass either
// limit (WebDataset's ShardWriter: maxcount samples, maxsize payload bytes; a shard always
// takes at least one sample, so one bigger than maxsize gets a shard of its own).
//
//   wds::ShardWriter out("/data/train-%06d.tar", {.max_count = 10000, .max_size = 1 << 30});
//   for (const wds::Sample& s : samples) out.write(s);
//   out.close();  // out.shards(): the files written, in order
//
// The pattern holds one printf-style integer conversion (%d, %06d, ...). Shards are opened with
// open_sink: files are written under a temporary name and renamed on close; s3:// and http(s)://
// shards are uploaded on close.
struct ShardWriterOptions {
  std::uint64_t max_count = 100000;
  std::uint64_t max_size = 3'000'000'000;
  std::uint64_t first_index = 0;
  TarWriterOptions tar;
  SinkOptions sink;  // for s3://, http(s):// and pipe: patterns (wds/sink.hpp)
};

class ShardWriter {
 public:
  explicit ShardWriter(std::string pattern, ShardWriterOptions options = {});
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void write(const Sample& sample);
  // Encodes by extension first (wds/encode.hpp).
  void write(const DecodedSample& sample);
  void write(const DecodedSample& sample, const EncodeOptions& options);
  // Closes the current shard. Further writes are errors.
  void close();
  // The shards written so far (closed ones, and the open one), in order.
  const std::vector<std::string>& shards() const noexcept { return shards_; }

 private:
  void open_next();

  std::string pattern_;
  ShardWriterOptions options_;
  std::unique_ptr<TarWriter> current_;
  std::uint64_t index_;
  std::uint64_t count_ = 0;
  std::uint64_t size_ = 0;
  bool closed_ = false;
  std::vector<std::string> shards_;
};

}  // namespace wds
