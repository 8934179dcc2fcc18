// A URL scheme that counts the bytes read through it, for tests that check what a restore reads
// again: "SCHEME:" + a URL reads that URL and adds every chunk's size to a counter.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "wds/backend.hpp"
#include "wds/source.hpp"

namespace wds::test {

class CountingSource final : public ByteSource {
 public:
  CountingSource(std::string url, std::unique_ptr<ByteSource> inner,
                 std::atomic<std::uint64_t>& bytes)
      : ByteSource(std::move(url)), inner_(std::move(inner)), bytes_(bytes) {}
  std::span<const std::byte> read() override {
    std::span<const std::byte> chunk = inner_->read();
    bytes_ += chunk.size();
    return chunk;
  }
  std::optional<std::uint64_t> size() const override { return inner_->size(); }

 private:
  std::unique_ptr<ByteSource> inner_;
  std::atomic<std::uint64_t>& bytes_;
};

// Registers `scheme`: "scheme:URL" reads URL, counting into `bytes` (which must outlive the
// reads).
inline void register_counting_scheme(const std::string& scheme, std::atomic<std::uint64_t>& bytes) {
  register_backend({
      .schemes = {scheme},
      .open =
          [scheme, &bytes](const std::string& url, const OpenOptions& options) {
            return std::make_unique<CountingSource>(
                url, open_url(url.substr(scheme.size() + 1), options), bytes);
          },
  });
}

}  // namespace wds::test
