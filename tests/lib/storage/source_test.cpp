// ByteSource and ByteSink: the seam every byte passes through.
#include "wds/source.hpp"

#include <gtest/gtest.h>

#include <fnmatch.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "lib/storage/http_source.hpp"
#include "lib/storage/http_transport.hpp"
#include "tests/support/fake_transport.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/backend.hpp"
#include "wds/error.hpp"
#include "wds/remote.hpp"
#include "wds/sink.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"

namespace wds {
namespace {

std::string drain(ByteSource& src) {
  std::string out;
  for (auto chunk = src.read(); !chunk.empty(); chunk = src.read()) {
    out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
  }
  EXPECT_TRUE(src.read().empty());  // stays at the end
  return out;
}

TEST(UrlScheme, ParsesSchemesAndPaths) {
  EXPECT_EQ(url_scheme("/data/a.tar"), "");
  EXPECT_EQ(url_scheme("rel/a.tar"), "");
  EXPECT_EQ(url_scheme("file:///data/a.tar"), "file");
  EXPECT_EQ(url_scheme("HTTP://h/a.tar"), "http");
  EXPECT_EQ(url_scheme("pipe:cat a.tar"), "pipe");
  EXPECT_EQ(url_scheme("s3+x://b/k"), "s3+x");
  EXPECT_EQ(url_scheme("c:/a.tar"), "");   // one letter: not a scheme
  EXPECT_EQ(url_scheme("./a:b.tar"), "");  // not starting with a letter
  EXPECT_EQ(url_scheme("a b:c"), "");      // space is not allowed in a scheme
}

TEST(FileSource, ReadsPlainPathsAndFileUrls) {
  test::TempDir dir;
  std::string content(3 * 4096 + 17, 'q');
  std::string path = dir.write("a b.tar", content);
  OpenOptions small;
  small.buffer_size = 4096;
  for (std::string url : {path, "file://" + path, "file://localhost" + path,
                          "file://" + dir.path().string() + "/a%20b.tar"}) {
    std::unique_ptr<ByteSource> src = open_url(url, small);
    EXPECT_EQ(src->url(), url);
    EXPECT_EQ(src->local_path(), path);
    ASSERT_TRUE(src->size().has_value());
    EXPECT_EQ(*src->size(), content.size());
    EXPECT_EQ(drain(*src), content) << url;
  }
}

TEST(FileSource, StartsAtAnOffset) {
  test::TempDir dir;
  std::string path = dir.write("a.tar", "0123456789");
  OpenOptions at;
  at.offset = 4;
  EXPECT_EQ(drain(*open_url(path, at)), "456789");
}

TEST(FileSource, ReadsABoundedRange) {
  test::TempDir dir;
  std::string path =
      dir.write("a.tar", std::string(5000, 'a') + "0123456789" + std::string(5000, 'b'));
  OpenOptions range;
  range.offset = 5000;
  range.length = 10;
  range.buffer_size = 4096;
  EXPECT_EQ(drain(*open_url(path, range)), "0123456789");
  range.length = 0;
  EXPECT_EQ(drain(*open_url(path, range)), "");
}

TEST(FileSource, ErrorsNameTheUrlAndCategory) {
  test::TempDir dir;
  std::string missing = dir.file("missing.tar");
  try {
    open_url(missing);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_EQ(e.url(), missing);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos);
  }
  try {
    open_url(dir.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find("directory"), std::string::npos);
  }
  try {
    open_url("gopher://h/a.tar");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find("'gopher'"), std::string::npos);
  }
  EXPECT_THROW(open_url(""), Error);
}

TEST(FileSource, UnreadableFileIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every file";
  test::TempDir dir;
  std::string path = dir.write("secret.tar", "x");
  std::filesystem::permissions(path, std::filesystem::perms::none);
  try {
    open_url(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::permission_denied);
  }
}

