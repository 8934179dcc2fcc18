// gs:// URLs, JSON key files and the pieces of a JWT, without a server (the token flow and the
// backend are tested against loopback stand-ins in tests/remote/gcs_test.cpp).
#include "lib/storage/gcs.hpp"

#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>

#include "tests/support/env.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"

namespace wds {
namespace {

TEST(GcsUrl, SplitsBucketAndObject) {
  gcs::Location l = gcs::parse_gs_url("gs://my-bucket/dir/a b.tar");
  EXPECT_EQ(l.bucket, "my-bucket");
  EXPECT_EQ(l.object, "dir/a b.tar");
  EXPECT_EQ(gcs::parse_gs_url("GS://b").object, "");
  EXPECT_EQ(gcs::parse_gs_url("gs://b/dir/").object, "dir/");
}

TEST(GcsUrl, MalformedOnesAreInvalidArguments) {
  for (const char* bad : {"gs://", "gs:///a", "s3://b/a", "gs://b!d/a"}) {
    std::string what;
    EXPECT_EQ(test::error_code([&] { gcs::parse_gs_url(bad); }, &what), ErrorCode::invalid_argument)
        << bad;
    EXPECT_NE(what.find("gs://bucket/key"), std::string::npos) << what;
  }
  // What precedes '@' would be a secret: never shown.
  std::string what;
  EXPECT_EQ(test::error_code([&] { gcs::parse_gs_url("gs://KEY:SECRET@bucket/a"); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_EQ(what.find("SECRET"), std::string::npos) << what;
}

TEST(GcsUrl, ARegisteredBackendServesGs) {
  test::ClearedEnv env(
      std::array<const char*, 3>{"GOOGLE_APPLICATION_CREDENTIALS", "GCS_KEY", "HOME"});
  // No credentials needed to find out that a prefix names no object.
  std::string what;
  EXPECT_EQ(test::error_code([] { open_url("gs://bucket/dir/"); }, &what),
            ErrorCode::invalid_argument);
  EXPECT_NE(what.find("gs://bucket/dir/"), std::string::npos) << what;
  EXPECT_EQ(test::error_code([] { open_sink("gs://bucket/dir/"); }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([] { open_sink("gs://"); }), ErrorCode::invalid_argument);
}

std::string key_error(const std::string& json, ErrorCode expected = ErrorCode::invalid_argument) {
  std::string what;
  EXPECT_EQ(test::error_code([&] { gcs::parse_key_file("/keys/k.json", json); }, &what), expected)
      << json;
  EXPECT_NE(what.find("/keys/k.json"), std::string::npos) << what;
  return what;
}

TEST(GcsKeyFile, BadFilesNameTheFileAndTheCause) {
  EXPECT_NE(key_error("not json").find("not a JSON object"), std::string::npos);
  EXPECT_NE(key_error("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(key_error(R"({"client_email":"a@b"})").find("\"type\""), std::string::npos);
  EXPECT_NE(key_error(R"({"type":"external_account"})").find("external_account"),
            std::string::npos);
  EXPECT_NE(key_error(R"({"type":"service_account","client_email":"a@b","token_uri":"https://t"})")
                .find("\"private_key\""),
            std::string::npos);
  const std::string what = key_error(
      R"({"type":"service_account","client_email":"a@b","token_uri":"https://t","private_key":")" +
      std::string("-----BEGIN PRIVATE KEY-----\\nTOPSECRETBYTES\\n-----END PRIVATE KEY-----") +
      "\"}");
  EXPECT_NE(what.find("not a PEM RSA private key"), std::string::npos) << what;
  EXPECT_EQ(what.find("TOPSECRETBYTES"), std::string::npos) << what;
  EXPECT_NE(key_error(R"({"type":"authorized_user","client_id":"c","client_secret":"s"})")
                .find("\"refresh_token\""),
            std::string::npos);
  EXPECT_NE(key_error(R"({"type":"authorized_user","client_id":"c","client_secret":"s",)"
                      R"("refresh_token":"r","token_uri":"ftp://x"})")
                .find("token_uri"),
            std::string::npos);
}

TEST(GcsKeyFile, GcloudUserCredentialsUseGooglesTokenEndpoint) {
  gcs::KeyFile k = gcs::parse_key_file(
      "adc.json",
      R"({"type":"authorized_user","client_id":"id","client_secret":"s","refresh_token":"r"})");
  EXPECT_EQ(k.type, gcs::KeyFile::Type::authorized_user);
  EXPECT_EQ(k.token_uri, "https://oauth2.googleapis.com/token");
  EXPECT_EQ(k.refresh_token, "r");
  EXPECT_EQ(gcs::describe(k), "gcloud user credentials (key file adc.json)");
}

TEST(GcsKeyFile, AMissingFileIsNotFound) {
  test::TempDir dir;
  const std::string path = (dir.path() / "none.json").string();
  std::string what;
  EXPECT_EQ(test::error_code([&] { gcs::read_key_file(path); }, &what), ErrorCode::not_found);
  EXPECT_NE(what.find(path), std::string::npos) << what;
}

TEST(GcsJwt, Base64UrlHasNoPaddingAndAnUrlSafeAlphabet) {
  EXPECT_EQ(gcs::base64url(""), "");
  EXPECT_EQ(gcs::base64url("f"), "Zg");
  EXPECT_EQ(gcs::base64url("fo"), "Zm8");
  EXPECT_EQ(gcs::base64url("foo"), "Zm9v");
  EXPECT_EQ(gcs::base64url("\xfb\xff\xbf"), "-_-_");
}

TEST(GcsErrors, JsonErrorBodiesAreSummarised) {
  EXPECT_EQ(gcs::json_error_summary(R"({"error":{"code":404,"message":"No such object: b/o"}})"),
            "No such object: b/o");
  EXPECT_EQ(gcs::json_error_summary(
                R"({"error":"invalid_grant","error_description":"Invalid JWT Signature."})"),
            "invalid_grant: Invalid JWT Signature.");
  EXPECT_EQ(gcs::json_error_summary("<html><body>Bad gateway</body></html>"), "Bad gateway");
}

}  // namespace
}  // namespace wds
