// wds/remote.hpp: options for shards on HTTP(S) servers, S3-compatible object stores, Azure
// Blob Storage and the Hugging Face Hub.
//
//   wds::OpenOptions open;
//   open.backend_options.set(wds::HttpOptions{.headers = {"Authorization: Bearer " + token}});
//   auto src = wds::open_url("https://data.example/train-000000.tar", open);
//
// Each options type is set in OpenOptions::backend_options (and SinkOptions::backend_options
// for uploads); a type not set has its defaults.
//
// http:// and https:// stream through libcurl: a transfer thread fills a bounded buffer
// (buffer_bytes) that the tar reader drains, so the first sample arrives before the shard is
// downloaded and memory stays bounded; from a host where one GET per shard does, the reader's
// own read() moves curl on instead (docs/storage.md). Connections are kept alive and reused across shards.
// A transfer that breaks (reset, stall, truncated body, 5xx, 429) is resumed with a Range
// request from the exact byte where it stopped, after an exponential backoff, up to max_retries
// times; a server that ignores Range has the bytes already delivered skipped. A 429 or 503 with
// Retry-After waits as long as it says (up to max_retry_after). A transfer below the low-speed
// limit is ended and retried, and counts as a failed attempt even though bytes trickled in.
// Other 4xx answers, and redirect loops (more than 5 redirects), fail at once, not retried, with
// the status and the start of the body. When retries run out the error is `unavailable`, which
// the stage's handler sees.
// Each backoff has jitter (a wait between half and all of it), and a 429 or 503 SlowDown counts
// as throttled in the metrics: one policy for every backend (docs/storage.md).
//
// s3://bucket/key is signed with AWS Signature Version 4. Credentials: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, else the shared credentials file (AWS_PROFILE);
// region: AWS_REGION / AWS_DEFAULT_REGION / the config file, else us-east-1; endpoint:
// S3Options::endpoint, else AWS_ENDPOINT_URL, else AWS (virtual-hosted style); any other
// endpoint is addressed path-style. Secrets never appear in messages.
//
// Thread safety: options are values, shared by pointer once set, never changed after.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace wds {

struct HttpOptions {
  // Read-ahead bound per open shard read by a transfer thread (a shard from a host where one GET
  // per shard does is read on its reader's thread, and holds what one step of curl brings:
  // docs/storage.md).
  std::size_t buffer_bytes = std::size_t{4} << 20;
  std::chrono::milliseconds connect_timeout{10000};
  // The low-speed limit: a transfer slower than low_speed_bytes per second for low_speed_time
  // is ended and retried, and an attempt whose bytes came slower than that on average counts
  // as failed (so a trickling server ends in an error after max_retries, not never). 0: none.
  long low_speed_bytes = 1024;
  std::chrono::seconds low_speed_time{30};
  int max_retries = 8;
  std::chrono::milliseconds initial_backoff{200};  // doubled after each failed attempt
  std::chrono::milliseconds max_backoff{10000};
  // A 429 or 503 with Retry-After (seconds or an HTTP date) waits at least that long before
  // the retry, at most this long.
  std::chrono::milliseconds max_retry_after{60000};
  std::vector<std::string> headers;  // extra request headers, "Name: value"
  bool verify_tls = true;
  std::string ca_file;  // PEM file of CAs to trust instead of the system's (private CAs)
};

struct S3Options {
  std::string endpoint;  // e.g. "http://127.0.0.1:9000"; empty: AWS_ENDPOINT_URL, else AWS
  std::string region;    // empty: from the environment or config, else us-east-1
  std::string profile;   // empty: AWS_PROFILE, else "default"
  // Requests are sent unsigned and no credentials are looked up, for public buckets (as the AWS
  // CLI's --no-sign-request). Also set by AWS_NO_SIGN_REQUEST=YES (or true, 1).
  bool anonymous = false;
};

// az://container/blob, Azure Blob Storage:
//   open.backend_options.set(wds::AzureOptions{.connection_string = "..."});
// The account, its endpoint and credentials come from the first of: these options (when
// connection_string or account is set), AZURE_STORAGE_CONNECTION_STRING, or
// AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN (the names Azure's
// own tools read). A connection string holds AccountName, AccountKey, SharedAccessSignature,
// BlobEndpoint or DefaultEndpointsProtocol + EndpointSuffix, or UseDevelopmentStorage=true
// (Azurite on 127.0.0.1:10000). Requests are signed with the account key (Shared Key), or carry
// the SAS token; keys and tokens never appear in messages. Listing, Range reads and retries as
// for S3; uploads are block blobs: one Put Blob up to single_put_limit bytes, else Put Block of
// block_size bytes each and Put Block List.
struct AzureOptions {
  std::string connection_string;
  std::string account;    // the storage account's name
  std::string key;        // the account key, base64 as Azure shows it
  std::string sas_token;  // "sv=...&sig=..." (a leading '?' is dropped)
  // The blob service's URL, e.g. "http://127.0.0.1:10000/devstoreaccount1"; empty: from the
  // connection string, else https://<account>.blob.core.windows.net.
  std::string endpoint;
  bool anonymous = false;  // unsigned requests, for public containers
  int max_results = 5000;  // blobs per List Blobs page (Azure's maximum)
  std::uint64_t single_put_limit = std::uint64_t{64} << 20;
  std::uint64_t block_size = std::uint64_t{16} << 20;  // grown to stay within 50000 blocks
};

