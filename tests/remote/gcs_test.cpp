// gs:// end to end. The JSON API with OAuth2 tokens, the emulator and public reads run against a
// loopback stand-in for Google's token endpoint and JSON API (tests/support/gcs_server.hpp),
// always; the HMAC keys' XML API runs against the S3 test server of scripts/test-servers.sh
// (skipped without it), with the endpoint overridden to it.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "lib/storage/azure.hpp"
#include "tests/support/env.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/gcs_server.hpp"
#include "wds/backend.hpp"
#include "wds/remote.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"

namespace wds {
namespace {

using namespace std::chrono_literals;
using Strings = std::vector<std::string>;

constexpr std::array<const char*, 8> kGcsEnv = {"GCS_KEY",
                                                "GCS_SECRET",
                                                "GS_ACCESS_KEY_ID",
                                                "GS_SECRET_ACCESS_KEY",
                                                "GOOGLE_APPLICATION_CREDENTIALS",
                                                "STORAGE_EMULATOR_HOST",
                                                "CLOUDSDK_CONFIG",
                                                "HOME"};

using test::read_url;

void write_url(const std::string& url, const std::string& bytes, const SinkOptions& o = {}) {
  auto sink = open_sink(url, o);
  sink->write(std::as_bytes(std::span(bytes.data(), bytes.size())));
  sink->close();
}

std::string base64url_decode(std::string s) {
  for (char& c : s) c = c == '-' ? '+' : c == '_' ? '/' : c;
  while (s.size() % 4) s += '=';
  return azure::base64_decode(s).value();
}

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};

// An RSA key made for the test: its PEM, and the key to verify signatures with.
struct RsaKey {
  RsaKey() : key(EVP_RSA_gen(2048)) {
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    pem.assign(data, static_cast<std::size_t>(n));
    BIO_free(bio);
  }
  bool verifies(const std::string& signed_part, const std::string& signature) const {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    const bool ok = EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key.get()) == 1 &&
                    EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()),
                                     signature.size(),
                                     reinterpret_cast<const unsigned char*>(signed_part.data()),
                                     signed_part.size()) == 1;
    EVP_MD_CTX_free(ctx);
    return ok;
  }
  std::unique_ptr<EVP_PKEY, PkeyFree> key;
  std::string pem;
};

const RsaKey& rsa() {
  static const RsaKey key;  // 2048-bit generation takes a while: once for the suite
  return key;
}

// Shared by the tests below: the stand-in, a clean environment (HOME a fresh directory, so that
// no gcloud file of the machine's is found) and key files in a temporary directory.
class GcsJson : public ::testing::Test {
 protected:
  GcsJson() : env_(kGcsEnv) {
    ::setenv("HOME", home_.path().c_str(), 1);
    payload_ = std::string(300000, '\0');
    for (std::size_t i = 0; i < payload_.size(); ++i) payload_[i] = static_cast<char>(i * 7 % 251);
    gcs_.put("bkt", "dir/a.tar", payload_);
    gcs_.put("bkt", "dir/b.tar", "bee");
    gcs_.put("bkt", "dir/c.txt", "sea");
    gcs_.put("bkt", "dir/d e.tar", "dee");
    gcs_.put("bkt", "dir/sub/x.tar", "nested");
    gcs_.put("bkt", "other/y.tar", "why");
  }

  std::string key_file(const std::string& name, const nlohmann::json& j) {
    const std::string path = (home_.path() / name).string();
    std::ofstream(path) << j.dump();
    return path;
  }
  std::string service_account(const std::string& name = "sa.json") {
    return key_file(name, {{"type", "service_account"},
                           {"client_email", "loader@proj.iam.gserviceaccount.com"},
                           {"private_key", rsa().pem},
                           {"token_uri", gcs_.url("/token")}});
  }
  OpenOptions at_stand_in() const {
    OpenOptions o;
    o.backend_options.set(GcsOptions{.endpoint = gcs_.endpoint()});
    return o;
  }
  SinkOptions sink_at_stand_in() const {
    SinkOptions o;
    o.backend_options.set(GcsOptions{.endpoint = gcs_.endpoint()});
    return o;
  }
  // The decoded form of a token request.
  static std::map<std::string, std::string> form_of(const test::GcsServer::Exchange& e) {
    std::map<std::string, std::string> out;
    for (std::size_t at = 0; at <= e.body.size();) {
      std::size_t amp = e.body.find('&', at);
      if (amp == std::string::npos) amp = e.body.size();
      const std::string pair = e.body.substr(at, amp - at);
      out[percent_decode(pair.substr(0, pair.find('=')))] =
          percent_decode(pair.substr(pair.find('=') + 1));
      at = amp + 1;
    }
    return out;
  }
  static std::string auth_of(const test::GcsServer::Exchange& e) {
    auto it = e.headers.find("authorization");
    return it == e.headers.end() ? "" : it->second;
  }

