// S3 helpers: SigV4 against AWS's published examples, encoding, credentials and region lookup,
// s3:// URLs, and the XML of listings and errors.
#include "lib/storage/s3.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lib/storage/azure.hpp"
#include "lib/storage/http_transport.hpp"
#include "lib/storage/s3_xml.hpp"
#include "tests/support/env.hpp"
#include "tests/support/fake_transport.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"
#include "wds/sink.hpp"

namespace wds::s3 {
namespace {

// ---- AWS's examples ---------------------------------------------------------------------------
// Amazon S3 API Reference, "Signature Calculations for the Authorization Header: Transferring
// Payload in a Single Chunk (AWS Signature Version 4)" (sig-v4-header-based-auth.html), section
// "Examples: Signature Calculations". Every value below is copied from there.

const Credentials kAwsExample{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                              ""};
constexpr const char* kDate = "20130524T000000Z";
constexpr const char* kScope = "20130524/us-east-1/s3/aws4_request";
constexpr const char* kHost = "examplebucket.s3.amazonaws.com";
constexpr const char* kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

struct Published {
  Request request;
  std::string canonical_request;  // step 1a
  std::string canonical_hash;     // last line of the string to sign
  std::string signed_headers;
  std::string signature;
};

// The headers sign() signs for `r`, as (name, value) pairs, to rebuild the canonical request.
HeaderList signed_part(const HeaderList& sent) {
  HeaderList out;
  for (const auto& h : sent) {
    if (h.first != "authorization") out.push_back(h);
  }
  return out;
}

std::string value_of(const HeaderList& headers, const std::string& name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  ADD_FAILURE() << "no header " << name;
  return "";
}

void check_published(const Published& p) {
  HeaderList sent = sign(p.request, kAwsExample, "us-east-1", "s3", kDate);
  std::string cr = canonical_request(p.request, signed_part(sent));
  EXPECT_EQ(cr, p.canonical_request);
  EXPECT_EQ(sha256_hex(cr), p.canonical_hash);
  EXPECT_EQ(string_to_sign(kDate, kScope, sha256_hex(cr)),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n" +
                p.canonical_hash);
  EXPECT_EQ(value_of(sent, "authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
            "aws4_request, SignedHeaders=" +
                p.signed_headers + ", Signature=" + p.signature);
  EXPECT_EQ(value_of(sent, "x-amz-date"), kDate);
  EXPECT_EQ(value_of(sent, "x-amz-content-sha256"), p.request.payload_sha256);
  EXPECT_EQ(value_of(sent, "host"), kHost);
}

TEST(SigV4Published, GetObjectWithRange) {
  Request r{.method = "GET", .host = kHost, .path = "/test.txt"};
  r.headers = {{"Range", "bytes=0-9"}};
  check_published({r,
                   "GET\n"
                   "/test.txt\n"
                   "\n"
                   "host:examplebucket.s3.amazonaws.com\n"
                   "range:bytes=0-9\n"
                   "x-amz-content-sha256:"
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
                   "x-amz-date:20130524T000000Z\n"
                   "\n"
                   "host;range;x-amz-content-sha256;x-amz-date\n"
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                   "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
                   "host;range;x-amz-content-sha256;x-amz-date",
                   "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"});
}

TEST(SigV4Published, PutObject) {
  // The body is "Welcome to Amazon S3."; '$' in the key is encoded in the path.
  Request r{.method = "PUT", .host = kHost, .path = "/test$file.text"};
  r.headers = {{"date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
  r.payload_sha256 = sha256_hex("Welcome to Amazon S3.");
  ASSERT_EQ(r.payload_sha256, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  check_published({r,
                   "PUT\n"
                   "/test%24file.text\n"
                   "\n"
                   "date:Fri, 24 May 2013 00:00:00 GMT\n"
                   "host:examplebucket.s3.amazonaws.com\n"
                   "x-amz-content-sha256:"
                   "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
                   "x-amz-date:20130524T000000Z\n"
                   "x-amz-storage-class:REDUCED_REDUNDANCY\n"
                   "\n"
                   "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
                   "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
                   "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
                   "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                   "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"});
}

TEST(SigV4Published, GetBucketLifecycle) {
  Request r{.method = "GET", .host = kHost, .path = "/"};
  r.query = {{"lifecycle", ""}};
  check_published({r,
                   "GET\n"
                   "/\n"
                   "lifecycle=\n"
                   "host:examplebucket.s3.amazonaws.com\n"
                   "x-amz-content-sha256:"
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
                   "x-amz-date:20130524T000000Z\n"
                   "\n"
                   "host;x-amz-content-sha256;x-amz-date\n"
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                   "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
                   "host;x-amz-content-sha256;x-amz-date",
                   "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"});
}

const char* const kListCanonical =
    "GET\n"
    "/\n"
    "max-keys=2&prefix=J\n"
    "host:examplebucket.s3.amazonaws.com\n"
    "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
    "x-amz-date:20130524T000000Z\n"
    "\n"
    "host;x-amz-content-sha256;x-amz-date\n"
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(SigV4Published, ListObjects) {
  Request r{.method = "GET", .host = kHost, .path = "/"};
  r.query = {{"max-keys", "2"}, {"prefix", "J"}};
  check_published({r, kListCanonical,
                   "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
                   "host;x-amz-content-sha256;x-amz-date",
                   "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"});
}

TEST(SigV4Published, ListObjectsQueryGivenOutOfOrder) {
  Request r{.method = "GET", .host = kHost, .path = ""};  // empty path signs as "/"
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};
  check_published({r, kListCanonical,
                   "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
                   "host;x-amz-content-sha256;x-amz-date",
                   "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"});
  EXPECT_EQ(request_url(r, "https"), "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J");
}

// ---- hashing and encoding ---------------------------------------------------------------------

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), kEmpty);
  EXPECT_EQ(sha256_hex("abc"),  // FIPS 180-2, appendix B.1
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string("a\0b", 3)).size(), 64u);
  EXPECT_NE(sha256_hex(std::string("a\0b", 3)), sha256_hex("a"));  // NUL is not a terminator
}

TEST(UriEncode, KeepsUnreservedEncodesTheRest) {
  EXPECT_EQ(uri_encode("AZaz09-_.~", true), "AZaz09-_.~");
  EXPECT_EQ(uri_encode("a b", true), "a%20b");
  EXPECT_EQ(uri_encode("a+b=c", true), "a%2Bb%3Dc");
  EXPECT_EQ(uri_encode("a/b", true), "a%2Fb");
  EXPECT_EQ(uri_encode("/a/b c/", false), "/a/b%20c/");
  EXPECT_EQ(uri_encode("100%", false), "100%25");
  EXPECT_EQ(uri_encode("!*'();:@&$,?#[]", true), "%21%2A%27%28%29%3B%3A%40%26%24%2C%3F%23%5B%5D");
  EXPECT_EQ(uri_encode("\xC3\xA9t\xC3\xA9", true), "%C3%A9t%C3%A9");  // "été" in UTF-8
  EXPECT_EQ(uri_encode("\xE2\x82\xAC", false), "%E2%82%AC");          // "€"
  EXPECT_EQ(uri_encode(std::string("\x00\x7F\xFF", 3), true), "%00%7F%FF");
  EXPECT_EQ(uri_encode("", true), "");
}

TEST(SigV4, PathIsEncodedOnceWithSlashesKept) {
  Request r{.method = "GET", .host = "127.0.0.1:9000", .path = "/bucket/dir/my key+1~%20.tar"};
  EXPECT_EQ(request_url(r, "http"), "http://127.0.0.1:9000/bucket/dir/my%20key%2B1~%2520.tar");
  std::string cr = canonical_request(r, {{"host", "127.0.0.1:9000"}});
  EXPECT_EQ(cr.substr(0, cr.find('\n', 4) + 1), "GET\n/bucket/dir/my%20key%2B1~%2520.tar\n");
  // Not normalised: S3 signs "a//b/../c" as written.
  r.path = "/b//x/../y";
  EXPECT_EQ(request_url(r, "https"), "https://127.0.0.1:9000/b//x/../y");
}

TEST(SigV4, QuerySortedByEncodedNameThenValue) {
  Request r{.method = "GET", .host = "h", .path = "/"};
  // Raw "\xC3\xA9" sorts after 'z'; encoded, "%C3%A9" sorts first ('%' < 'A' < 'k' < 'z').
  r.query = {{"z", "1"},
             {"\xC3\xA9", "2"},
             {"k", "b"},
             {"k", "a"},
             {"A", ""},
             {"list-type", "2"},
             {"continuation-token", "1/a+b="}};
  EXPECT_EQ(request_url(r, "https"),
            "https://h/?%C3%A9=2&A=&continuation-token=1%2Fa%2Bb%3D&k=a&k=b&list-type=2&z=1");
  std::string cr = canonical_request(r, {{"host", "h"}});
  EXPECT_NE(cr.find("\n%C3%A9=2&A=&continuation-token=1%2Fa%2Bb%3D&k=a&k=b&list-type=2&z=1\n"),
            std::string::npos)
      << cr;
}

TEST(SigV4, CanonicalHeadersAreLoweredTrimmedSortedAndMerged) {
  Request r{.method = "GET", .host = "h", .path = "/"};
  std::string cr = canonical_request(r, {{"X-Amz-Meta-B", "  two   words\t here "},
                                         {"host", "h"},
                                         {"x-amz-meta-a", "1"},
                                         {"X-AMZ-META-A", "2"}});
  EXPECT_EQ(cr,
            "GET\n/\n\nhost:h\nx-amz-meta-a:1,2\nx-amz-meta-b:two words here\n\n"
            "host;x-amz-meta-a;x-amz-meta-b\n" +
                std::string(kEmpty));
}

// The signature computed here independently (OpenSSL directly) from the exposed pieces.
std::string independent_signature(const Request& r, const HeaderList& sent,
                                  const std::string& secret, const std::string& scope_date,
                                  const std::string& region, const std::string& service) {
  auto mac = [](const std::string& key, const std::string& data) {
    unsigned char out[32];
    unsigned int len = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
    return std::string(reinterpret_cast<char*>(out), len);
  };
  std::string scope = scope_date + "/" + region + "/" + service + "/aws4_request";
  std::string sts = string_to_sign(value_of(sent, "x-amz-date"), scope,
                                   sha256_hex(canonical_request(r, signed_part(sent))));
  std::string k = mac(mac(mac(mac("AWS4" + secret, scope_date), region), service), "aws4_request");
  std::string sig = mac(k, sts);
  std::string hex;
  for (unsigned char c : sig) {
    static const char* digits = "0123456789abcdef";
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

std::vector<std::string> names_of(const HeaderList& h) {
  std::vector<std::string> out;
  for (const auto& [n, v] : h) out.push_back(n);
  return out;
}

TEST(SigV4, SessionTokenIsSentAndSigned) {
  Request r{.method = "GET", .host = "bucket.s3.eu-west-1.amazonaws.com", .path = "/k.tar"};
  r.headers = {{"Range", "bytes=100-"}};
  Credentials c = kAwsExample;
  c.session_token = "FwoGZXIvYXdzE/token+with=chars";
  HeaderList sent = sign(r, c, "eu-west-1", "s3", "20240229T235959Z");
  EXPECT_EQ(names_of(sent),
            (std::vector<std::string>{"host", "x-amz-date", "x-amz-content-sha256",
                                      "x-amz-security-token", "range", "authorization"}));
  EXPECT_EQ(value_of(sent, "x-amz-security-token"), c.session_token);
  EXPECT_EQ(value_of(sent, "range"), "bytes=100-");
  std::string auth = value_of(sent, "authorization");
  EXPECT_NE(auth.find("Credential=AKIAIOSFODNN7EXAMPLE/20240229/eu-west-1/s3/aws4_request, "),
            std::string::npos)
      << auth;
  EXPECT_NE(auth.find("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;"
                      "x-amz-security-token, "),
            std::string::npos)
      << auth;
  std::string expected =
      independent_signature(r, sent, c.secret_access_key, "20240229", "eu-west-1", "s3");
  EXPECT_TRUE(auth.ends_with("Signature=" + expected)) << auth;

  // Without the token: no header, and a different signature.
  HeaderList plain = sign(r, kAwsExample, "eu-west-1", "s3", "20240229T235959Z");
  EXPECT_EQ(names_of(plain), (std::vector<std::string>{"host", "x-amz-date", "x-amz-content-sha256",
                                                       "range", "authorization"}));
  EXPECT_NE(value_of(plain, "authorization"), auth);
  EXPECT_TRUE(
      value_of(plain, "authorization")
          .ends_with("Signature=" + independent_signature(r, plain, kAwsExample.secret_access_key,
                                                          "20240229", "eu-west-1", "s3")));
}

TEST(SigV4, EverySignedPartChangesTheSignature) {
  Request r{.method = "GET", .host = "h:9000", .path = "/b/k"};
  auto sig = [](const Request& req, const std::string& region = "us-east-1",
                const char* date = "20130524T000000Z") {
    return value_of(sign(req, kAwsExample, region, "s3", date), "authorization");
  };
  std::string base = sig(r);
  Request other = r;
  other.path = "/b/k2";
  EXPECT_NE(sig(other), base);
  other = r;
  other.host = "h:9001";
  EXPECT_NE(sig(other), base);
  other = r;
  other.query = {{"x", ""}};
  EXPECT_NE(sig(other), base);
  other = r;
  other.payload_sha256 = "UNSIGNED-PAYLOAD";
  EXPECT_NE(sig(other), base);
  EXPECT_NE(sig(r, "us-east-2"), base);
  EXPECT_NE(sig(r, "us-east-1", "20130524T000001Z"), base);
  EXPECT_EQ(sig(r), base);  // and it is deterministic
}

TEST(SigV4, RejectsWhatCannotBeSigned) {
  Request r{.method = "GET", .host = "h", .path = "/"};
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find(kAwsExample.secret_access_key), std::string::npos);
      return std::optional<ErrorCode>(e.code());
    }
    return std::optional<ErrorCode>();
  };
  const auto invalid = std::optional<ErrorCode>(ErrorCode::invalid_argument);
  for (const char* date : {"", "20130524", "20130524T000000", "2013-05-24T00:00:00Z",
                           "20130524X000000Z", "2013052aT000000Z"}) {
    EXPECT_EQ(code_of([&] { sign(r, kAwsExample, "us-east-1", "s3", date); }), invalid) << date;
  }
  EXPECT_EQ(code_of([&] { sign(r, Credentials{"", "s", ""}, "us-east-1", "s3", kDate); }), invalid);
  EXPECT_EQ(code_of([&] { sign(r, Credentials{"a", "", ""}, "us-east-1", "s3", kDate); }), invalid);
  EXPECT_EQ(code_of([&] { sign(r, kAwsExample, "", "s3", kDate); }), invalid);
  for (const char* reserved :
       {"Host", "x-amz-date", "X-Amz-Content-Sha256", "x-amz-security-token", "Authorization"}) {
    Request bad = r;
    bad.headers = {{reserved, "x"}};
    EXPECT_EQ(code_of([&] { sign(bad, kAwsExample, "us-east-1", "s3", kDate); }), invalid)
        << reserved;
  }
  Request bad = r;
  bad.headers = {{"x-amz-meta-a", "1\r\nx-evil: 2"}};
  EXPECT_EQ(code_of([&] { sign(bad, kAwsExample, "us-east-1", "s3", kDate); }), invalid);
  bad.headers = {{"bad name", "1"}};
  EXPECT_EQ(code_of([&] { sign(bad, kAwsExample, "us-east-1", "s3", kDate); }), invalid);
  bad = r;
  bad.host = "h/x";
  EXPECT_EQ(code_of([&] { sign(bad, kAwsExample, "us-east-1", "s3", kDate); }), invalid);
  EXPECT_EQ(code_of([&] { request_url(r, "ftp"); }), invalid);
  EXPECT_EQ(code_of([&] { request_url(r, "HTTPS://"); }), invalid);
}

TEST(AmzDate, IsNowInUtc) {
  std::time_t before = std::time(nullptr);
  std::string d = amz_date_now();
  std::time_t after = std::time(nullptr);
  ASSERT_EQ(d.size(), 16u) << d;
  for (std::size_t i = 0; i < d.size(); ++i) {
    EXPECT_TRUE(i == 8 ? d[i] == 'T' : i == 15 ? d[i] == 'Z' : std::isdigit(d[i]) != 0) << d;
  }
  std::tm tm{};
  ASSERT_NE(strptime(d.c_str(), "%Y%m%dT%H%M%SZ", &tm), nullptr);
  std::time_t t = timegm(&tm);
  EXPECT_GE(t, before);
  EXPECT_LE(t, after);
  // And sign() accepts it.
  Request r{.method = "GET", .host = "h", .path = "/"};
  EXPECT_EQ(value_of(sign(r, kAwsExample, "us-east-1", "s3", d), "x-amz-date"), d);
}

// ---- credentials and region -------------------------------------------------------------------

constexpr const char* kAwsVars[] = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "HOME",
};

// Clears the AWS variables and HOME for a test and restores them after, so the machine's own
// credentials are never read and tests do not leak into each other.
class CleanAwsEnv : public test::ClearedEnv {
 public:
  CleanAwsEnv() : ClearedEnv(kAwsVars) {}
};

class AwsConfig : public ::testing::Test {
 protected:
  AwsConfig() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "wds-s3-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
  }
  ~AwsConfig() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  static void set(const char* name, const std::string& value) {
    ASSERT_EQ(::setenv(name, value.c_str(), 1), 0) << name;
  }
  std::string write(const std::string& relative, const std::string& text) {
    std::filesystem::path p = dir_ / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  // The error resolve_credentials throws; checks that it carries no secret.
  Error credentials_error(const std::string& profile = "") {
    try {
      Credentials c = resolve_credentials(profile);
      ADD_FAILURE() << "no error; got key id " << c.access_key_id;
    } catch (const Error& e) {
      for (const char* s : kSecrets) {
        EXPECT_EQ(std::string(e.what()).find(s), std::string::npos) << e.what();
      }
      EXPECT_TRUE(e.url().empty());
      EXPECT_FALSE(e.retryable());
      return e;
    }
    return Error::unavailable("none");
  }

  // Every secret any test here writes; none may appear in a message.
  static constexpr const char* kSecrets[] = {"envSECRETvalue", "fileSECRETdefault",
                                             "fileSECRETprod", "fileSECREThalf",
                                             "TOKENsecretValue"};
  CleanAwsEnv env_;
  std::filesystem::path dir_;
};

const char* const kCredentialsFile =
    "# comment line\r\n"
    "[default]\r\n"
    "aws_access_key_id = AKIDDEFAULT\r\n"
    "aws_secret_access_key = fileSECRETdefault\r\n"
    "\n"
    "[prod]\n"
    "; another comment\n"
    "AWS_Access_Key_Id=AKIDPROD\n"
    "aws_secret_access_key:fileSECRETprod\n"
    "aws_session_token =   TOKENsecretValue  \n"
    "\n"
    "[only-id]\n"
    "aws_access_key_id = AKIDHALF\n"
    "[only-secret]\n"
    "aws_secret_access_key = fileSECREThalf\n"
    "[sso]\n"
    "sso_session = corp\n"
    "sso_account_id = 123456789012\n";

TEST_F(AwsConfig, CredentialsFromEnvironment) {
  set("AWS_ACCESS_KEY_ID", "AKIDENV");
  set("AWS_SECRET_ACCESS_KEY", "envSECRETvalue");
  set("AWS_SHARED_CREDENTIALS_FILE", write("credentials", kCredentialsFile));
  set("AWS_PROFILE", "prod");
  Credentials c = resolve_credentials();  // the environment wins over the file
  EXPECT_EQ(c.access_key_id, "AKIDENV");
  EXPECT_EQ(c.secret_access_key, "envSECRETvalue");
  EXPECT_EQ(c.session_token, "");
  set("AWS_SESSION_TOKEN", "TOKENsecretValue");
  EXPECT_EQ(resolve_credentials().session_token, "TOKENsecretValue");
}

TEST_F(AwsConfig, HalfSetEnvironmentIsAnError) {
  set("AWS_SHARED_CREDENTIALS_FILE", write("credentials", kCredentialsFile));
  set("AWS_SECRET_ACCESS_KEY", "envSECRETvalue");
  Error e = credentials_error();
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(e.cause().find("AWS_ACCESS_KEY_ID is not"), std::string::npos) << e.what();

  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  set("AWS_ACCESS_KEY_ID", "AKIDENV");
  set("AWS_SECRET_ACCESS_KEY", "");  // empty counts as unset
  e = credentials_error();
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(e.cause().find("AWS_SECRET_ACCESS_KEY is not"), std::string::npos) << e.what();
}

TEST_F(AwsConfig, CredentialsFromFileProfiles) {
  set("AWS_SHARED_CREDENTIALS_FILE", write("elsewhere/creds.ini", kCredentialsFile));
  Credentials c = resolve_credentials();
  EXPECT_EQ(c.access_key_id, "AKIDDEFAULT");  // CRLF line ends stripped
  EXPECT_EQ(c.secret_access_key, "fileSECRETdefault");
  EXPECT_EQ(c.session_token, "");

  set("AWS_PROFILE", "prod");
  c = resolve_credentials();
  EXPECT_EQ(c.access_key_id, "AKIDPROD");  // key names are case-insensitive; ':' separates too
  EXPECT_EQ(c.secret_access_key, "fileSECRETprod");
  EXPECT_EQ(c.session_token, "TOKENsecretValue");

  EXPECT_EQ(resolve_credentials("default").access_key_id, "AKIDDEFAULT");  // argument wins
}

TEST_F(AwsConfig, CredentialsFileUnderHome) {
  write("home/.aws/credentials", kCredentialsFile);
  set("HOME", (dir_ / "home").string());
  EXPECT_EQ(resolve_credentials("prod").access_key_id, "AKIDPROD");
  // AWS_SHARED_CREDENTIALS_FILE replaces the file under HOME.
  set("AWS_SHARED_CREDENTIALS_FILE",
      write("other", "[prod]\naws_access_key_id=AKIDOTHER\naws_secret_access_key=x\n"));
  EXPECT_EQ(resolve_credentials("prod").access_key_id, "AKIDOTHER");
}

TEST_F(AwsConfig, NestedAndMalformedLinesAreNotKeys) {
  set("AWS_SHARED_CREDENTIALS_FILE", write("credentials",
                                           "aws_access_key_id = BEFORE_ANY_SECTION\n"
                                           "[default]\n"
                                           "s3 =\n"
                                           "  aws_access_key_id = NESTED\n"
                                           "aws_access_key_id = AKIDREAL\n"
                                           "not a key line\n"
                                           "aws_secret_access_key = fileSECRETdefault\n"
                                           "[broken\n"
                                           "aws_access_key_id = IN_BROKEN_SECTION\n"));
  EXPECT_EQ(resolve_credentials().access_key_id, "AKIDREAL");
}

TEST_F(AwsConfig, NothingFoundSaysWhereItLookedAndWhatToDo) {
  set("HOME", (dir_ / "empty-home").string());
  Error e = credentials_error();
  EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
  for (const std::string& part :
       {std::string("AWS_ACCESS_KEY_ID"), std::string("AWS_SECRET_ACCESS_KEY"),
        (dir_ / "empty-home/.aws/credentials").string() + " does not exist",
        std::string("aws_access_key_id"), std::string("[default]"),
        std::string("AWS_SHARED_CREDENTIALS_FILE"), std::string("AWS_PROFILE")}) {
    EXPECT_NE(e.cause().find(part), std::string::npos) << part << " not in: " << e.what();
  }

  ::unsetenv("HOME");
  e = credentials_error();
  EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
  EXPECT_NE(e.cause().find("HOME is not set"), std::string::npos) << e.what();
}

TEST_F(AwsConfig, ProfileProblemsInTheFile) {
  std::string path = write("credentials", kCredentialsFile);
  set("AWS_SHARED_CREDENTIALS_FILE", path);

  set("AWS_PROFILE", "staging");
  Error e = credentials_error();
  EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
  EXPECT_NE(e.cause().find(path + " has no section [staging] (profile from AWS_PROFILE)"),
            std::string::npos)
      << e.what();

  e = credentials_error("sso");
  EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
  EXPECT_NE(e.cause().find("aws configure export-credentials --profile sso"), std::string::npos)
      << e.what();

  e = credentials_error("only-id");
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(e.cause().find("aws_access_key_id but no aws_secret_access_key"), std::string::npos)
      << e.what();

  e = credentials_error("only-secret");
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(e.cause().find("aws_secret_access_key but no aws_access_key_id"), std::string::npos)
      << e.what();

  // A path that cannot be read as a file.
  set("AWS_SHARED_CREDENTIALS_FILE", dir_.string());
  e = credentials_error("default");
  EXPECT_EQ(e.code(), ErrorCode::permission_denied) << e.what();
  EXPECT_NE(e.cause().find("cannot be read"), std::string::npos) << e.what();
}

const char* const kConfigFile =
    "[default]\n"
    "region = eu-central-1\n"
    "s3 =\n"
    "    region = nested-not-this\n"
    "[profile prod]\n"
    "output = json\n"
    "region = ap-southeast-2\n"
    "[profile   spaced]\n"
    "region=sa-east-1\n"
    "[plain]\n"  // in the config file only [default] goes without "profile "
    "region = not-a-profile\n"
    "[profile noregion]\n"
    "output = text\n";

TEST_F(AwsConfig, RegionOrder) {
  EXPECT_EQ(resolve_region(), "us-east-1");  // nothing at all, not even HOME

  write("home/.aws/config", kConfigFile);
  set("HOME", (dir_ / "home").string());
  EXPECT_EQ(resolve_region(), "eu-central-1");
  EXPECT_EQ(resolve_region("prod"), "ap-southeast-2");
  EXPECT_EQ(resolve_region("spaced"), "sa-east-1");
  EXPECT_EQ(resolve_region("plain"), "us-east-1");
  EXPECT_EQ(resolve_region("noregion"), "us-east-1");
  EXPECT_EQ(resolve_region("missing"), "us-east-1");
  set("AWS_PROFILE", "prod");
  EXPECT_EQ(resolve_region(), "ap-southeast-2");
  EXPECT_EQ(resolve_region("default"), "eu-central-1");  // the argument wins

  set("AWS_CONFIG_FILE", write("cfg", "[profile prod]\nregion = ca-central-1\n"));
  EXPECT_EQ(resolve_region(), "ca-central-1");  // AWS_CONFIG_FILE replaces ~/.aws/config

  set("AWS_DEFAULT_REGION", "us-west-1");
  EXPECT_EQ(resolve_region(), "us-west-1");
  set("AWS_REGION", "us-west-2");
  EXPECT_EQ(resolve_region(), "us-west-2");
  set("AWS_REGION", "");  // empty is unset
  EXPECT_EQ(resolve_region(), "us-west-1");
}

// ---- s3:// URLs --------------------------------------------------------------------------------

TEST(ParseS3Url, BucketAndKey) {
  auto parsed = [](std::string_view url) {
    Location l = parse_s3_url(url);
    return l.bucket + "|" + l.key;
  };
  EXPECT_EQ(parsed("s3://bucket/key.tar"), "bucket|key.tar");
  EXPECT_EQ(parsed("s3://my.bucket-1/dir/sub/shard 000.tar"), "my.bucket-1|dir/sub/shard 000.tar");
  EXPECT_EQ(parsed("s3://bucket/a%20b?x#y"), "bucket|a%20b?x#y");  // keys are taken as written
  EXPECT_EQ(parsed("s3://bucket//lead"), "bucket|/lead");
  EXPECT_EQ(parsed("s3://bucket"), "bucket|");
  EXPECT_EQ(parsed("s3://bucket/"), "bucket|");
  EXPECT_EQ(parsed("S3://Legacy_Bucket/k"), "Legacy_Bucket|k");
}

TEST(ParseS3Url, Malformed) {
  for (const char* url : {"", "s3:", "s3:/b/k", "http://b/k", "b/k", "s3://", "s3:///k",
                          "s3://bu cket/k", "s3://b:9000/k", "s3://b?x", "s3://ak:hunter2@b/k"}) {
    try {
      parse_s3_url(url);
      ADD_FAILURE() << "accepted " << url;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << url;
      EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
      EXPECT_NE(e.cause().find("s3://bucket/key"), std::string::npos) << e.what();
    }
  }
}

// ---- ListObjectsV2 ----------------------------------------------------------------------------

TEST(ListObjectsV2, KeysWithEntitiesAndTruncation) {
  std::string xml =
      "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
      "  <Name>bucket</Name><Prefix>train/</Prefix><KeyCount>6</KeyCount>\n"
      "  <MaxKeys>6</MaxKeys><IsTruncated>true</IsTruncated>\n"
      "  <!-- a comment <Key>not-a-key</Key> -->\n"
      "  <Contents><Key>train/000.tar</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"
      "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>"
      "<StorageClass>STANDARD</StorageClass></Contents>\n"
      "  <Contents><Key>train/a&amp;b &lt;c&gt; &quot;d&quot; &apos;e&apos;.tar</Key></Contents>\n"
      "  <Contents><Key>train/&#65;&#x42;&#xe9;&#x1F600;.tar</Key></Contents>\n"
      "  <Contents>\n    <Key>  spaced  </Key>\n  </Contents>\n"
      "  <Contents><Key><![CDATA[train/<raw>&amp;]]></Key><Owner><ID>x</ID></Owner></Contents>\n"
      "  <Contents><Key>train/\xC3\xA9t\xC3\xA9.tar</Key></Contents>\n"
      "  <CommonPrefixes><Prefix>train/sub/</Prefix></CommonPrefixes>\n"
      "  "
      "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</"
      "NextContinuationToken>\n"
      "</ListBucketResult>\n";
  ListPage page = parse_list_objects_v2(xml);
  EXPECT_EQ(page.keys,
            (std::vector<std::string>{"train/000.tar", "train/a&b <c> \"d\" 'e'.tar",
                                      "train/AB\xC3\xA9\xF0\x9F\x98\x80.tar", "  spaced  ",
                                      "train/<raw>&amp;", "train/\xC3\xA9t\xC3\xA9.tar"}));
  EXPECT_EQ(page.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(ListObjectsV2, NoTokenWhenNotTruncated) {
  ListPage page = parse_list_objects_v2(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
      "<Prefix/><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
      "<Contents><Key>only.tar</Key></Contents>"
      "<NextContinuationToken>ignored</NextContinuationToken></ListBucketResult>");
  EXPECT_EQ(page.keys, std::vector<std::string>{"only.tar"});
  EXPECT_FALSE(page.next_token);

  page = parse_list_objects_v2(
      "<ListBucketResult><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"
      "</ListBucketResult>");
  EXPECT_TRUE(page.keys.empty());
  EXPECT_FALSE(page.next_token);

  page = parse_list_objects_v2("<ListBucketResult/>");
  EXPECT_TRUE(page.keys.empty());
  EXPECT_FALSE(page.next_token);
}

TEST(ListObjectsV2, UrlEncodingTypeIsDecoded) {
  ListPage page = parse_list_objects_v2(
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
      "<Contents><Key>dir/a+b%2Bc%C3%A9%0A.tar</Key></Contents></ListBucketResult>");
  EXPECT_EQ(page.keys, std::vector<std::string>{"dir/a b+c\xC3\xA9\n.tar"});
}

TEST(ListObjectsV2, MalformedIsCorruptData) {
  const std::string good_head =
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Key></Contents>";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no XML element"},
      {"not xml at all", "text outside the root element"},
      {"<html><body>Bad Gateway</body></html>", "the root element is <html>"},
      {"<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
       "</Error>",
       "AccessDenied: Access Denied"},
      {good_head, "ends inside <ListBucketResult>"},  // truncated body
      {good_head.substr(0, good_head.size() - 5), "unterminated tag"},
      {"<ListBucketResult><Contents><Key>a</Contents></ListBucketResult>",
       "unexpected </Contents>"},
      {"<ListBucketResult></ListBucketResult><ListBucketResult/>", "more than one root"},
      {"<ListBucketResult/>trailing", "text outside the root element"},
      {"<!DOCTYPE x [<!ENTITY e \"boom\">]><ListBucketResult/>", "DOCTYPE"},
      {"<ListBucketResult><Contents><Key>a&nbsp;b</Key></Contents></ListBucketResult>",
       "unknown entity '&nbsp;'"},
      {"<ListBucketResult><Contents><Key>a & b</Key></Contents></ListBucketResult>",
       "starts no entity"},
      {"<ListBucketResult><Contents><Key>&#xD800;</Key></Contents></ListBucketResult>",
       "invalid character reference"},
      {"<ListBucketResult><Contents><Key>&#1114112;</Key></Contents></ListBucketResult>",
       "invalid character reference"},
      {"<ListBucketResult><Contents><Key>&#x;</Key></Contents></ListBucketResult>",
       "invalid character reference"},
      {"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
       "<Contents> without a <Key>"},
      {"<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
       "IsTruncated is 'yes'"},
      {"<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a</Key></Contents>"
       "</ListBucketResult>",
       "no NextContinuationToken"},
      {"<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>a%2</Key></Contents>"
       "</ListBucketResult>",
       "malformed url-encoded key"},
      {"<ListBucketResult><1bad/></ListBucketResult>", "malformed tag"},
      {"<ListBucketResult><!-- open comment", "unterminated comment"},
      {"<ListBucketResult><></ListBucketResult>", "malformed tag"},
  };
  for (const auto& [xml, expected] : cases) {
    try {
      parse_list_objects_v2(xml);
      ADD_FAILURE() << "accepted: " << xml;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_data) << xml;
      EXPECT_NE(e.cause().find(expected), std::string::npos)
          << "for: " << xml << "\n got: " << e.what();
    }
  }
}

