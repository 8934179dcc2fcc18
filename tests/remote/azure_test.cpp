// az:// against Azurite (the Azure Storage emulator, started by scripts/test-servers.sh; it
// checks Shared Key signatures and SAS tokens): shards written with ShardWriter and TarWriter,
// listed page by page, read back through WebDataset, a multi-block upload, refused keys,
// missing blobs and containers, SAS tokens and public containers. Skipped without Azurite.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "lib/storage/azure.hpp"
#include "lib/storage/http_source.hpp"
#include "tests/support/env.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/remote.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"
#include "wds/tar_writer.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;
using test::env;

constexpr std::array<const char*, 4> kAzureVariables = {
    "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN"};

// One sample as text with all its bytes, for exact comparisons.
std::string dump(const Sample& s) {
  std::string out = s.key();
  for (const Field& f : s.fields()) {
    out += "|" + f.ext + "=" + std::to_string(f.data.size()) + ":" + std::string(f.data.str());
  }
  return out;
}

// Every sample of the shards, in order, through the whole reading pipeline.
Strings read_back(const Strings& urls, const OpenOptions& open = {}) {
  WebDatasetOptions o;
  o.distributed.rank = 0;
  o.distributed.world_size = 1;
  o.open = open;
  Strings out;
  for (Sample& s : WebDataset(urls, o)) out.push_back(dump(s));
  return out;
}

std::string read_all(const std::string& url, const OpenOptions& open) {
  auto src = open_url(url, open);
  std::string got;
  for (auto c = src->read(); !c.empty(); c = src->read()) {
    got.append(reinterpret_cast<const char*>(c.data()), c.size());
  }
  return got;
}

std::vector<Sample> make_samples(std::size_t count, std::size_t size, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Sample> out;
  for (std::size_t i = 0; i < count; ++i) {
    std::string payload(size / 2 + rng() % size, '\0');
    for (char& c : payload) c = static_cast<char>(rng());
    out.push_back(test::make_sample("s" + std::to_string(1000 + i),
                                    {{"bin", payload}, {"cls", std::to_string(i % 10)}}));
  }
  return out;
}

const TarWriterOptions kTar{.mtime = 1700000000};

class Azure : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint_ = env("WDS_TEST_AZURE_ENDPOINT");
    data_ = env("WDS_TEST_DATA");
    if (endpoint_.empty() || data_.empty()) {
      GTEST_SKIP() << "no Azure test server (Azurite; run scripts/test.sh)";
    }
    container_ = env("WDS_TEST_AZURE_CONTAINER");
    azure_ = AzureOptions{.account = env("WDS_TEST_AZURE_ACCOUNT"),
                          .key = env("WDS_TEST_AZURE_KEY"),
                          .endpoint = endpoint_};
    for (const auto& e : std::filesystem::directory_iterator(data_)) {
      if (e.path().extension() == ".tar") shards_.push_back(e.path().filename().string());
    }
    std::sort(shards_.begin(), shards_.end());
    ASSERT_GE(shards_.size(), 2u);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    prefix_ = "uploads/" + std::string(info->name()) + "-" + std::to_string(::getpid()) + "/";
  }
  std::string az(const std::string& blob) const { return "az://" + container_ + "/" + blob; }
  std::string upload(const std::string& name) const { return az(prefix_ + name); }
  // Two quick retries, for reads and uploads alike.
  static HttpOptions quick_retries() {
    return HttpOptions{.max_retries = 2, .initial_backoff = std::chrono::milliseconds(10)};
  }
  OpenOptions open(AzureOptions azure) const {
    OpenOptions o;
    o.backend_options.set(quick_retries());
    o.backend_options.set(std::move(azure));
    return o;
  }
  OpenOptions open() const { return open(azure_); }
  SinkOptions sink(AzureOptions azure) const {
    SinkOptions o;
    o.backend_options.set(quick_retries());
    o.backend_options.set(std::move(azure));
    return o;
  }
  SinkOptions sink() const { return sink(azure_); }
  Strings local_samples(const Strings& names) const {
    Strings paths;
    for (const std::string& n : names) paths.push_back(data_ + "/" + n);
    return read_back(paths);
  }

  test::ClearedEnv cleared_{kAzureVariables};  // the machine's own Azure settings stay out
  std::string endpoint_, data_, container_, prefix_;
  AzureOptions azure_;
  Strings shards_;
};

TEST_F(Azure, SharedKeyReadsGiveTheSameSamplesAsTheLocalFiles) {
  Strings urls;
  for (const std::string& name : shards_) urls.push_back(az("shards/" + name));
  EXPECT_EQ(read_back(urls, open()), local_samples(shards_));
}

