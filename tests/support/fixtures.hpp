// Helpers shared by the test suites: build tar shards in memory or in a temporary directory,
// and read them back.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "wds/error.hpp"
#include "wds/source.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"
#include "wds/tensor.hpp"

namespace wds::test {

// Mean absolute difference of two uint8 tensors of the same shape (for lossy codecs); a failure
// and 1e9 if the shapes differ.
inline double mean_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape() || a.numel() == 0) return 1e9;
  auto x = a.values<std::uint8_t>();
  auto y = b.values<std::uint8_t>();
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sum += std::abs(int(x[i]) - int(y[i]));
  return sum / static_cast<double>(x.size());
}

// An environment variable's value; "" when it is not set.
inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The bytes of a tar archive written by `fill`.
inline std::string make_tar(const std::function<void(TarWriter&)>& fill,
                            TarWriterOptions options = {}) {
  std::string out;
  if (!options.mtime) options.mtime = 1700000000;
  TarWriter writer(open_memory_sink("memory:", out), options);
  fill(writer);
  writer.close();
  return out;
}

// A sample with string fields, e.g. make_sample("a", {{"jpg", "..."}, {"cls", "1"}}).
inline Sample make_sample(const std::string& key,
                          const std::vector<std::pair<std::string, std::string>>& fields) {
  Sample s(key, nullptr);
  for (const auto& [ext, data] : fields) s.add(ext, Bytes::copy_of(data));
  return s;
}

inline std::unique_ptr<ByteSource> memory_source(const std::string& bytes,
                                                 const std::string& url = "mem.tar",
                                                 std::size_t chunk = 1 << 20) {
  return open_memory(url, Bytes::copy_of(bytes), chunk);
}

// All samples of one in-memory shard (errors propagate).
inline std::vector<Sample> read_samples(const std::string& bytes,
                                        const std::string& url = "mem.tar",
                                        std::size_t chunk = 1 << 20,
                                        ErrorHandler handler = reraise_exception) {
  ShardSamples shard(memory_source(bytes, url, chunk), std::move(handler));
  std::vector<Sample> out;
  while (std::optional<Sample> s = shard.next()) out.push_back(std::move(*s));
  return out;
}

// "key:ext=data,ext=data" per sample, for compact assertions.
inline std::string describe(const Sample& s) {
  std::string out = s.key() + ":";
  for (std::size_t i = 0; i < s.fields().size(); ++i) {
    out += (i ? "," : "") + s.fields()[i].ext + "=" + std::string(s.fields()[i].data.str());
  }
  return out;
}

inline std::vector<std::string> describe(const std::vector<Sample>& samples) {
  std::vector<std::string> out;
  for (const Sample& s : samples) out.push_back(describe(s));
  return out;
}

// Every byte `src` gives to a late reader, which sleeps 10 ms before every 4th read(): a remote
// source's socket, and curl's reads, fill meanwhile. `reads`: how many read()s gave bytes.
inline std::string read_late(ByteSource& src, std::size_t* reads = nullptr) {
  std::string out;
  std::size_t n = 0;
  for (auto c = src.read(); !c.empty(); c = src.read()) {
    if (n++ % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    out.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  if (reads) *reads = n;
  return out;
}

// Every byte open_url(url, open) gives (errors propagate).
inline std::string read_url(const std::string& url, const OpenOptions& open = {}) {
  std::unique_ptr<ByteSource> src = open_url(url, open);
  std::string out;
  for (auto c = src->read(); !c.empty(); c = src->read()) {
    out.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  return out;
}

// The whole content of a file ("" if it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The category of the wds::Error that f() throws (and its what() in *what); a test failure if
// it throws none.
template <class F>
ErrorCode error_code(F&& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no wds::Error thrown";
  return ErrorCode::unavailable;
}

// A shell command's exit status (-1 if it did not exit) and its standard output.
struct ProcessResult {
  int status = -1;
  std::string output;
};
inline ProcessResult run_command(const std::string& command) {
  ProcessResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[65536];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "wds-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::string p = file(name);
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace wds::test