TEST(ListObjectsV2, DeepNestingIsRefusedNotRecursed) {
  std::string xml = "<ListBucketResult>";
  for (int i = 0; i < 100000; ++i) xml += "<a>";
  try {
    parse_list_objects_v2(xml);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
    EXPECT_NE(e.cause().find("nested too deeply"), std::string::npos) << e.what();
  }
}

// ---- error bodies -----------------------------------------------------------------------------

TEST(ErrorSummary, S3ErrorBodies) {
  EXPECT_EQ(error_summary("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                          "<Error>\n  <Code>NoSuchKey</Code>\n"
                          "  <Message>The resource you requested does not exist</Message>\n"
                          "  <Resource>/mybucket/myfoto.jpg</Resource>\n"
                          "  <RequestId>4442587FB7D0A2F9</RequestId>\n</Error>"),
            "NoSuchKey: The resource you requested does not exist");
  EXPECT_EQ(error_summary("<Error><Code>SignatureDoesNotMatch</Code><Message>The request "
                          "signature we calculated does not match &apos;yours&apos; &amp; "
                          "&lt;more&gt;</Message><StringToSign>x</StringToSign></Error>"),
            "SignatureDoesNotMatch: The request signature we calculated does not match 'yours' "
            "& <more>");
  EXPECT_EQ(error_summary("<Error><Code>SlowDown</Code></Error>"), "SlowDown");
}

