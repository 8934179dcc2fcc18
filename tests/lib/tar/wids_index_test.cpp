// Tests of wds/wids_index.hpp: wids shard indexes built from shards (counts as TarSamples
// yields, sizes, MD5 as OpenSSL computes it), written and read back, urls resolved against the
// index (local and through a backend), and malformed indexes refused.
#include "wds/wids_index.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <map>
#include <mutex>

#include "tests/support/fixtures.hpp"
#include "wds/backend.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using test::error_code;
using test::make_sample;
using test::make_tar;
using test::read_file;
using test::TempDir;

std::string openssl_md5(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXPECT_EQ(EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_md5(), nullptr), 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 0xF];
  }
  return out;
}

std::uint64_t streamed_count(const std::string& url) {
  ShardSamples shard(open_url(url));
  std::uint64_t n = 0;
  while (shard.next()) ++n;
  return n;
}

// A shard of `n` samples plus what TarSamples skips or splits on: a directory, metadata, and a
// key that comes back after another (a new sample, as WebDataset groups).
std::string shard_bytes(int n, const std::string& prefix) {
  return make_tar([&](TarWriter& w) {
    w.write_directory("dir");
    w.write_file("__meta__", "skipped");
    for (int i = 0; i < n; ++i) {
      std::string k = prefix + std::to_string(i);
      w.write(make_sample(k, {{"cls", std::to_string(i)}, {"txt", std::string(i * 300, 'x')}}));
    }
    if (n > 0) w.write_file(prefix + "0.json", "{}");  // key 0 again, after others
  });
}

// A scheme serving objects from memory, standing in for HTTP/S3.
std::mutex g_mu;
std::map<std::string, std::string> g_objects;

void register_memory_scheme() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend({
        .schemes = {"widsmem"},
        .open =
            [](const std::string& url, const OpenOptions&) {
              std::lock_guard<std::mutex> lock(g_mu);
              auto it = g_objects.find(url);
              if (it == g_objects.end()) throw Error::not_found(url, "", "no such object");
              return open_memory(url, Bytes::copy_of(it->second), 7);
            },
    });
  });
}

void put_object(const std::string& url, const std::string& bytes) {
  register_memory_scheme();
  std::lock_guard<std::mutex> lock(g_mu);
  g_objects[url] = bytes;
}

TEST(WidsIndexTest, EntryCountsWhatTarSamplesYieldsAndHashesTheWholeFile) {
  TempDir dir;
  for (int n : {0, 1, 5}) {
    const std::string url = dir.write("s" + std::to_string(n) + ".tar", shard_bytes(n, "k"));
    const WidsShard e = build_wids_entry(url);
    EXPECT_EQ(e.url, url);
    EXPECT_EQ(e.nsamples, streamed_count(url)) << n;
    // Key 0 again after others is a new sample; right after itself (n = 1) it is the same one.
    EXPECT_EQ(e.nsamples, std::vector<std::uint64_t>({0, 1, 6})[n == 0 ? 0 : n == 1 ? 1 : 2]);
    const std::string bytes = read_file(url);
    EXPECT_EQ(e.filesize, bytes.size());
    EXPECT_EQ(e.md5sum, openssl_md5(bytes));
  }
}

// Bytes after the end-of-archive blocks (zero padding to a record size, as GNU tar writes)
// belong to the file: wids' md5sum is of the file, not of what the reader consumed.
TEST(WidsIndexTest, Md5CoversPaddingAfterTheArchive) {
  TempDir dir;
  const std::string bytes = shard_bytes(3, "p") + std::string(10240, '\0');
  const std::string url = dir.write("padded.tar", bytes);
  const WidsShard e = build_wids_entry(url);
  EXPECT_EQ(e.nsamples, 4u);
  EXPECT_EQ(e.filesize, bytes.size());
  EXPECT_EQ(e.md5sum, openssl_md5(bytes));
}

TEST(WidsIndexTest, CompressedShardsAreCountedAndHashedAsStored) {
  TempDir dir;
  const std::string url = dir.write("z.tar.gz", make_tar(
                                                    [](TarWriter& w) {
                                                      w.write(make_sample("a", {{"txt", "1"}}));
                                                      w.write(make_sample("b", {{"txt", "2"}}));
                                                    },
                                                    {.compression = Compression::gzip}));
  const WidsShard e = build_wids_entry(url);
  EXPECT_EQ(e.nsamples, 2u);
  EXPECT_EQ(e.md5sum, openssl_md5(read_file(url)));
}