  test::ClearedEnv env_;
  test::TempDir home_;
  test::GcsServer gcs_;
  std::string payload_;
};

TEST_F(GcsJson, AServiceAccountsSignedJwtIsExchangedForABearerToken) {
  const std::string key = service_account();
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", key.c_str(), 1);
  gcs_.require_bearer(true);
  const auto before = std::chrono::system_clock::now();
  EXPECT_EQ(read_url("gs://bkt/dir/a.tar", at_stand_in()), payload_);

  const auto tokens = gcs_.requests_to("/token");
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].method, "POST");
  EXPECT_EQ(tokens[0].headers.at("content-type"), "application/x-www-form-urlencoded");
  auto form = form_of(tokens[0]);
  EXPECT_EQ(form["grant_type"], "urn:ietf:params:oauth:grant-type:jwt-bearer");
  const std::string jwt = form["assertion"];
  const std::size_t dot1 = jwt.find('.'), dot2 = jwt.rfind('.');
  ASSERT_NE(dot1, dot2) << jwt;
  EXPECT_EQ(nlohmann::json::parse(base64url_decode(jwt.substr(0, dot1))),
            nlohmann::json::parse(R"({"alg":"RS256","typ":"JWT"})"));
  const auto claims =
      nlohmann::json::parse(base64url_decode(jwt.substr(dot1 + 1, dot2 - dot1 - 1)));
  EXPECT_EQ(claims["iss"], "loader@proj.iam.gserviceaccount.com");
  EXPECT_EQ(claims["scope"], "https://www.googleapis.com/auth/devstorage.read_only");
  EXPECT_EQ(claims["aud"], gcs_.url("/token"));
  const std::int64_t iat = claims["iat"], exp = claims["exp"];
  EXPECT_EQ(exp - iat, 3600);
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(before.time_since_epoch()).count();
  EXPECT_LE(std::abs(iat - now), 5);
  EXPECT_TRUE(rsa().verifies(jwt.substr(0, dot2), base64url_decode(jwt.substr(dot2 + 1))));
  EXPECT_FALSE(rsa().verifies(jwt.substr(0, dot2) + "x", base64url_decode(jwt.substr(dot2 + 1))));

  const auto reads = gcs_.requests_to("/storage/v1/b/bkt/o/");
  ASSERT_FALSE(reads.empty());
  for (const auto& r : reads) EXPECT_EQ(auth_of(r), "Bearer token-1");
  EXPECT_EQ(reads[0].path, "/storage/v1/b/bkt/o/dir%2Fa.tar");
  EXPECT_EQ(reads[0].query.at("alt"), "media");

  // Cached: the next read and a listing ask for no new token.
  EXPECT_EQ(read_url("gs://bkt/dir/b.tar", at_stand_in()), "bee");
  EXPECT_EQ(resolve_urls("gs://bkt/dir/", at_stand_in()).size(), 4u);
  EXPECT_EQ(gcs_.requests_to("/token").size(), 1u);
}

TEST_F(GcsJson, ReadsResumeFromAnOffsetWithRange) {
  OpenOptions o = at_stand_in();
  o.offset = 1000;
  EXPECT_EQ(read_url("gs://bkt/dir/a.tar", o), payload_.substr(1000));
  const auto reads = gcs_.requests_to("/storage/v1/b/bkt/o/");
  ASSERT_FALSE(reads.empty());
  EXPECT_EQ(reads[0].headers.at("range").rfind("bytes=1000-", 0), 0u);
}