TEST(ErrorSummary, OtherBodiesAreCutToTheirText) {
  EXPECT_EQ(error_summary(""), "");
  EXPECT_EQ(error_summary("Bad Gateway"), "Bad Gateway");
  std::string html = "<html><body>" + std::string(500, 'x') + "</body></html>";
  // At most 200 bytes, the "..." included (the fuzz target's bound).
  EXPECT_EQ(error_summary(html), std::string(197, 'x') + "...");
  EXPECT_EQ(error_summary("<Error><Code>NoSuchKey</Code><Message>cut"), "NoSuchKey cut");
  // Markup without text is shown as it is rather than as nothing.
  EXPECT_EQ(error_summary("<ListBucketResult/>"), "<ListBucketResult/>");
}

// ---- cleaned excerpts of error pages (HTTP 404/403 used to carry the raw HTML) ----------------

TEST(ErrorExcerpt, NginxsErrorPageBecomesItsText) {
  const std::string nginx =
      "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not "
      "Found</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n";
  EXPECT_EQ(xml::error_excerpt(nginx), "404 Not Found nginx/1.22.1");
}

TEST(ErrorExcerpt, ScriptsStylesCommentsAndEntitiesAreCleanedAway) {
  const std::string page =
      "<!DOCTYPE html>\n<html><head><style>body { color: red }</style>\n"
      "<script>var x = '<p>not text</p>';</script></head>\n<BODY><!-- <p>hidden</p> -->"
      "<h1>Forbidden</h1>\n\n  <p>You   don&#39;t have &amp; permission\tto access "
      "<b>/x.tar</b>.</p><SCRIPT>track()</SCRIPT></BODY></html>";
  EXPECT_EQ(xml::error_excerpt(page), "Forbidden You don't have & permission to access /x.tar.");
}