TEST(WidsIndexTest, DamagedShardIsCorruptDataNamingIt) {
  TempDir dir;
  std::string bytes = shard_bytes(3, "d");
  const std::string url = dir.write("cut.tar", bytes.substr(0, 1500));
  std::string what;
  EXPECT_EQ(error_code([&] { build_wids_entry(url); }, &what), ErrorCode::corrupt_data);
  EXPECT_NE(what.find("cut.tar"), std::string::npos) << what;
}

TEST(WidsIndexTest, RoundTripWithUrlsRelativeToTheIndex) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "a");
  TempDir other;
  WidsIndex index;
  index.name = "train";
  const std::vector<std::string> urls = {dir.write("x.tar", shard_bytes(2, "x")),
                                         dir.write("a/y.tar", shard_bytes(4, "y")),
                                         other.write("z.tar", shard_bytes(1, "z"))};
  for (const std::string& url : urls) index.shards.push_back(build_wids_entry(url));
  const std::string where = dir.file("index.json");
  const std::string text = format_wids_index(index, where);
  dir.write("index.json", text);

  const nlohmann::json doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["__kind__"], "wids-shard-index-v1");
  EXPECT_EQ(doc["wids_version"], 1);
  EXPECT_EQ(doc["name"], "train");
  EXPECT_EQ(doc["shardlist"][0]["url"], "x.tar");
  EXPECT_EQ(doc["shardlist"][1]["url"], "a/y.tar");
  // Outside the index's directory: absolute, so that it resolves to the same file.
  EXPECT_EQ(doc["shardlist"][2]["url"], urls[2]);

  const WidsIndex back = read_wids_index(where);
  EXPECT_EQ(back.name, "train");
  EXPECT_EQ(back.url, where);
  ASSERT_EQ(back.shards.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.shards[i].url, urls[i]);
    EXPECT_EQ(back.shards[i].nsamples, streamed_count(urls[i]));
    EXPECT_EQ(back.shards[i].filesize, read_file(urls[i]).size());
    EXPECT_EQ(back.shards[i].md5sum, openssl_md5(read_file(urls[i])));
  }
  EXPECT_EQ(back.urls(), urls);
  EXPECT_EQ(back.nsamples(), (std::vector<std::uint64_t>{3, 5, 1}));
  EXPECT_EQ(back.total_samples(), 9u);
}

TEST(WidsIndexTest, RelativeUrlsResolveAgainstTheIndexDirectoryOrBase) {
  const std::string text = R"({"wids_version": 1, "shardlist": [
      {"url": "x.tar", "nsamples": 1}, {"url": "./a/y.tar", "nsamples": 2},
      {"url": "../up/z.tar", "nsamples": 3}, {"url": "/abs/w.tar", "nsamples": 4},
      {"url": "http://h/v.tar", "nsamples": 5}]})";
  EXPECT_EQ(parse_wids_index(text, "/d/e/index.json").urls(),
            (std::vector<std::string>{"/d/e/x.tar", "/d/e/a/y.tar", "/d/up/z.tar", "/abs/w.tar",
                                      "http://h/v.tar"}));
  EXPECT_EQ(parse_wids_index(text, "rel/index.json").urls()[0], "rel/x.tar");
  EXPECT_EQ(parse_wids_index(text, "index.json").urls()[0], "x.tar");
  EXPECT_EQ(parse_wids_index(text, "s3://b/d/index.json").urls(),
            (std::vector<std::string>{"s3://b/d/x.tar", "s3://b/d/a/y.tar", "s3://b/up/z.tar",
                                      "/abs/w.tar", "http://h/v.tar"}));
  // "base" (itself relative to the index) takes the place of the index's directory.
  const std::string based =
      R"({"wids_version": 1, "base": "shards", "shardlist": [{"url": "x.tar", "nsamples": 1}]})";
  EXPECT_EQ(parse_wids_index(based, "/d/index.json").urls()[0], "/d/shards/x.tar");
  const std::string absolute_base = R"({"wids_version": 1, "base": "https://cdn/set/",
      "shardlist": [{"url": "x.tar", "nsamples": 1}]})";
  EXPECT_EQ(parse_wids_index(absolute_base, "/d/index.json").urls()[0], "https://cdn/set/x.tar");
  EXPECT_EQ(resolve_wids_url("a/../b.tar", "file:///d/i.json"), "file:///d/b.tar");
}