// Lends the first bytes of every chunk and holds them: each keeps its bytes through the reads
// after it; while `bound` chunks' parts are held, further parts are copies; once the parts are
// freed, the source lends again.
void expect_lending_within(ByteSource& src, const std::string& data, std::size_t bound) {
  struct Part {
    Bytes bytes;
    std::size_t at;
  };
  std::vector<Part> held;
  std::size_t at = 0, lent = 0, chunks = 0;
  bool released = false, lent_after_release = false;
  for (std::span<const std::byte> c = src.read(); !c.empty(); c = src.read()) {
    ++chunks;
    if (!released && chunks == bound + 3) {  // free what was held: the next chunks lend again
      for (const Part& p : held) {
        ASSERT_EQ(p.bytes.str(), data.substr(p.at, p.bytes.size())) << "part at " << p.at;
      }
      held.clear();
      released = true;
    }
    Bytes part = src.lend(c.first(std::min<std::size_t>(c.size(), 100)));
    const bool shared = detail::bytes_shared(part);
    if (shared) EXPECT_EQ(part.data(), c.data()) << "lent without a copy";
    if (!released) {
      lent += shared;
      EXPECT_EQ(shared, chunks <= bound) << "chunk " << chunks;
    } else {
      lent_after_release = lent_after_release || shared;
    }
    held.push_back({std::move(part), at});
    at += c.size();
  }
  ASSERT_GE(chunks, bound + 4) << "too few chunks for the test";
  EXPECT_EQ(at, data.size());
  EXPECT_EQ(lent, bound);
  EXPECT_TRUE(lent_after_release);
  for (const Part& p : held) EXPECT_EQ(p.bytes.str(), data.substr(p.at, p.bytes.size()));
}

TEST(FileSource, LendsPartsOfItsBufferWithinABound) {
  test::TempDir dir;
  std::string varied(100000, '\0');
  for (std::size_t i = 0; i < varied.size(); ++i) varied[i] = static_cast<char>('a' + i * 7 % 26);
  const std::string path = dir.write("lend.bin", varied);
  OpenOptions small;
  small.buffer_size = 4096;
  auto src = open_url(path, small);
  expect_lending_within(*src, varied, 4);
  // The parts outlive their source.
  auto again = open_url(path, small);
  std::span<const std::byte> c = again->read();
  Bytes part = again->lend(c.subspan(10, 20));
  again.reset();
  EXPECT_EQ(part.str(), varied.substr(10, 20));
}

TEST(MemorySource, LendsEveryChunk) {
  const std::string data(5000, 'm');
  auto src = open_memory("mem", Bytes::copy_of(data), 100);
  std::vector<Bytes> held;
  for (std::span<const std::byte> c = src->read(); !c.empty(); c = src->read()) {
    held.push_back(src->lend(c));
    EXPECT_TRUE(detail::bytes_shared(held.back()));
  }
  EXPECT_EQ(held.size(), 50u);
  Bytes outside = src->lend(std::as_bytes(std::span(data)));  // not its bytes: copied
  EXPECT_FALSE(detail::bytes_shared(outside));
}

TEST(MemorySource, HandsOutChunksOfTheGivenSize) {
  auto src = open_memory("mem", Bytes::copy_of(std::string_view("abcdefg")), 3);
  EXPECT_EQ(src->read().size(), 3u);
  EXPECT_EQ(src->read().size(), 3u);
  EXPECT_EQ(src->read().size(), 1u);
  EXPECT_TRUE(src->read().empty());
}

TEST(RegisterBackend, CustomSchemesServeOpenUrl) {
  register_backend({
      .schemes = {"Test-Mem"},
      .open =
          [](const std::string& url, const OpenOptions&) {
            return open_memory(url, Bytes::copy_of(std::string_view("payload")));
          },
  });
  std::unique_ptr<ByteSource> src = open_url("test-mem://anything");
  EXPECT_EQ(src->url(), "test-mem://anything");
  EXPECT_EQ(drain(*src), "payload");
  EXPECT_THROW(register_backend({.schemes = {"x"}}), Error);
}

TEST(FileSink, CommitsOnCloseOnly) {
  test::TempDir dir;
  std::string path = dir.file("out.tar");
  {
    auto sink = open_sink(path);
    sink->write(std::as_bytes(std::span(std::string_view("half"))));
    EXPECT_FALSE(std::filesystem::exists(path));  // nothing under the final name yet
  }                                               // destroyed without close: discarded
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // and no temporary left behind
  auto sink = open_sink("file://" + path);
  sink->write(std::as_bytes(std::span(std::string_view("whole"))));
  sink->close();
  EXPECT_EQ(drain(*open_url(path)), "whole");
}

TEST(FileSink, BadDestinationsAreErrors) {
  test::TempDir dir;
  EXPECT_THROW(open_sink(dir.file("no/such/dir/out.tar")), Error);
  EXPECT_THROW(open_sink("ftp://h/out.tar"), Error);  // http(s) and s3 are upload sinks
}

// ---- a user's backend: objects in memory, reached through its own options slot ---------------