TEST(ErrorExcerpt, ALongPageIsBoundedAtACharacterBoundary) {
  std::string page = "<html><body><p>";
  for (int i = 0; i < 2000; ++i) page += "caf\xC3\xA9 ";  // "café", two bytes for the é
  page += "</p></body></html>";
  const std::string got = xml::error_excerpt(page);
  EXPECT_LE(got.size(), 203u);
  EXPECT_TRUE(got.ends_with("...")) << got;
  EXPECT_EQ(got.rfind("caf", 0), 0u);
  const std::string text = got.substr(0, got.size() - 3);
  const unsigned char last = static_cast<unsigned char>(text.back());
  EXPECT_TRUE(last < 0x80 || last == 0xA9) << "cut inside a character";
}

TEST(ErrorExcerpt, AzuresErrorGivesCodeAndTheMessagesFirstLine) {
  const std::string azure =
      "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed"
      "</Code><Message>Server failed to authenticate the request. Make sure the value of "
      "Authorization header is formed correctly including the signature.\n"
      "RequestId:5e7c1b2a-0001\nTime:2026-11-24T10:00:00.0000000Z</Message>"
      "<AuthenticationErrorDetail>The MAC signature found in the HTTP request 'c2lnbmF0dXJl' is "
      "not the same as any computed signature.</AuthenticationErrorDetail></Error>";
  EXPECT_EQ(xml::error_excerpt(azure),
            "AuthenticationFailed: Server failed to authenticate the request. Make sure the value "
            "of Authorization header is formed correctly including the signature.");
}

