// ByteSource and ByteSink: the seam every byte passes through.
#include "wds/source.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"
#include "wds/sink.hpp"

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

TEST(MemorySource, HandsOutChunksOfTheGivenSize) {
  auto src = open_memory("mem", Bytes::copy_of(std::string_view("abcdefg")), 3);
  EXPECT_EQ(src->read().size(), 3u);
  EXPECT_EQ(src->read().size(), 3u);
  EXPECT_EQ(src->read().size(), 1u);
  EXPECT_TRUE(src->read().empty());
}

TEST(RegisterScheme, CustomSchemesServeOpenUrl) {
  register_scheme("Test-Mem", [](const std::string& url, const OpenOptions&) {
    return open_memory(url, Bytes::copy_of(std::string_view("payload")));
  });
  std::unique_ptr<ByteSource> src = open_url("test-mem://anything");
  EXPECT_EQ(src->url(), "test-mem://anything");
  EXPECT_EQ(drain(*src), "payload");
  EXPECT_THROW(register_scheme("x", nullptr), Error);
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

}  // namespace
}  // namespace wds