// gs://bucket/object, Google Cloud Storage:
//   open.backend_options.set(wds::GcsOptions{.credentials_file = "/secrets/sa.json"});
// Credentials, the first that applies; the environment and key files are read by open_url,
// resolve_urls and open_sink each time they are given a gs:// URL (do not setenv concurrently):
//   1. anonymous: unsigned requests to the JSON API, for public objects.
//   2. HMAC keys: hmac_key/hmac_secret, else GCS_KEY/GCS_SECRET (MosaicML Streaming), else
//      GS_ACCESS_KEY_ID/GS_SECRET_ACCESS_KEY (boto): the XML API, signed with SigV4 (region
//      "auto"), as s3:// is.
//   3. STORAGE_EMULATOR_HOST (fake-gcs-server, Google's emulators): the JSON API at that host,
//      no credentials, as Google's own clients do.
//   4. A JSON key file: credentials_file, else GOOGLE_APPLICATION_CREDENTIALS, else gcloud's
//      application_default_credentials.json in $CLOUDSDK_CONFIG or ~/.config/gcloud (when it
//      exists): a service account's key (a JWT signed RS256 exchanged at its token_uri) or
//      gcloud's "authorized_user" (a refresh token): an OAuth2 access token, cached per process
//      and refreshed before it expires, sent as "Authorization: Bearer" to the JSON API.
//   5. None of these: unsigned requests to the JSON API (public objects).
// Reads, listings (a trailing '/' or globs) and Range resume and retries are as for s3://.
// Uploads: with HMAC keys as for s3:// (one PUT, or multipart), else one JSON API media upload.
// Errors name the URL and the credential used; keys, secrets and tokens never appear in them.
struct GcsOptions {
  // e.g. "http://127.0.0.1:4443"; empty: STORAGE_EMULATOR_HOST, else
  // https://storage.googleapis.com (which serves both the XML and the JSON API).
  std::string endpoint{};
  // "{}" lets designated initializers leave these out without -Wmissing-field-initializers.
  std::string hmac_key{}, hmac_secret{};  // an HMAC key's access id and secret
  std::string credentials_file{};         // a service account's or gcloud's JSON key file
  bool anonymous = false;
};

// hf://datasets/ORG/NAME[@REVISION]/PATH, files of the Hugging Face Hub (hf://ORG/NAME/... for
// model repositories, hf://spaces/ORG/NAME/... for spaces; a revision holding '/' is written
// percent-encoded, "@refs%2Fconvert%2Fparquet"):
//   open.backend_options.set(wds::HfOptions{.revision = "v1.0"});
// Each field left empty is read from the environment when a URL is opened or listed, with the
// names the Hub's own tools read: the token from HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the
// token file (HF_TOKEN_PATH, else $HF_HOME/token, HF_HOME defaulting to
// $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface); none: anonymous. The endpoint from
// HF_ENDPOINT (mirrors), else https://huggingface.co. The token is sent as a bearer token to the
// endpoint only, never after a redirect to another host (the Hub's CDN), and never appears in
// messages. A branch or tag is resolved to its commit once per process, so every shard a process
// reads comes from one commit even if the branch moves; listings name files at that commit. With
// CacheOptions::dir set, a job's processes share listings at a commit and (given a job id:
// WDS_JOB_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, ...) the branch's commit through that directory.
struct HfOptions {
  std::string token;
  std::string endpoint;
  std::string revision;    // for URLs that name none; empty: "main"
  bool anonymous = false;  // no token, even when the environment has one
  // Resolve a branch or tag to its commit (one API request per repository and revision in a
  // process); false reads at the branch as it is at each request (for mirrors without the API).
  bool pin_revision = true;
};

// A local cache of remote shards (set in OpenOptions::backend_options): a shard is written to dir
// while it streams (not downloaded first), renamed into place only when complete and verified by
// length, and read from disk on later opens. When max_bytes is set, the least recently used
// shards are evicted. File names are "<basename>.<hash of the whole URL>", with anything but
// letters, digits, '.', '_' and '-' replaced, so no URL can escape dir or collide with
// another. Processes may share one dir: each writes its own temporary file; renames are atomic.
// Each entry has a checksum file "<entry>.sum" (a checksum per 64 KiB block); a cached read hands
// out only verified blocks, and a damaged or truncated entry is deleted and the shard read from
// the server again, with a warning naming the cache file (OpenOptions::on_retry, attempt 0). A
// dir that cannot be written is warned about once and shards are read without the cache.
struct CacheOptions {
  std::string dir;
  std::uint64_t max_bytes = 0;  // 0: no limit
};

}  // namespace wds