TEST(WidsIndexTest, OptionalFieldsAreTolerated) {
  const WidsIndex index = parse_wids_index(
      R"({"wids_version": 1, "info": "x", "keep": true,
          "shardlist": [{"url": "a.tar", "nsamples": 0, "weight": 2, "md5sum": null}]})",
      "/d/i.json");
  ASSERT_EQ(index.shards.size(), 1u);
  EXPECT_EQ(index.shards[0].nsamples, 0u);
  EXPECT_FALSE(index.shards[0].filesize);
  EXPECT_EQ(index.shards[0].md5sum, "");
}

TEST(WidsIndexTest, RemoteIndexIsReadThroughItsBackendAndResolvedThere) {
  const std::string shard = shard_bytes(3, "r");
  put_object("widsmem://bucket/set/s-0.tar", shard);
  WidsIndex index{
      .name = "remote", .url = "", .shards = {build_wids_entry("widsmem://bucket/set/s-0.tar")}};
  EXPECT_EQ(index.shards[0].nsamples, 4u);
  EXPECT_EQ(index.shards[0].md5sum, openssl_md5(shard));
  const std::string text = format_wids_index(index, "widsmem://bucket/set/index.json");
  EXPECT_EQ(nlohmann::json::parse(text)["shardlist"][0]["url"], "s-0.tar");
  put_object("widsmem://bucket/set/index.json", text);
  const WidsIndex back = read_wids_index("widsmem://bucket/set/index.json");
  EXPECT_EQ(back.urls(), std::vector<std::string>{"widsmem://bucket/set/s-0.tar"});
  EXPECT_EQ(back.nsamples(), std::vector<std::uint64_t>{4});
  EXPECT_EQ(error_code([] { read_wids_index("widsmem://bucket/none.json"); }),
            ErrorCode::not_found);
}

TEST(WidsIndexTest, DatasetsEmbeddedAndBySourceUrl) {
  put_object("widsmem://b/other/sub.json", R"({"shardlist": [{"url": "p.tar", "nsamples": 7}]})");
  put_object("widsmem://b/other/double.json", R"({"source_url": "x.json", "shardlist": []})");
  const WidsIndex index = parse_wids_index(
      R"({"wids_version": 1, "shardlist": [{"url": "top.tar", "nsamples": 1}],
          "datasets": [{"base": "part", "shardlist": [{"url": "q.tar", "nsamples": 2}]},
                       {"source_url": "widsmem://b/other/sub.json"}]})",
      "/d/i.json", [](const std::string& url) { return test::read_url(url); });
  EXPECT_EQ(index.urls(),
            (std::vector<std::string>{"/d/top.tar", "/d/part/q.tar", "widsmem://b/other/p.tar"}));
  EXPECT_EQ(index.total_samples(), 10u);
  std::string what;
  EXPECT_EQ(error_code(
                [] {
                  parse_wids_index(R"({"wids_version": 1, "datasets": [{"source_url":
                                       "widsmem://b/other/double.json"}]})",
                                   "/d/i.json",
                                   [](const std::string& url) { return test::read_url(url); });
                },
                &what),
            ErrorCode::corrupt_data);
  EXPECT_NE(what.find("double.json"), std::string::npos) << what;
  EXPECT_EQ(error_code([] {
              parse_wids_index(R"({"wids_version": 1, "datasets": [{"source_url": "s.json"}]})",
                               "/d/i.json");
            }),
            ErrorCode::invalid_argument);
}

// Every malformed index is corrupt_data naming the index and what is wrong.
void expect_malformed(const std::string& text, const std::string& cause) {
  std::string what;
  EXPECT_EQ(error_code([&] { parse_wids_index(text, "/data/bad-index.json"); }, &what),
            ErrorCode::corrupt_data)
      << text;
  EXPECT_NE(what.find("/data/bad-index.json"), std::string::npos) << what;
  EXPECT_NE(what.find(cause), std::string::npos) << "expected '" << cause << "' in: " << what;
}

constexpr const char* kGoodEntry = R"({"url": "a.tar", "nsamples": 3})";

std::string with_entry(const std::string& entry) {
  return R"({"wids_version": 1, "shardlist": [)" + entry + "]}";
}

