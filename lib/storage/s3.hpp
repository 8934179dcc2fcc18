// S3 helpers (internal): AWS Signature Version 4, credential and region lookup, s3:// URLs, and
// the XML of ListObjectsV2 and error responses.
//
//   s3::Request r{.method = "GET", .host = "bucket.s3.amazonaws.com", .path = "/a b.tar"};
//   r.headers = {{"range", "bytes=0-"}};
//   auto headers = s3::sign(r, s3::resolve_credentials(), s3::resolve_region(), "s3",
//                           s3::amz_date_now());
//   std::string url = s3::request_url(r, "https");  // send `headers` with it, unchanged
//
// Signing follows the S3 flavour of SigV4: the path is percent-encoded once (never twice), is
// not normalised ("a//b/../c" is signed as written), and the payload hash is sent and signed as
// x-amz-content-sha256. `host` must be exactly the Host header the HTTP client sends.
//
// Thread safety: everything here is a pure function, except that resolve_credentials and
// resolve_region read the environment (std::getenv) and files; do not setenv concurrently.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wds::s3 {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct Credentials {
  std::string access_key_id, secret_access_key, session_token;
};

// AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the shared credentials
// file (AWS_SHARED_CREDENTIALS_FILE, else $HOME/.aws/credentials), section [profile] where
// profile is the argument, else AWS_PROFILE, else "default" (keys aws_access_key_id,
// aws_secret_access_key, aws_session_token). Nothing found: wds::Error permission_denied saying
// where it looked and how to provide credentials. Only one of the two env variables set, or only
// one of the two keys in the profile: invalid_argument. Messages never contain a secret.
Credentials resolve_credentials(const std::string& profile = "");

// AWS_REGION, else AWS_DEFAULT_REGION, else "region" in the profile's section ([default] or
// [profile NAME]) of AWS_CONFIG_FILE (else $HOME/.aws/config), else "us-east-1".
std::string resolve_region(const std::string& profile = "");

// "s3://bucket/key" -> {bucket, key}. The key is taken as written (not percent-decoded) and may be
// empty ("s3://bucket", "s3://bucket/"), for listing. invalid_argument if malformed.
struct Location {
  std::string bucket, key;
};
Location parse_s3_url(std::string_view url);
// The same for "<scheme>://bucket/key" (gs:// is parsed so too); `credentials_hint` says where
// credentials go instead of the URL.
Location parse_bucket_url(std::string_view url, std::string_view scheme,
                          std::string_view credentials_hint);

// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - _ . ~ are kept, every other byte is
// %XX (uppercase hex); '/' is kept when encode_slash is false (paths).
std::string uri_encode(std::string_view s, bool encode_slash);

// The n bytes at p in lowercase hex, two digits a byte.
std::string to_hex(const unsigned char* p, std::size_t n);

// Lowercase hex SHA-256 of data.
std::string sha256_hex(std::string_view data);

struct Request {
  std::string method;  // "GET"
  std::string host;    // "bucket.s3.amazonaws.com", "127.0.0.1:9000"
  std::string path;    // raw absolute path, "/bucket/my key.tar"
  // "{}" lets designated initializers leave these out without -Wmissing-field-initializers.
  std::vector<std::pair<std::string, std::string>> query{};  // raw names and values
  HeaderList headers{};  // extra headers to send and sign, e.g. {"range", "bytes=0-9"}
  // The hex SHA-256 of the body; this default is that of the empty body.
  std::string payload_sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
};

// The canonical request of `r` with the given (name, value) headers signed. Names are lowercased,
// values trimmed (inner runs of spaces collapsed) and the list sorted by name here too, so any
// order works; a name given twice is signed once with its values joined by ','.
std::string canonical_request(const Request& r, const HeaderList& signed_headers_lowercase_sorted);

// "AWS4-HMAC-SHA256\n<amz_date>\n<scope>\n<hash>", scope being
// "20130524/us-east-1/s3/aws4_request".
std::string string_to_sign(std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request_hash);

// The headers to send, all names lowercase, in this order: host, x-amz-date,
// x-amz-content-sha256, x-amz-security-token (with a session token), the request's own headers,
// authorization ("AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request,
// SignedHeaders=host;..., Signature=<hex>"). All of them but authorization are signed.
// invalid_argument for a malformed amz_date, missing keys, a header sign() sets itself given in
// r.headers, or a header name or value that cannot be sent (control characters).
HeaderList sign(const Request& r, const Credentials& c, const std::string& region,
                const std::string& service, std::string_view amz_date /* "20130524T000000Z" */);

// scheme + "://" + host + encoded path + ("?" + encoded sorted query), encoded exactly as signed.
// scheme is "http" or "https" (else invalid_argument).
std::string request_url(const Request& r, std::string_view scheme);

// The current UTC time as SigV4 wants it: "YYYYMMDDTHHMMSSZ".
std::string amz_date_now();

// A ListObjectsV2 response body -> the keys of its <Contents> (entities &amp; &lt; &gt; &quot;
// &apos; &#NN; &#xHH; decoded; percent-decoded too when <EncodingType>url</EncodingType>), and
// the NextContinuationToken when <IsTruncated>true</IsTruncated>. corrupt_data if the body is not
// well-formed XML with a ListBucketResult root, or is truncated without a token.
struct ListPage {
  std::vector<std::string> keys;
  std::optional<std::string> next_token;
};
ListPage parse_list_objects_v2(std::string_view xml);

// Where requests for `bucket` go: `endpoint` (e.g. "http://127.0.0.1:9000", any base path
// kept), else AWS_ENDPOINT_URL, addressed path-style (host = the endpoint's, bucket_path =
// "<base>/bucket"); with neither, AWS in `region`, virtual-hosted style (host =
// "bucket.s3.<region>.amazonaws.com", bucket_path = "") unless the bucket name has a dot, which
// AWS's certificate does not cover (then path-style on "s3.<region>.amazonaws.com"). A default
// port (":80" for http, ":443" for https) is left out of host, as curl leaves it out of the
// Host header. invalid_argument (naming the endpoint) if it is not a URL.
struct Endpoint {
  std::string scheme;       // "http" or "https"
  std::string host;         // exactly the Host header to sign
  std::string bucket_path;  // prefix of every object path: "/bucket", or "" virtual-hosted
};
Endpoint resolve_endpoint(const std::string& bucket, const std::string& endpoint,
                          const std::string& region);

// The <UploadId> of a CreateMultipartUpload response body (<InitiateMultipartUploadResult>).
// corrupt_data if the body is not one or has no upload id.
std::string parse_upload_id(std::string_view xml);

// True when `body` is an S3 <Error> document. CompleteMultipartUpload can answer 200 and still
// fail, with an error document as its body.
bool is_error_document(std::string_view body);

// "Code: Message" of an S3 error body (<Error><Code>..</Code><Message>..</Message></Error>), or
// a short cleaned excerpt of the body when it is not one (xml::error_excerpt).
std::string error_summary(std::string_view body);

}  // namespace wds::s3