TEST(ErrorExcerpt, AnHttp404CarriesTheStatusAndThePagesTextNotItsMarkup) {
  auto fake = std::make_shared<test::FakeTransport>([](const test::FakeRequest&) {
    return test::FakeResponse{
        .status = 404,
        .body =
            "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center>"
            "<h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>"
            "\r\n</html>\r\n"};
  });
  OpenOptions open;
  open.backend_options.set(http::TransportOption{fake});
  try {
    auto src = open_url("http://fake.test/missing.tar", open);
    while (!src->read().empty()) {
    }
    FAIL() << "a 404 was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    EXPECT_EQ(e.url(), "http://fake.test/missing.tar");
    EXPECT_EQ(e.cause(), "HTTP 404: 404 Not Found nginx") << e.what();
  }
}

// ---- multipart uploads over a scripted transport (no server) ----------------------------------

// An S3 server's answers to a multipart upload; `part_status(number, attempt)` is the status of
// an UploadPart (attempts counted from 1).
test::FakeTransport::Responder multipart_server(std::function<long(int, int)> part_status) {
  auto attempts = std::make_shared<std::map<int, int>>();
  return [part_status, attempts](const test::FakeRequest& r) {
    test::FakeResponse out;
    const std::size_t part_at = r.url.find("partNumber=");
    if (r.method == "POST" && r.url.find("?uploads") != std::string::npos) {
      out.body =
          "<InitiateMultipartUploadResult><UploadId>up-1</UploadId>"
          "</InitiateMultipartUploadResult>";
    } else if (r.method == "PUT" && part_at != std::string::npos) {
      const int number = std::stoi(r.url.substr(part_at + 11));
      out.status = part_status(number, ++(*attempts)[number]);
      if (out.status == 200) out.headers = {{"etag", "\"etag-" + std::to_string(number) + "\""}};
    } else if (r.method == "POST") {
      out.body = "<CompleteMultipartUploadResult/>";
    } else if (r.method == "DELETE") {
      out.status = 204;
    } else {
      out.status = 400;
    }
    return out;
  };
}

