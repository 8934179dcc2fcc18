// The AWS shared credentials and config files (INI, as ~/.aws/credentials and ~/.aws/config),
// read by s3::resolve_credentials and s3::resolve_region when s3:// URLs are opened.
//
// Input: the file's text, written to a temporary file that AWS_SHARED_CREDENTIALS_FILE and
// AWS_CONFIG_FILE name. Checks: no crash, UB or leak, errors are wds::Error; credentials found
// have both keys; a region is never empty.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_common.hpp"
#include "lib/storage/s3.hpp"

namespace {

std::string g_path;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  g_path = std::string(tmp && *tmp ? tmp : "/tmp") + "/wds-fuzz-aws-" + std::to_string(::getpid()) +
           ".ini";
  for (const char* var : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                          "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"}) {
    unsetenv(var);
  }
  setenv("AWS_SHARED_CREDENTIALS_FILE", g_path.c_str(), 1);
  setenv("AWS_CONFIG_FILE", g_path.c_str(), 1);
  // The file goes when the process ends normally; after a crash it is left in TMPDIR.
  std::atexit([] { std::remove(g_path.c_str()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(g_path.c_str(), "wb");
  if (!f) wds_fuzz::fail("cannot write the temporary credentials file");
  if (size && std::fwrite(data, 1, size, f) != size) wds_fuzz::fail("short write");
  std::fclose(f);
  for (const char* profile : {"", "dev"}) {
    try {
      wds::s3::Credentials c = wds::s3::resolve_credentials(profile);
      wds_fuzz::check(!c.access_key_id.empty() && !c.secret_access_key.empty(),
                      "credentials have both keys");
    } catch (const wds::Error&) {
    }
    wds_fuzz::check(!wds::s3::resolve_region(profile).empty(), "a region is not empty");
  }
  return 0;
}