TEST_F(GcsJson, ListingsFollowPagesKeepOneLevelAndMatchGlobs) {
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", service_account().c_str(), 1);
  gcs_.require_bearer(true);
  gcs_.set_page_size(2);
  EXPECT_EQ(resolve_urls("gs://bkt/dir/", at_stand_in()),
            (Strings{"gs://bkt/dir/a.tar", "gs://bkt/dir/b.tar", "gs://bkt/dir/c.txt",
                     "gs://bkt/dir/d e.tar"}));
  EXPECT_EQ(resolve_urls("gs://bkt/dir/*.tar", at_stand_in()),
            (Strings{"gs://bkt/dir/a.tar", "gs://bkt/dir/b.tar", "gs://bkt/dir/d e.tar"}));
  const auto lists = gcs_.requests_to("/storage/v1/b/bkt/o");
  ASSERT_GE(lists.size(), 2u);
  EXPECT_EQ(lists[0].query.at("prefix"), "dir/");
  EXPECT_EQ(lists[0].query.at("delimiter"), "/");
  EXPECT_EQ(lists[1].query.at("pageToken"), "2");
  std::string what;
  EXPECT_EQ(test::error_code([&] { resolve_urls("gs://bkt/dir/*.zip", at_stand_in()); }, &what),
            ErrorCode::not_found);
  EXPECT_NE(what.find("gs://bkt/dir/*.zip"), std::string::npos) << what;
}

TEST_F(GcsJson, TokensAreRefreshedBeforeTheyExpireOneRefreshAtATime) {
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", service_account().c_str(), 1);
  gcs_.require_bearer(true);
  gcs_.set_token_answer(200, "", 4);  // refreshed after half its life, 2 s
  // Many readers at once need one token, fetched once.
  std::vector<std::thread> readers;
  std::atomic<int> good{0};
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&] { good += read_url("gs://bkt/dir/b.tar", at_stand_in()) == "bee"; });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(good, 8);
  EXPECT_EQ(gcs_.requests_to("/token").size(), 1u);
  EXPECT_EQ(read_url("gs://bkt/dir/b.tar", at_stand_in()), "bee");
  EXPECT_EQ(gcs_.requests_to("/token").size(), 1u);
  std::this_thread::sleep_for(2200ms);
  EXPECT_EQ(read_url("gs://bkt/dir/c.txt", at_stand_in()), "sea");
  EXPECT_EQ(gcs_.requests_to("/token").size(), 2u);
  EXPECT_EQ(auth_of(gcs_.requests_to("/storage/v1/b/bkt/o/dir%2Fc.txt").back()), "Bearer token-2");
}