TEST_F(Azure, ARangeReadStartsAtTheOffset) {
  const std::string whole = test::read_file(data_ + "/" + shards_[0]);
  OpenOptions o = open();
  o.offset = 1000;
  o.length = 2345;
  EXPECT_TRUE(read_all(az("shards/" + shards_[0]), o) == whole.substr(1000, 2345));
}

TEST_F(Azure, ListingFollowsNextMarkerAcrossPagesAndGlobs) {
  AzureOptions one_per_page = azure_;
  one_per_page.max_results = 1;  // a page per blob: every page after the first needs a marker
  Strings expected;
  for (const std::string& name : shards_) expected.push_back(az("shards/" + name));
  EXPECT_EQ(resolve_urls(az("shards/"), open(one_per_page)), expected);
  EXPECT_EQ(resolve_urls(az("shards/*.tar"), open(one_per_page)), expected);
  EXPECT_EQ(resolve_urls(az("shards/" + shards_[1].substr(0, 5) + "*-000001.tar"), open()),
            Strings{az("shards/" + shards_[1])});
  EXPECT_EQ(test::error_code([&] { resolve_urls(az("shards/nothing-*.tar"), open()); }),
            ErrorCode::not_found);
}

TEST_F(Azure, ShardWriterShardsListAndReadBackAsTheLocalOnes) {
  const std::vector<Sample> samples = make_samples(10, 5000, 21);
  test::TempDir local;
  for (const std::string& pattern : {upload("train-%06d.tar"), local.file("train-%06d.tar")}) {
    ShardWriter out(pattern, {.max_count = 3, .tar = kTar, .sink = sink()});
    for (const Sample& s : samples) out.write(s);
    out.close();
  }
  AzureOptions two_per_page = azure_;
  two_per_page.max_results = 2;
  const Strings listed = resolve_urls(upload("train-*.tar"), open(two_per_page));
  const Strings expected = {upload("train-000000.tar"), upload("train-000001.tar"),
                            upload("train-000002.tar"), upload("train-000003.tar")};
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(read_back(listed, open()), read_back(resolve_urls(local.file("train-*.tar"))));
}

// Put Block + Put Block List: Azure's own block list shows the committed blocks.
TEST_F(Azure, ALargeShardGoesUpInSeveralBlocks) {
  AzureOptions blocks = azure_;
  blocks.single_put_limit = 1 << 20;
  blocks.block_size = 1 << 20;
  const std::vector<Sample> samples = make_samples(8, 600 << 10, 22);  // ~3.5 MiB
  std::string bytes;
  {
    TarWriter tar(open_memory_sink("memory:", bytes), kTar);
    for (const Sample& s : samples) tar.write(s);
    tar.close();
  }
  ASSERT_GT(bytes.size(), 3u << 20);
  {
    TarWriter tar(open_sink(upload("big.tar"), sink(blocks)), kTar);
    for (const Sample& s : samples) tar.write(s);
    tar.close();
  }
  EXPECT_TRUE(read_all(upload("big.tar"), open()) == bytes);
  const azure::Account account = azure::resolve_account(azure_);
  const std::string list_url =
      azure::resource_url(account, {container_, prefix_ + "big.tar"},
                          {{"comp", "blocklist"}, {"blocklisttype", "committed"}});
  const std::string xml = http_get_body(
      "blocklist", [&] { return http::Request{.url = list_url}; }, HttpOptions{}, nullptr, nullptr,
      azure::signing_transport(http::curl_transport(), account));
  std::size_t count = 0;
  for (std::size_t at = xml.find("<Block>"); at != std::string::npos;
       at = xml.find("<Block>", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, (bytes.size() + (1 << 20) - 1) >> 20) << xml;
}

TEST_F(Azure, AWrongKeyIsPermissionDeniedNamingTheUrlAndNeverTheKey) {
  AzureOptions wrong = azure_;
  wrong.key =
      azure::base64_encode("not the account's key, 64 bytes long.............................");
  const std::string url = az("shards/" + shards_[0]);
  for (const auto& attempt : std::vector<std::function<void()>>{
           [&] { read_all(url, open(wrong)); }, [&] { resolve_urls(az("shards/"), open(wrong)); },
           [&] {
             auto s = open_sink(upload("denied.tar"), sink(wrong));
             s->write(std::as_bytes(std::span(std::string_view("bytes"))));
             s->close();
           }}) {
    try {
      attempt();
      ADD_FAILURE() << "a wrong key was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::permission_denied) << what;
      EXPECT_FALSE(e.url().empty());
      EXPECT_NE(what.find("az://"), std::string::npos) << what;
      EXPECT_NE(e.cause().find("HTTP 403"), std::string::npos) << what;
      // Azure says AuthenticationFailed, Azurite AuthorizationFailure; both explain it so.
      EXPECT_NE(e.cause().find("failed to authenticate"), std::string::npos) << what;
      EXPECT_EQ(what.find(wrong.key), std::string::npos) << what;
      EXPECT_EQ(what.find(azure_.key), std::string::npos) << what;
      EXPECT_EQ(what.find('<'), std::string::npos) << what;  // no raw XML
    }
  }
}

TEST_F(Azure, AMissingBlobOrContainerIsNotFound) {
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_all(az("shards/no-such-shard.tar"), open()); }, &what),
            ErrorCode::not_found);
  EXPECT_NE(what.find("BlobNotFound"), std::string::npos) << what;
  EXPECT_NE(what.find(az("shards/no-such-shard.tar")), std::string::npos) << what;
  EXPECT_EQ(test::error_code([&] { read_all("az://no-such-container/x.tar", open()); }, &what),
            ErrorCode::not_found);
  EXPECT_NE(what.find("ContainerNotFound"), std::string::npos) << what;
  EXPECT_EQ(test::error_code([&] { resolve_urls("az://no-such-container/", open()); }, &what),
            ErrorCode::not_found);
}