TEST(WidsIndexMalformed, NotJson) {
  expect_malformed("{\"wids_version\": 1, ", "not JSON");
  expect_malformed("", "not JSON");
  expect_malformed("v1.2 3\n", "not JSON");
}

TEST(WidsIndexMalformed, NotAnObject) {
  expect_malformed("[1, 2]", "not a JSON object");
}

TEST(WidsIndexMalformed, WrongKind) {
  expect_malformed(R"({"__kind__": "wids-shard-index-v2", "wids_version": 1, "shardlist": [)" +
                       std::string(kGoodEntry) + "]}",
                   "\"__kind__\" is \"wids-shard-index-v2\"");
}

TEST(WidsIndexMalformed, WrongOrMissingVersion) {
  expect_malformed(R"({"wids_version": 2, "shardlist": []})", "only version 1");
  expect_malformed(R"({"wids_version": "1", "shardlist": []})", "only version 1");
  expect_malformed(R"({"shardlist": [{"url": "a.tar", "nsamples": 3}]})", "no \"wids_version\"");
}

TEST(WidsIndexMalformed, NegativeOrNonIntegerNsamples) {
  expect_malformed(with_entry(R"({"url": "a.tar", "nsamples": -1})"),
                   "shardlist[0]: \"nsamples\" -1 is not a non-negative integer");
  expect_malformed(with_entry(R"({"url": "a.tar", "nsamples": 2.5})"), "not a non-negative");
  expect_malformed(with_entry(R"({"url": "a.tar", "nsamples": "3"})"), "not a non-negative");
  expect_malformed(with_entry(R"({"url": "a.tar", "nsamples": 1e30})"), "not a non-negative");
  expect_malformed(with_entry(std::string(kGoodEntry) + R"(, {"url": "b.tar"})"),
                   "shardlist[1] has no \"nsamples\"");
}

TEST(WidsIndexMalformed, MissingOrEmptyUrl) {
  expect_malformed(with_entry(R"({"nsamples": 3})"), "shardlist[0] has no \"url\"");
  expect_malformed(with_entry(R"({"url": "", "nsamples": 3})"), "not a non-empty string");
  expect_malformed(with_entry(R"({"url": 5, "nsamples": 3})"), "not a non-empty string");
  expect_malformed(with_entry("\"a.tar\""), "shardlist[0] is not an object");
}

TEST(WidsIndexMalformed, NoShards) {
  expect_malformed(R"({"wids_version": 1})", "no shards");
  expect_malformed(R"({"wids_version": 1, "shardlist": []})", "no shards");
  expect_malformed(R"({"wids_version": 1, "shardlist": {}})", "shardlist is not an array");
}

TEST(WidsIndexMalformed, BadOptionalField) {
  expect_malformed(with_entry(R"({"url": "a.tar", "nsamples": 1, "filesize": -3})"),
                   "\"filesize\" -3 is not a non-negative integer");
  expect_malformed(with_entry(R"({"url": "a.tar", "nsamples": 1, "md5sum": 12})"),
                   "\"md5sum\" is not a string");
}

// "s-5:x.tar" relative to the index would read back as a URL of scheme "s-5": it is written as
// "./s-5:x.tar" (found by fuzz_index), for a local index and a remote one.
TEST(WidsIndexTest, ARelativeUrlThatReadsAsASchemeIsWrittenAsAPath) {
  for (const std::string dir : {"/data/", "http://h/data/"}) {
    SCOPED_TRACE(dir);
    WidsIndex index;
    for (const char* name : {"s-5:x.tar", "ab:c/y.tar", "plain.tar"}) {
      index.shards.push_back(WidsShard{dir + name, 2, std::nullopt, ""});
    }
    const std::string where = dir + "index.json";
    const std::string text = format_wids_index(index, where);
    const nlohmann::json doc = nlohmann::json::parse(text);
    EXPECT_EQ(doc["shardlist"][0]["url"], "./s-5:x.tar");
    EXPECT_EQ(doc["shardlist"][1]["url"], "./ab:c/y.tar");
    EXPECT_EQ(doc["shardlist"][2]["url"], "plain.tar");
    EXPECT_EQ(parse_wids_index(text, where).urls(), index.urls());
  }
}

TEST(WidsIndexTest, FormatRefusesAnEntryWithoutUrl) {
  WidsIndex index;
  index.shards.push_back(WidsShard{});
  EXPECT_EQ(error_code([&] { format_wids_index(index); }), ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace wds