TEST_F(GcsJson, ATokenEndpointsRefusalIsPermissionDeniedWithItsText) {
  const std::string key = service_account();
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", key.c_str(), 1);
  gcs_.set_token_answer(
      400, R"({"error":"invalid_grant","error_description":"Invalid JWT Signature."})");
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_url("gs://bkt/dir/b.tar", at_stand_in()); }, &what),
            ErrorCode::permission_denied);
  EXPECT_NE(what.find("gs://bkt/dir/b.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("invalid_grant: Invalid JWT Signature."), std::string::npos) << what;
  EXPECT_NE(what.find("loader@proj.iam.gserviceaccount.com"), std::string::npos) << what;
  EXPECT_NE(what.find(key), std::string::npos) << what;
  EXPECT_EQ(what.find("PRIVATE KEY"), std::string::npos) << what;
  EXPECT_TRUE(gcs_.requests_to("/storage").empty());  // nothing sent without a token
  // Listings and uploads say the same.
  EXPECT_EQ(test::error_code([&] { resolve_urls("gs://bkt/dir/", at_stand_in()); }),
            ErrorCode::permission_denied);
  EXPECT_EQ(test::error_code([&] { open_sink("gs://bkt/out.tar", sink_at_stand_in()); }),
            ErrorCode::permission_denied);
}

TEST_F(GcsJson, ErrorsNameTheUrlAndTheCredentialUsed) {
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", service_account().c_str(), 1);
  gcs_.require_bearer(true);
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_url("gs://bkt/dir/missing.tar", at_stand_in()); }, &what),
            ErrorCode::not_found);
  EXPECT_NE(what.find("No such object: bkt/dir/missing.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("gs://bkt/dir/missing.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("the token of service account loader@"), std::string::npos) << what;
  // Without any credential the stand-in answers 401, as Google does.
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
  EXPECT_EQ(test::error_code([&] { read_url("gs://bkt/dir/b.tar", at_stand_in()); }, &what),
            ErrorCode::permission_denied);
  EXPECT_NE(what.find("HTTP 401"), std::string::npos) << what;
  EXPECT_NE(what.find("gs://bkt/dir/b.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("no credentials (none found"), std::string::npos) << what;
}

TEST_F(GcsJson, GcloudUserCredentialsAreRefreshedWithTheirRefreshToken) {
  const nlohmann::json adc = {{"type", "authorized_user"},
                              {"client_id", "cid.apps.googleusercontent.com"},
                              {"client_secret", "csecret"},
                              {"refresh_token", "1//refresh"},
                              {"token_uri", gcs_.url("/token")}};
  // Where gcloud writes it, found without GOOGLE_APPLICATION_CREDENTIALS.
  std::filesystem::create_directories(home_.path() / ".config" / "gcloud");
  key_file(".config/gcloud/application_default_credentials.json", adc);
  gcs_.require_bearer(true);
  EXPECT_EQ(read_url("gs://bkt/dir/b.tar", at_stand_in()), "bee");
  const auto tokens = gcs_.requests_to("/token");
  ASSERT_EQ(tokens.size(), 1u);
  auto form = form_of(tokens[0]);
  EXPECT_EQ(form["grant_type"], "refresh_token");
  EXPECT_EQ(form["client_id"], "cid.apps.googleusercontent.com");
  EXPECT_EQ(form["client_secret"], "csecret");
  EXPECT_EQ(form["refresh_token"], "1//refresh");
  // GOOGLE_APPLICATION_CREDENTIALS comes first: a file that is not there is an error.
  const std::string missing = (home_.path() / "missing.json").string();
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", missing.c_str(), 1);
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_url("gs://bkt/dir/b.tar", at_stand_in()); }, &what),
            ErrorCode::not_found);
  EXPECT_NE(what.find(missing), std::string::npos) << what;
}

TEST_F(GcsJson, UploadsAskForAReadWriteToken) {
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", service_account().c_str(), 1);
  gcs_.require_bearer(true);
  write_url("gs://bkt/out/new shard.tar", payload_, sink_at_stand_in());
  EXPECT_EQ(gcs_.object("bkt", "out/new shard.tar"), payload_);
  const auto uploads = gcs_.requests_to("/upload/storage/v1/b/bkt/o");
  ASSERT_EQ(uploads.size(), 1u);
  EXPECT_EQ(uploads[0].method, "POST");
  EXPECT_EQ(uploads[0].query.at("uploadType"), "media");
  const auto tokens = gcs_.requests_to("/token");
  ASSERT_EQ(tokens.size(), 1u);
  const std::string jwt = form_of(tokens[0])["assertion"];
  const std::size_t dot1 = jwt.find('.'), dot2 = jwt.rfind('.');
  EXPECT_EQ(nlohmann::json::parse(base64url_decode(jwt.substr(dot1 + 1, dot2 - dot1 - 1)))["scope"],
            "https://www.googleapis.com/auth/devstorage.read_write");
  EXPECT_EQ(auth_of(uploads[0]), "Bearer token-1");
}

TEST_F(GcsJson, TheEmulatorHostIsUsedWithoutCredentials) {
  // A key file that would fail if used: the emulator needs none, as Google's clients do it.
  const std::string key = key_file("bad.json", {{"type", "service_account"},
                                                {"client_email", "x@y"},
                                                {"private_key", rsa().pem},
                                                {"token_uri", "http://127.0.0.1:1/token"}});
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", key.c_str(), 1);
  ::setenv("STORAGE_EMULATOR_HOST", gcs_.host().c_str(), 1);  // host:port, as emulators give it
  EXPECT_EQ(read_url("gs://bkt/dir/a.tar"), payload_);
  EXPECT_EQ(resolve_urls("gs://bkt/dir/*.tar").size(), 3u);
  write_url("gs://bkt/out/e.tar", "emulated");
  EXPECT_EQ(gcs_.object("bkt", "out/e.tar"), "emulated");
  EXPECT_TRUE(gcs_.requests_to("/token").empty());
  for (const auto& r : gcs_.requests()) EXPECT_EQ(auth_of(r), "") << r.path;
}

TEST_F(GcsJson, PublicObjectsAreReadWithoutCredentials) {
  EXPECT_EQ(read_url("gs://bkt/dir/b.tar", at_stand_in()), "bee");
  // anonymous wins over a key file that is set.
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", service_account().c_str(), 1);
  OpenOptions o;
  o.backend_options.set(GcsOptions{.endpoint = gcs_.endpoint(), .anonymous = true});
  EXPECT_EQ(read_url("gs://bkt/dir/c.txt", o), "sea");
  EXPECT_TRUE(gcs_.requests_to("/token").empty());
  for (const auto& r : gcs_.requests()) EXPECT_EQ(auth_of(r), "") << r.path;
}

TEST_F(GcsJson, HalfAnHmacKeyIsAnErrorNamingTheMissingHalf) {
  ::setenv("GCS_KEY", "GOOG1EXAMPLE", 1);
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_url("gs://bkt/dir/b.tar", at_stand_in()); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("GCS_SECRET is not set"), std::string::npos) << what;
}

