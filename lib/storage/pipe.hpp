// pipe: URLs as ByteSources: the standard output of a shell command ("pipe:curl -s URL"); and
// the shell commands themselves, which the pipe: sink (lib/upload_sink) runs too.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "wds/source.hpp"

namespace wds {

// Runs the command after "pipe:" through /bin/sh -c, with stdin from /dev/null and stderr
// inherited, and streams its stdout in reads of up to options.buffer_size bytes.
//
// Refused (permission_denied) unless options.allow_pipe or WDS_ALLOW_PIPE=1, since the URL is a
// shell command. options.offset must be 0: a pipe cannot seek (invalid_argument).
//
// At the end of the output read() reaps the command and throws an unavailable Error if it exited
// with a non-zero status or was killed by a signal, so a failed command never passes for a short
// shard; later calls throw the same Error. Destroying the source while the command still runs
// closes the pipe and stops the command's process group (SIGTERM, SIGKILL after about a second)
// and reaps it.
std::unique_ptr<ByteSource> open_pipe_source(const std::string& url, const OpenOptions& options);

// The command of a pipe: URL (what follows "pipe:", matched in any case). invalid_argument if
// `url` is not a pipe: URL or names no command; permission_denied unless `allowed` or
// WDS_ALLOW_PIPE=1, with `option` naming the setting that allows it ("OpenOptions::allow_pipe").
std::string pipe_command(const std::string& url, bool allowed, std::string_view option);

// Which of the command's standard streams the pipe is joined to.
enum class ShellPipe {
  from_stdout,  // we read its stdout; its stdin is /dev/null
  to_stdin,     // we write its stdin; its stdout is inherited
};

// A shell command started by spawn_shell: its process group and our end of the pipe. Destroying
// it while the command runs stops it (see stop()).
class ShellCommand {
 public:
  ~ShellCommand() { stop(); }
  ShellCommand(const ShellCommand&) = delete;
  ShellCommand& operator=(const ShellCommand&) = delete;

  // Our end of the pipe; -1 once closed.
  int fd() const noexcept { return fd_; }
  // Closes our end of the pipe.
  void close_pipe() noexcept;
  // Closes our end of the pipe and reaps the command: its wait status, or nullopt (errno set)
  // when that cannot be learned (it was reaped already, or elsewhere).
  std::optional<int> wait();
  // wait(), as a failure: nullopt when the command exited with status 0, else why not
  // ("command exited with status 1", or that its exit status cannot be learned).
  std::optional<std::string> finish();
  // Stops a command that still runs (the other side stopped early) and reaps it: SIGTERM to its
  // process group, then SIGKILL after about a second. Does nothing once it is reaped.
  void stop() noexcept;

 private:
  friend ShellCommand spawn_shell(const std::string&, const std::string&, ShellPipe);
  ShellCommand(int fd, pid_t pid, ShellPipe pipe) : fd_(fd), pid_(pid), pipe_(pipe) {}

  int fd_ = -1;
  pid_t pid_ = -1;
  ShellPipe pipe_;
};

// Runs `command` through /bin/sh -c in a process group of its own, with default signal
// dispositions and no blocked signals, joined to us by a pipe as `pipe` says; stderr is
// inherited. Errors (unavailable and the like, from errno) name `url`.
ShellCommand spawn_shell(const std::string& url, const std::string& command, ShellPipe pipe);

// A wait status in words: "command exited with status 127 (command not found)", "command was
// killed by signal 9".
std::string describe_exit_status(int status);

}  // namespace wds