TEST_F(Azure, ASasTokenReadsListsAndWrites) {
  const std::string sas = env("WDS_TEST_AZURE_SAS");
  ASSERT_FALSE(sas.empty());
  const AzureOptions with_sas{.account = azure_.account, .sas_token = sas, .endpoint = endpoint_};
  EXPECT_EQ(read_back({az("shards/" + shards_[0])}, open(with_sas)), local_samples({shards_[0]}));
  EXPECT_EQ(resolve_urls(az("shards/*.tar"), open(with_sas)).size(), shards_.size());
  {
    auto s = open_sink(upload("sas.tar"), sink(with_sas));
    s->write(std::as_bytes(std::span(std::string_view("written with a SAS token"))));
    s->close();
  }
  EXPECT_EQ(read_all(upload("sas.tar"), open()), "written with a SAS token");
  // A token whose signature is wrong is refused, and not shown.
  AzureOptions forged = with_sas;
  forged.sas_token = sas.substr(0, sas.find("sig=") + 4) + "Zm9yZ2VkLXNpZ25hdHVyZQ%3D%3D";
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_all(az("shards/" + shards_[0]), open(forged)); }, &what),
            ErrorCode::permission_denied);
  EXPECT_EQ(what.find("Zm9yZ2VkLXNpZ25hdHVyZQ"), std::string::npos) << what;
}

TEST_F(Azure, TheEnvironmentsConnectionStringOrAccountAndKeyAreUsed) {
  ::setenv("AZURE_STORAGE_CONNECTION_STRING",
           ("DefaultEndpointsProtocol=http;AccountName=" + azure_.account +
            ";AccountKey=" + azure_.key + ";BlobEndpoint=" + endpoint_ + ";")
               .c_str(),
           1);
  EXPECT_EQ(read_back({az("shards/" + shards_[0])}), local_samples({shards_[0]}));
  ::unsetenv("AZURE_STORAGE_CONNECTION_STRING");
  ::setenv("AZURE_STORAGE_ACCOUNT", azure_.account.c_str(), 1);
  ::setenv("AZURE_STORAGE_KEY", azure_.key.c_str(), 1);
  EXPECT_EQ(read_back({az("shards/" + shards_[0])}, open(AzureOptions{.endpoint = endpoint_})),
            local_samples({shards_[0]}));
}

TEST_F(Azure, APublicContainerIsReadAnonymouslyAndNoCredentialsIsAClearError) {
  const std::string url =
      "az://" + env("WDS_TEST_AZURE_PUBLIC_CONTAINER") + "/shards/" + shards_[0];
  EXPECT_EQ(read_back({url}, open(AzureOptions{.endpoint = endpoint_, .anonymous = true})),
            local_samples({shards_[0]}));
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_all(url, open(AzureOptions{})); }, &what),
            ErrorCode::permission_denied);
  EXPECT_NE(what.find(url), std::string::npos) << what;
  EXPECT_NE(what.find("AZURE_STORAGE_CONNECTION_STRING"), std::string::npos) << what;
}

}  // namespace
}  // namespace wds