class FakeMultipartUpload : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret", 1);
    data_.resize(11 * (std::size_t{1} << 20) + 12345);
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<char>(i * 13 % 251);
  }

  // Writes data_ to s3://bucket/big.tar in parts of 5 MiB (3 parts) over `fake`.
  void upload(std::shared_ptr<test::FakeTransport> fake) {
    SinkOptions options;
    options.multipart_threshold = 1;
    options.part_size = std::uint64_t{5} << 20;
    options.backend_options.set(HttpOptions{.initial_backoff = std::chrono::milliseconds(0)});
    options.backend_options.set(
        S3Options{.endpoint = "http://s3.fake.test:9000", .region = "us-east-1", .profile = ""});
    options.backend_options.set(http::TransportOption{std::move(fake)});
    auto sink = open_sink("s3://bucket/big.tar", options);
    sink->write(std::as_bytes(std::span(data_)));
    sink->close();
  }

  test::ClearedEnv env_{std::span<const char* const>{},
                        {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                         "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"}};
  std::string data_;
};

TEST_F(FakeMultipartUpload, PartsAreSignedSentAgainAfterA5xxAndCompletedInOrder) {
  auto fake = std::make_shared<test::FakeTransport>(multipart_server(
      [](int number, int attempt) { return number == 2 && attempt == 1 ? 500L : 200L; }));
  upload(fake);
  std::vector<test::FakeRequest> sent = fake->requests();
  // Create, parts 1, 2 (twice), 3, Complete; no Abort.
  ASSERT_EQ(sent.size(), 6u);
  std::map<int, std::string> parts;  // by number; a part sent again replaces its first try
  for (const test::FakeRequest& r : sent) {
    EXPECT_NE(r.method, "DELETE");
    EXPECT_EQ(r.url.rfind("http://s3.fake.test:9000/bucket/big.tar?", 0), 0u) << r.url;
    EXPECT_TRUE(r.header("authorization")) << r.url;
    const std::size_t at = r.url.find("partNumber=");
    if (at == std::string::npos) continue;
    // Each part is signed with its own payload's hash.
    EXPECT_EQ(r.header("x-amz-content-sha256"), sha256_hex(r.body)) << r.url;
    parts[std::stoi(r.url.substr(at + 11))] = r.body;
  }
  ASSERT_EQ(parts.size(), 3u);
  std::string joined;
  for (const auto& [number, body] : parts) joined += body;
  EXPECT_EQ(joined.size(), data_.size());
  EXPECT_TRUE(joined == data_);
  EXPECT_EQ(sent.back().method, "POST");
  EXPECT_EQ(sent.back().body,
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;etag-1&quot;"
            "</ETag></Part><Part><PartNumber>2</PartNumber><ETag>&quot;etag-2&quot;</ETag>"
            "</Part><Part><PartNumber>3</PartNumber><ETag>&quot;etag-3&quot;</ETag></Part>"
            "</CompleteMultipartUpload>");
}

