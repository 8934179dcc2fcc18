// The in-memory sink, and the choice of a sink by URL (through the backend table).
#include "wds/sink.hpp"

#include "lib/storage/backends.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

class MemorySink final : public ByteSink {
 public:
  MemorySink(std::string url, std::string& out) : ByteSink(std::move(url)), out_(out) {}
  void write(std::span<const std::byte> bytes) override {
    out_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  void close() override {}

 private:
  std::string& out_;
};

}  // namespace

std::unique_ptr<ByteSink> open_sink(const std::string& url) {
  return open_sink(url, SinkOptions{});
}

std::unique_ptr<ByteSink> open_sink(const std::string& url, const SinkOptions& options) {
  std::string scheme = url == "-" ? "" : url_scheme(url);
  std::shared_ptr<const Backend> backend = find_backend(scheme);
  if (!backend || !backend->open_sink) {
    throw Error::invalid_argument(
        url, "",
        "no sink for URL scheme '" + scheme +
            "' (written are: " + schemes_that([](const Backend& b) { return bool(b.open_sink); }) +
            ", and - for standard output)");
  }
  return backend->open_sink(url, options);
}

std::unique_ptr<ByteSink> open_memory_sink(std::string url, std::string& out) {
  return std::make_unique<MemorySink>(std::move(url), out);
}

}  // namespace wds