// The HMAC keys' path: GCS's XML API is S3's, so the S3 test server stands in for it.
class GcsHmac : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoint_ = test::env("WDS_TEST_S3_ENDPOINT");
    bucket_ = test::env("WDS_TEST_S3_BUCKET");
    data_ = test::env("WDS_TEST_DATA");
    if (endpoint_.empty() || data_.empty()) GTEST_SKIP() << "no S3 test server";
    for (const auto& e : std::filesystem::directory_iterator(data_)) {
      if (e.path().extension() == ".tar") shards_.push_back(e.path().filename().string());
    }
    std::sort(shards_.begin(), shards_.end());
    ASSERT_GE(shards_.size(), 2u);
    ::setenv("GCS_KEY", test::env("WDS_TEST_AWS_ACCESS_KEY_ID").c_str(), 1);
    ::setenv("GCS_SECRET", test::env("WDS_TEST_AWS_SECRET_ACCESS_KEY").c_str(), 1);
  }
  std::string gs(const std::string& key) const { return "gs://" + bucket_ + "/" + key; }
  template <class Options>
  Options at_server() const {
    Options o;
    o.backend_options.set(GcsOptions{.endpoint = endpoint_});
    return o;
  }

  test::ClearedEnv env_{kGcsEnv};
  std::string endpoint_, bucket_, data_;
  Strings shards_;
};

TEST_F(GcsHmac, ReadsListsAndWritesThroughTheXmlApi) {
  for (const std::string& name : shards_) {
    EXPECT_EQ(read_url(gs("shards/" + name), at_server<OpenOptions>()),
              test::read_file(data_ + "/" + name))
        << name;
  }
  Strings expected;
  for (const std::string& name : shards_) expected.push_back(gs("shards/" + name));
  EXPECT_EQ(resolve_urls(gs("shards/*.tar"), at_server<OpenOptions>()), expected);
  const std::string url = gs("gcs-test/written.bin");
  write_url(url, "written through the XML API", at_server<SinkOptions>());
  EXPECT_EQ(read_url(url, at_server<OpenOptions>()), "written through the XML API");
  // The boto names serve as well.
  ::unsetenv("GCS_KEY");
  ::unsetenv("GCS_SECRET");
  ::setenv("GS_ACCESS_KEY_ID", test::env("WDS_TEST_AWS_ACCESS_KEY_ID").c_str(), 1);
  ::setenv("GS_SECRET_ACCESS_KEY", test::env("WDS_TEST_AWS_SECRET_ACCESS_KEY").c_str(), 1);
  EXPECT_EQ(read_url(url, at_server<OpenOptions>()), "written through the XML API");
}

TEST_F(GcsHmac, AWrongSecretIsPermissionDeniedNamingTheKeyNotTheSecret) {
  const std::string secret = "wrongSecretValue1234567890abcdefghijklmn";
  ::setenv("GCS_SECRET", secret.c_str(), 1);
  const std::string url = gs("shards/" + shards_[0]);
  std::string what;
  EXPECT_EQ(test::error_code([&] { read_url(url, at_server<OpenOptions>()); }, &what),
            ErrorCode::permission_denied);
  EXPECT_NE(what.find(url), std::string::npos) << what;
  EXPECT_NE(what.find("HTTP 403"), std::string::npos) << what;
  EXPECT_NE(what.find("the HMAC key from GCS_KEY/GCS_SECRET"), std::string::npos) << what;
  EXPECT_EQ(what.find(secret), std::string::npos) << what;
  EXPECT_EQ(what.find(test::env("WDS_TEST_AWS_SECRET_ACCESS_KEY")), std::string::npos) << what;
}

}  // namespace
}  // namespace wds
