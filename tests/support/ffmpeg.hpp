// The base of test fixtures that make their media at run time with Debian's `ffmpeg` tool (the
// audio and video codecs' tests): such a test is skipped when the tool is missing, and fails
// under CI (CI=true), where it must be installed.
//
//   class VideoFfmpeg : public test::FfmpegTest { ... };
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/support/fixtures.hpp"

namespace wds::test {

inline bool have_ffmpeg() {
  static const bool have = run_command("ffmpeg -version >/dev/null 2>&1").status == 0;
  return have;
}

class FfmpegTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (have_ffmpeg()) return;
    if (std::getenv("CI") && std::string(std::getenv("CI")) == "true") {
      FAIL() << "ffmpeg is missing (needed under CI)";
    }
    GTEST_SKIP() << "ffmpeg is missing";
  }
};

}  // namespace wds::test
