// Runs the wds tool as a user does, as a separate process, for the tool tests.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/support/fixtures.hpp"

namespace wds::test {

struct ToolResult {
  int exit_code;
  std::string out;
  std::string err;
};

// The tool ctest names in WDS_TOOL, or empty (then the tests skip).
inline std::string tool_path() {
  const char* tool = std::getenv("WDS_TOOL");
  return tool ? tool : "";
}

// Runs `ENV TOOL ARGS` through the shell (ARGS and ENV are shell text), in `cwd` if given, with
// stdin from `stdin_file` if given; output is collected through files in `scratch`.
inline ToolResult run_tool(const std::string& tool, const std::string& args, const TempDir& scratch,
                           const std::string& cwd = "", const std::string& stdin_file = "",
                           const std::string& env = "") {
  std::string out = scratch.file("stdout"), err = scratch.file("stderr");
  std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + env + " '" + tool + "' " + args +
                    " >'" + out + "' 2>'" + err + "'";
  if (!stdin_file.empty()) cmd += " <'" + stdin_file + "'";
  int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

}  // namespace wds::test