TEST_F(FakeMultipartUpload, APartRefusedAbortsTheUploadAndNamesThePart) {
  auto fake = std::make_shared<test::FakeTransport>(
      multipart_server([](int number, int) { return number == 2 ? 403L : 200L; }));
  std::string what;
  EXPECT_EQ(test::error_code([&] { upload(fake); }, &what), ErrorCode::permission_denied);
  EXPECT_NE(what.find("UploadPart 2 of 3"), std::string::npos) << what;
  EXPECT_EQ(what.find("not-a-real-secret"), std::string::npos) << what;
  std::vector<test::FakeRequest> sent = fake->requests();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.back().method, "DELETE");
  EXPECT_NE(sent.back().url.find("uploadId=up-1"), std::string::npos) << sent.back().url;
}

}  // namespace
}  // namespace wds::s3

// ---- Azure Blob Storage helpers ---------------------------------------------------------------

namespace wds::azure {
namespace {

constexpr std::array<const char*, 4> kAzureVariables = {
    "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN"};

TEST(AzureUrls, ContainerAndBlob) {
  Location l = parse_az_url("az://train/shards/a b-000.tar");
  EXPECT_EQ(l.container, "train");
  EXPECT_EQ(l.blob, "shards/a b-000.tar");
  EXPECT_EQ(parse_az_url("az://train").blob, "");
  EXPECT_EQ(parse_az_url("az://train/").blob, "");
  EXPECT_EQ(test::error_code([] { parse_az_url("az:///x.tar"); }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([] { parse_az_url("az://Train_Set/x.tar"); }),
            ErrorCode::invalid_argument);
}

TEST(AzureConnectionStrings, AccountKeyAndEndpointSuffix) {
  Account a = parse_connection_string(
      "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5LWJ5dGVz;"
      "EndpointSuffix=core.chinacloudapi.cn");
  EXPECT_EQ(a.name, "acct");
  EXPECT_EQ(a.key, "a2V5LWJ5dGVz");
  EXPECT_EQ(a.endpoint, "https://acct.blob.core.chinacloudapi.cn");
  a = parse_connection_string("accountname=acct;accountkey=a2V5LWJ5dGVz");  // any case
  EXPECT_EQ(a.endpoint, "https://acct.blob.core.windows.net");
}

TEST(AzureConnectionStrings, BlobEndpointAndSas) {
  Account a = parse_connection_string(
      "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1/;"
      "SharedAccessSignature=sv=2019-12-12&ss=b&sig=abc%3D");
  EXPECT_EQ(a.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
  EXPECT_EQ(a.sas, "sv=2019-12-12&ss=b&sig=abc%3D");  // '=' inside a value kept
  a = parse_connection_string("UseDevelopmentStorage=true");
  EXPECT_EQ(a.name, "devstoreaccount1");
  EXPECT_EQ(a.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
  EXPECT_TRUE(base64_decode(a.key).has_value());
}

TEST(AzureConnectionStrings, AMalformedOneNeverShowsItsSecret) {
  std::string what;
  EXPECT_EQ(
      test::error_code([] { parse_connection_string("AccountName=acct;AccountKeysecretvalue123"); },
                       &what),
      ErrorCode::invalid_argument);
  EXPECT_EQ(what.find("secretvalue123"), std::string::npos) << what;
  EXPECT_NE(what.find("part 2"), std::string::npos) << what;
}

TEST(AzureAccounts, FromTheEnvironmentOrOptions) {
  test::ClearedEnv cleared(kAzureVariables);
  std::string what;
  EXPECT_EQ(test::error_code([] { resolve_account({}); }, &what), ErrorCode::permission_denied);
  EXPECT_NE(what.find("AZURE_STORAGE_CONNECTION_STRING"), std::string::npos) << what;

  ::setenv("AZURE_STORAGE_ACCOUNT", "acct", 1);
  EXPECT_EQ(test::error_code([] { resolve_account({}); }, &what), ErrorCode::permission_denied);
  EXPECT_NE(what.find("AZURE_STORAGE_KEY"), std::string::npos) << what;
  ::setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=x", 1);
  Account a = resolve_account({});
  EXPECT_EQ(a.name, "acct");
  EXPECT_EQ(a.sas, "sv=1&sig=x");
  EXPECT_EQ(a.endpoint, "https://acct.blob.core.windows.net");

  // The connection string comes before the account variables; options before both.
  ::setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=fromcs;AccountKey=a2V5", 1);
  EXPECT_EQ(resolve_account({}).name, "fromcs");
  a = resolve_account({.account = "opt", .key = "b3B0a2V5", .endpoint = "http://h:1/opt/"});
  EXPECT_EQ(a.name, "opt");
  EXPECT_EQ(a.key, "b3B0a2V5");
  EXPECT_EQ(a.endpoint, "http://h:1/opt");

  EXPECT_EQ(
      test::error_code([] { resolve_account({.account = "a", .key = "not base64!"}); }, &what),
      ErrorCode::invalid_argument);
  EXPECT_EQ(what.find("not base64!"), std::string::npos) << what;
  EXPECT_TRUE(resolve_account({.account = "a", .anonymous = true}).key.empty());
}

TEST(AzureBase64, RoundTripsAndRefusesOtherText) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    const std::string encoded = base64_encode(s);
    EXPECT_EQ(encoded.size() % 4, 0u);
    if (!s.empty()) EXPECT_EQ(base64_decode(encoded), s) << encoded;
  }
  EXPECT_EQ(base64_encode("abcd"), "YWJjZA==");
  EXPECT_FALSE(base64_decode("YWJjZA=").has_value());
  EXPECT_FALSE(base64_decode("YW*jZA==").has_value());
}

// Written from the Shared Key description (Azure Storage REST API, "Authorize with Shared Key"):
// the verb, eleven standard headers (Range last), the x-ms- headers sorted, then
// "/account/path" and each query parameter on its own line, names lowercased and sorted, values
// decoded. Against Azurite, the remote tests check that the server agrees.
TEST(AzureSharedKey, StringToSignOfARangedGet) {
  http::Request r;
  r.method = "GET";
  r.url =
      "http://127.0.0.1:10000/devstoreaccount1/c/a%20b.tar?restype=container&Comp=list"
      "&prefix=x%2Fy";
  r.headers = {"x-ms-version: 2021-08-06", "X-Ms-Date:  Tue, 24 Nov 2026 10:00:00 GMT",
               "Range: bytes=5-", "Accept: */*"};
  EXPECT_EQ(string_to_sign(r, "devstoreaccount1"),
            "GET\n\n\n\n\n\n\n\n\n\n\nbytes=5-\n"
            "x-ms-date:Tue, 24 Nov 2026 10:00:00 GMT\nx-ms-version:2021-08-06\n"
            "/devstoreaccount1/devstoreaccount1/c/a%20b.tar\ncomp:list\nprefix:x/y\n"
            "restype:container");
}

TEST(AzureSharedKey, StringToSignOfAPutWithABody) {
  const std::string xml = "<BlockList/>";
  const http::Body body{.length = xml.size(), .memory = xml};
  http::Request r;
  r.method = "PUT";
  r.url = "https://acct.blob.core.windows.net/c/b?comp=blocklist";
  r.headers = {"Content-Type: application/xml", "x-ms-version: v", "x-ms-date: d"};
  r.body = &body;
  EXPECT_EQ(string_to_sign(r, "acct"),
            "PUT\n\n\n12\n\napplication/xml\n\n\n\n\n\n\nx-ms-date:d\nx-ms-version:v\n"
            "/acct/c/b\ncomp:blocklist");
  const http::Body empty{};
  r.body = &empty;  // Content-Length 0 is signed as ""
  EXPECT_EQ(string_to_sign(r, "acct").rfind("PUT\n\n\n\n\napplication/xml\n", 0), 0u);
}

TEST(AzureSharedKey, TheSignatureIsTheHmacOfTheStringToSignWithTheDecodedKey) {
  const std::string key_bytes = "0123456789abcdef0123456789abcdef";
  const Account account{.name = "acct", .key = base64_encode(key_bytes), .endpoint = "https://x"};
  http::Request r;
  r.url = "https://acct.blob.core.windows.net/c/blob.tar";
  sign(r, account, "Tue, 24 Nov 2026 10:00:00 GMT");
  std::string authorization;
  http::Request unsigned_part = r;
  unsigned_part.headers.clear();
  for (const std::string& h : r.headers) {
    if (h.rfind("Authorization: ", 0) == 0) {
      authorization = h.substr(15);
    } else {
      unsigned_part.headers.push_back(h);
    }
  }
  const std::string sts = string_to_sign(unsigned_part, "acct");
  EXPECT_NE(sts.find("x-ms-date:Tue, 24 Nov 2026 10:00:00 GMT\n"), std::string::npos) << sts;
  unsigned char mac[32];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key_bytes.data(), static_cast<int>(key_bytes.size()),
       reinterpret_cast<const unsigned char*>(sts.data()), sts.size(), mac, &n);
  EXPECT_EQ(authorization,
            "SharedKey acct:" + base64_encode(std::string(reinterpret_cast<char*>(mac), n)));
  // With a SAS token (no key) nothing is signed: the token is in the URL.
  http::Request sas;
  sign(sas, Account{.name = "acct", .sas = "sv=1&sig=x"}, "date");
  EXPECT_EQ(sas.headers, std::vector<std::string>{"x-ms-version: " + std::string(kVersion)});
}

TEST(AzureListBlobs, NamesAndTheNextMarker) {
  BlobPage page = parse_list_blobs(
      "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults "
      "ServiceEndpoint=\"http://h/\" ContainerName=\"c\"><Prefix>s/</Prefix><MaxResults>2"
      "</MaxResults><Delimiter>/</Delimiter><Blobs><Blob><Name>s/a&amp;b.tar</Name><Properties>"
      "<Content-Length>10</Content-Length></Properties></Blob><BlobPrefix><Name>s/sub/</Name>"
      "</BlobPrefix><Blob><Name>s/c.tar</Name></Blob></Blobs><NextMarker>2!8!abc</NextMarker>"
      "</EnumerationResults>");
  EXPECT_EQ(page.names, (std::vector<std::string>{"s/a&b.tar", "s/c.tar"}));
  EXPECT_EQ(page.next_marker, "2!8!abc");
  page = parse_list_blobs("<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>");
  EXPECT_TRUE(page.names.empty());
  EXPECT_FALSE(page.next_marker.has_value());
  EXPECT_EQ(test::error_code([] { parse_list_blobs("<Error><Code>X</Code></Error>"); }),
            ErrorCode::corrupt_data);
}

// A multi-block upload over a scripted transport: blocks of block_size with ids of one length,
// committed in order by Put Block List, each request carrying the SAS token and no key.
TEST(AzureBlockBlobs, ALargeBlobGoesUpInBlocksCommittedInOrder) {
  test::ClearedEnv cleared(kAzureVariables);
  auto fake = std::make_shared<test::FakeTransport>(
      [](const test::FakeRequest&) { return test::FakeResponse{.status = 201}; });
  SinkOptions options;
  options.backend_options.set(http::TransportOption{fake});
  options.backend_options.set(AzureOptions{.account = "acct",
                                           .sas_token = "sv=1&sig=s3cr3t",
                                           .endpoint = "https://acct.example",
                                           .single_put_limit = 1000,
                                           .block_size = 1000});
  std::string data(2500, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  auto sink = open_sink("az://c/big.tar", options);
  sink->write(std::as_bytes(std::span(data)));
  sink->close();
  std::vector<test::FakeRequest> sent = fake->requests();
  ASSERT_EQ(sent.size(), 4u);
  auto unpercent = [](std::string s) {
    for (auto [from, to] : {std::pair{"%3D", "="}, {"%2B", "+"}, {"%2F", "/"}}) {
      for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from)) {
        s.replace(at, 3, to);
      }
    }
    return s;
  };
  std::string joined;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sent[i].method, "PUT");
    EXPECT_EQ(sent[i].url.rfind("https://acct.example/c/big.tar?comp=block&blockid=", 0), 0u)
        << sent[i].url;
    EXPECT_TRUE(sent[i].url.ends_with("&sv=1&sig=s3cr3t")) << sent[i].url;
    EXPECT_FALSE(sent[i].header("Authorization").has_value());
    joined += sent[i].body;
    const std::size_t at = sent[i].url.find("blockid=") + 8;
    ids.push_back(unpercent(sent[i].url.substr(at, sent[i].url.find('&', at) - at)));
    EXPECT_TRUE(base64_decode(ids.back()).has_value()) << ids.back();
    EXPECT_EQ(ids.back().size(), ids.front().size());  // Azure wants one length
  }
  EXPECT_TRUE(joined == data);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 3u);
  EXPECT_EQ(sent[3].url, "https://acct.example/c/big.tar?comp=blocklist&sv=1&sig=s3cr3t");
  std::string expected = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
  for (const std::string& id : ids) expected += "<Latest>" + id + "</Latest>";
  EXPECT_EQ(sent[3].body, expected + "</BlockList>");
}

}  // namespace
}  // namespace wds::azure