struct MemStore {
  std::mutex mu;
  std::map<std::string, std::string> objects;
};
struct MemOptions {
  std::shared_ptr<MemStore> store;
};

MemStore& store_of(const std::string& url, const BackendOptions& options) {
  const MemOptions* mem = options.get<MemOptions>();
  if (!mem || !mem->store) throw Error::invalid_argument(url, "", "no MemOptions set");
  return *mem->store;
}

class MemSink final : public ByteSink {
 public:
  MemSink(std::string url, MemStore& store) : ByteSink(std::move(url)), store_(store) {}
  void write(std::span<const std::byte> bytes) override {
    data_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  // Committed on close only, as the built-in sinks are.
  void close() override {
    std::lock_guard lock(store_.mu);
    store_.objects[url()] = std::move(data_);
  }

 private:
  MemStore& store_;
  std::string data_;
};

Backend mem_backend() {
  return Backend{
      .schemes = {"mem"},
      .open =
          [](const std::string& url, const OpenOptions& o) {
            MemStore& store = store_of(url, o.backend_options);
            std::lock_guard lock(store.mu);
            auto it = store.objects.find(url);
            if (it == store.objects.end()) throw Error::not_found(url, "", "no object");
            return open_memory(url, Bytes::copy_of(it->second), 1000);
          },
      .list =
          [](const std::string& pattern, const OpenOptions& o) {
            MemStore& store = store_of(pattern, o.backend_options);
            std::string glob = pattern.back() == '/' ? pattern + "*" : pattern;
            std::vector<std::string> out;
            std::lock_guard lock(store.mu);
            for (const auto& [url, data] : store.objects) {
              if (::fnmatch(glob.c_str(), url.c_str(), FNM_PATHNAME) == 0) out.push_back(url);
            }
            if (out.empty()) throw Error::not_found(pattern, "", "no objects match");
            return out;
          },
      .open_sink =
          [](const std::string& url, const SinkOptions& o) {
            return std::make_unique<MemSink>(url, store_of(url, o.backend_options));
          },
  };
}

TEST(RegisterBackend, UserBackendIsWrittenListedAndReadThroughThePublicApi) {
  register_backend(mem_backend());
  auto store = std::make_shared<MemStore>();
  ShardWriterOptions write;
  write.max_count = 2;
  write.sink.backend_options.set(MemOptions{store});
  ShardWriter out("mem://data/train-%06d.tar", write);
  for (int i = 0; i < 5; ++i) {
    out.write(test::make_sample("s" + std::to_string(i), {{"txt", "v" + std::to_string(i)}}));
  }
  out.close();
  ASSERT_EQ(store->objects.size(), 3u);

  OpenOptions open;
  open.backend_options.set(MemOptions{store});
  const std::vector<std::string> urls = {
      "mem://data/train-000000.tar", "mem://data/train-000001.tar", "mem://data/train-000002.tar"};
  EXPECT_EQ(resolve_urls("mem://data/train-*.tar", open), urls);
  EXPECT_EQ(resolve_urls("mem://data/", open), urls);

  TarSamples samples(resolve_urls("mem://data/", open), {.open = open});
  std::vector<std::string> read;
  while (std::optional<Sample> s = samples.next()) read.push_back(test::describe(*s));
  EXPECT_EQ(read, (std::vector<std::string>{"s0:txt=v0", "s1:txt=v1", "s2:txt=v2", "s3:txt=v3",
                                            "s4:txt=v4"}));
  // The options reach the backend through its slot only.
  EXPECT_EQ(test::error_code([&] { open_url(urls[0]); }), ErrorCode::invalid_argument);
}

TEST(RegisterBackend, ReplacingOnlyTheReadingKeepsListingAndSink) {
  Backend b = mem_backend();
  b.schemes = {"mem-read"};
  register_backend(b);
  auto store = std::make_shared<MemStore>();
  SinkOptions sink;
  sink.backend_options.set(MemOptions{store});
  auto out = open_sink("mem-read://a.tar", sink);
  out->write(std::as_bytes(std::span(std::string_view("bytes"))));
  out->close();

  b.open = [](const std::string& url, const OpenOptions&) {
    return open_memory(url, Bytes::copy_of(std::string_view("replaced")));
  };
  register_backend(b);
  OpenOptions open;
  open.backend_options.set(MemOptions{store});
  EXPECT_EQ(drain(*open_url("mem-read://a.tar", open)), "replaced");
  EXPECT_EQ(resolve_urls("mem-read://*", open), std::vector<std::string>{"mem-read://a.tar"});
  EXPECT_NO_THROW(open_sink("mem-read://b.tar", sink));
}

TEST(RegisterBackend, MissingFunctionsAreInvalidArguments) {
  register_backend(
      Backend{.schemes = {"read-only"}, .open = [](const std::string& url, const OpenOptions&) {
                return open_memory(url, Bytes::copy_of(std::string_view("x")));
              }});
  std::string what;
  EXPECT_EQ(test::error_code([] { open_sink("read-only://x.tar"); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("read-only"), std::string::npos) << what;
  EXPECT_EQ(test::error_code([] { resolve_urls("read-only://dir/"); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("s3:"), std::string::npos) << what;  // says which schemes are listed
  EXPECT_EQ(test::error_code([] { register_backend(Backend{}); }), ErrorCode::invalid_argument);
}

// ---- the HTTP client over a scripted transport (no server) ------------------------------------

// Serves `data` with Range support; the first responses are cut after cuts[i] bytes of body.
// ignore_range: answers every request with the whole body (200), as some servers do.
test::FakeTransport::Responder serve(std::string data, std::vector<std::size_t> cuts,
                                     bool ignore_range = false) {
  auto calls = std::make_shared<std::size_t>(0);
  return [data = std::move(data), cuts = std::move(cuts), ignore_range,
          calls](const test::FakeRequest& r) {
    test::FakeResponse out;
    std::size_t from = 0;
    std::optional<std::string> range = r.header("Range");
    if (range && !ignore_range) {
      from = std::stoull(range->substr(range->find('=') + 1));
      out.status = 206;
      out.headers = {{"content-range", "bytes " + std::to_string(from) + "-" +
                                           std::to_string(data.size() - 1) + "/" +
                                           std::to_string(data.size())}};
    } else {
      out.headers = {{"content-length", std::to_string(data.size())}};
    }
    out.body = data.substr(from);
    if (*calls < cuts.size()) out.cut_after = cuts[*calls];
    ++*calls;
    return out;
  };
}

OpenOptions over(std::shared_ptr<test::FakeTransport> fake, int max_retries,
                 std::vector<std::string>* retries = nullptr) {
  OpenOptions open;
  HttpOptions http;
  http.max_retries = max_retries;
  http.initial_backoff = std::chrono::milliseconds(0);
  open.backend_options.set(http);
  open.backend_options.set(http::TransportOption{std::move(fake)});
  if (retries) {
    open.on_retry = [retries](const Error& e, int) { retries->push_back(e.cause()); };
  }
  return open;
}

std::string pattern_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return s;
}

// A body is read by a transfer thread, or on the reader's thread from a host where one GET per
// shard does (lib/storage/http_source.hpp): each test reads both ways (the parameter: on the
// reader's thread), and each way must retry, resume and fail alike.
class HttpBody : public ::testing::TestWithParam<bool> {
 protected:
  // The URL of `path` on the fake host, recorded as one where one GET does if the parameter
  // says so (a host of its own, so that the record touches no other test).
  static std::string url(const std::string& path) {
    const std::string host = GetParam() ? "http://one-get.fake.test" : "http://fake.test";
    if (GetParam()) record_one_get_host(host);
    return host + path;
  }
};
INSTANTIATE_TEST_SUITE_P(ByThreadAndOnTheReader, HttpBody, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OnReader" : "Thread"; });

TEST_P(HttpBody, BrokenTransfersResumeWithARangeFromTheByteWhereTheyStopped) {
  const std::string data = pattern_bytes(20000);
  auto fake = std::make_shared<test::FakeTransport>(serve(data, {1500, 3000}));
  std::vector<std::string> retries;
  auto src = open_url(url("/x.tar"), over(fake, 1, &retries));
  EXPECT_EQ(drain(*src), data);
  std::vector<test::FakeRequest> sent = fake->requests();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_FALSE(sent[0].header("Range"));
  EXPECT_EQ(sent[1].header("Range"), "bytes=1500-");
  EXPECT_EQ(sent[2].header("Range"), "bytes=4500-");
  // Attempts that delivered bytes do not count against max_retries = 1.
  ASSERT_EQ(retries.size(), 2u);
  EXPECT_NE(retries[0].find("from byte 1500"), std::string::npos) << retries[0];
}

TEST_P(HttpBody, AServerThatIgnoresRangeHasTheDeliveredBytesSkipped) {
  const std::string data = pattern_bytes(90000);
  auto fake = std::make_shared<test::FakeTransport>(serve(data, {70000}, /*ignore_range=*/true));
  EXPECT_EQ(drain(*open_url(url("/x.tar"), over(fake, 2))), data);
  EXPECT_EQ(fake->requests().size(), 2u);
}

TEST_P(HttpBody, LendsPartsOfItsChunksWithinABound) {
  const std::string data = pattern_bytes(6'000'000);
  auto fake = std::make_shared<test::FakeTransport>(serve(data, {}));
  auto src = open_url(url("/x.tar"), over(fake, 0));
  expect_lending_within(*src, data, 8);
}

// A write larger than the room left in a chunk (curl's writes reach its buffer's size) goes on
// in the next chunks: every byte once, in order.
TEST_P(HttpBody, WritesLargerThanAChunkArriveWhole) {
  const std::string data = pattern_bytes(3'000'000);
  for (std::size_t piece : {std::size_t{300'000}, std::size_t{700'000}, std::size_t{3'000'000}}) {
    SCOPED_TRACE(piece);
    auto fake = std::make_shared<test::FakeTransport>([&](const test::FakeRequest&) {
      test::FakeResponse out;
      out.headers = {{"content-length", std::to_string(data.size())}};
      out.body = data;
      out.piece_bytes = piece;
      return out;
    });
    EXPECT_EQ(drain(*open_url(url("/x.tar"), over(fake, 0))), data);
  }
}

TEST_P(HttpBody, TransientFailuresAreRetriedUntilTheyRunOut) {
  auto fake = std::make_shared<test::FakeTransport>([](const test::FakeRequest&) {
    return test::FakeResponse{.status = 503, .body = "<html>busy</html>"};
  });
  std::vector<std::string> retries;
  std::string what;
  const std::string u = url("/x.tar");
  EXPECT_EQ(test::error_code([&] { drain(*open_url(u, over(fake, 2, &retries))); }, &what),
            ErrorCode::unavailable);
  EXPECT_EQ(fake->requests().size(), 3u);
  EXPECT_EQ(retries.size(), 2u);
  EXPECT_NE(what.find(u), std::string::npos) << what;
  EXPECT_NE(what.find("HTTP 503"), std::string::npos) << what;
  EXPECT_NE(what.find("gave up after 3 attempts"), std::string::npos) << what;
}

TEST_P(HttpBody, UnreachableServersAreRetriedAndClientErrorsAreNot) {
  auto down = std::make_shared<test::FakeTransport>(
      [](const test::FakeRequest&) { return test::FakeResponse{.unreachable = true}; });
  EXPECT_EQ(test::error_code([&] { drain(*open_url(url("/x.tar"), over(down, 1))); }),
            ErrorCode::unavailable);
  EXPECT_EQ(down->requests().size(), 2u);

  auto missing = std::make_shared<test::FakeTransport>(
      [](const test::FakeRequest&) { return test::FakeResponse{.status = 404, .body = "no"}; });
  EXPECT_EQ(test::error_code([&] { drain(*open_url(url("/x.tar"), over(missing, 5))); }),
            ErrorCode::not_found);
  EXPECT_EQ(missing->requests().size(), 1u);
}

TEST(HttpTransport, UploadsSendTheSpooledBytesWithTheExtraHeadersAndRetry) {
  const std::string data = pattern_bytes(70000);
  auto calls = std::make_shared<int>(0);
  auto fake = std::make_shared<test::FakeTransport>([calls](const test::FakeRequest&) {
    return test::FakeResponse{.status = (*calls)++ == 0 ? 502L : 201L};
  });
  SinkOptions options;
  options.backend_options.set(HttpOptions{.initial_backoff = std::chrono::milliseconds(0),
                                          .headers = {"Authorization: Bearer t"}});
  options.backend_options.set(http::TransportOption{fake});
  auto sink = open_sink("http://fake.test/up/x.tar", options);
  sink->write(std::as_bytes(std::span(data)));
  EXPECT_TRUE(fake->requests().empty());  // nothing is sent before close()
  sink->close();
  std::vector<test::FakeRequest> sent = fake->requests();
  ASSERT_EQ(sent.size(), 2u);
  for (const test::FakeRequest& r : sent) {
    EXPECT_EQ(r.method, "PUT");
    EXPECT_EQ(r.url, "http://fake.test/up/x.tar");
    EXPECT_EQ(r.header("Authorization"), "Bearer t");
    EXPECT_EQ(r.body, data);
  }
}

}  // namespace
}  // namespace wds
