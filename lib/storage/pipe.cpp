// The pipe: source: a shell command's standard output, read through a pipe; and the running of
// shell commands, for it and for the pipe: sink.
#include "lib/storage/pipe.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>

#include "lib/storage/backends.hpp"
#include "lib/storage/file.hpp"
#include "lib/storage/upload_sink.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

extern char** environ;

namespace wds {
namespace {

constexpr std::string_view kPrefix = "pipe:";
// How long a command has to exit after SIGTERM before its process group is killed.
constexpr std::chrono::milliseconds kTermGrace{1000};

bool has_pipe_prefix(std::string_view url) {
  return lowercase(url.substr(0, kPrefix.size())) == kPrefix;
}

bool pipe_allowed_by_env() {
  const char* env = std::getenv("WDS_ALLOW_PIPE");
  return env != nullptr && std::string_view(env) == "1";
}

void close_fd(int fd) {
  // Linux releases the descriptor even when close() fails with EINTR, so no retry.
  if (fd >= 0) ::close(fd);
}

// waitpid that survives signals; returns the pid, or -1 with errno set.
pid_t wait_for(pid_t pid, int* status) {
  for (;;) {
    pid_t rc = ::waitpid(pid, status, 0);
    if (rc >= 0 || errno != EINTR) return rc;
  }
}

class PipeSource final : public ByteSource {
 public:
  PipeSource(std::string url, std::size_t buffer_size, const std::string& command)
      : ByteSource(std::move(url)),
        buffer_(std::max<std::size_t>(buffer_size, 1)),
        command_(spawn_shell(this->url(), command, ShellPipe::from_stdout)) {}

  std::span<const std::byte> read() override {
    if (error_) throw *error_;
    if (command_.fd() < 0) return {};
    for (;;) {
      ssize_t n = ::read(command_.fd(), buffer_.data(), buffer_.size());
      if (n > 0) return buffer_.span().first(static_cast<std::size_t>(n));
      if (n == 0) {
        finish();
        return {};
      }
      if (errno != EINTR) throw_errno(url(), "read from the command", errno);
    }
  }

 private:
  // The output ended: reap the command and fail if it did.
  void finish() {
    if (auto failure = command_.finish()) {
      error_.emplace(ErrorCode::unavailable, url(), "", std::move(*failure));
    }
    if (error_) throw *error_;
  }

  Bytes buffer_;
  ShellCommand command_;        // stopped, if it still runs, when the source is destroyed
  std::optional<Error> error_;  // the command's failure, thrown by every read() after the end
};

}  // namespace

std::unique_ptr<ByteSource> open_pipe_source(const std::string& url, const OpenOptions& options) {
  std::string command = pipe_command(url, options.allow_pipe, "OpenOptions::allow_pipe");
  if (options.offset != 0) {
    throw Error(
        ErrorCode::invalid_argument, url, "",
        "a pipe cannot start at byte " + std::to_string(options.offset) + " (it cannot seek)");
  }
  return std::make_unique<PipeSource>(url, options.buffer_size, command);
}

std::string pipe_command(const std::string& url, bool allowed, std::string_view option) {
  if (!has_pipe_prefix(url)) {
    throw Error::invalid_argument(url, "", "not a pipe: URL");
  }
  std::string command = url.substr(kPrefix.size());
  if (command.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw Error::invalid_argument(url, "", "pipe: URL names no command");
  }
  if (!allowed && !pipe_allowed_by_env()) {
    throw Error::permission_denied(url, "",
                                   "pipe: URLs run shell commands; allow them with " +
                                       std::string(option) + " or WDS_ALLOW_PIPE=1");
  }
  return command;
}

ShellCommand spawn_shell(const std::string& url, const std::string& command, ShellPipe pipe) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno(url, "pipe", errno);
  // Keep both ends off 0-2, so that the child's dup2 onto stdin or stdout never meets one of
  // them (possible when the parent runs with a standard descriptor closed).
  for (int& fd : fds) {
    if (fd > STDERR_FILENO) continue;
    int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    int err = errno;
    if (moved < 0) {
      close_fd(fds[0]);
      close_fd(fds[1]);
      throw_errno(url, "pipe", err);
    }
    close_fd(fd);
    fd = moved;
  }
  const bool reading = pipe == ShellPipe::from_stdout;
  const int ours = reading ? fds[0] : fds[1];
  const int theirs = reading ? fds[1] : fds[0];

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  // Only the one standard stream is the pipe's other end; every other descriptor of ours is
  // close-on-exec, so the child holds not our end and no other command's pipe (which would keep
  // it from ending).
  if (reading) {
    posix_spawn_file_actions_adddup2(&actions, theirs, STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  } else {
    posix_spawn_file_actions_adddup2(&actions, theirs, STDIN_FILENO);
  }
  // Runtimes often ignore SIGPIPE (Python does) or block signals in loader threads, and
  // children inherit both: reset them so that the command dies when the reader goes away and
  // SIGTERM stops it.
  sigset_t defaults, mask;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGXFSZ);
  sigaddset(&defaults, SIGTERM);
  sigemptyset(&mask);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &mask);
  // A process group of its own, so that stopping the command stops all of "curl ... | zcat" or
  // "gzip | aws s3 cp - ...".
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);

  std::string arg0 = "sh", arg1 = "-c", arg2 = command;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = -1;
  int err = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  // Else the read end never sees the end of the output (or the command that of its input).
  close_fd(theirs);
  if (err != 0) {
    close_fd(ours);
    throw_errno(url, "start /bin/sh", err);
  }
  return ShellCommand(ours, pid, pipe);
}

void ShellCommand::close_pipe() noexcept {
  close_fd(fd_);
  fd_ = -1;
}

std::optional<int> ShellCommand::wait() {
  close_pipe();
  if (pid_ <= 0) {
    errno = ECHILD;
    return std::nullopt;
  }
  int status = 0;
  pid_t rc = wait_for(pid_, &status);
  int err = errno;
  pid_ = -1;
  if (rc < 0) {
    errno = err;
    return std::nullopt;
  }
  return status;
}

std::optional<std::string> ShellCommand::finish() {
  std::optional<int> status = wait();
  if (!status) {
    int err = errno;
    // ECHILD: SIGCHLD is set to SIG_IGN, or someone else reaped the child. Without the status
    // a failure cannot be told from success, so it is not taken for one.
    return std::string("cannot learn the command's exit status (waitpid: ") + std::strerror(err) +
           "; is SIGCHLD ignored?)";
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) return describe_exit_status(*status);
  return std::nullopt;
}

void ShellCommand::stop() noexcept {
  // A reader closes its end first, so that the command also meets a pipe without a reader. A
  // writer keeps it open until the command is stopped: the end of its input would have it take
  // what it was given for the whole.
  if (pipe_ == ShellPipe::from_stdout || pid_ <= 0) close_pipe();
  if (pid_ <= 0) return;
  // The child is not reaped yet, so its pid, which is also the group's id, cannot be reused.
  ::kill(-pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + kTermGrace;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    // WNOWAIT: learn that the shell exited without reaping it, so that the group id stays
    // valid for the sweep below.
    siginfo_t info{};
    int rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc != 0 && errno == EINTR) continue;
    if (rc != 0) {  // ECHILD: already reaped elsewhere; nothing left that is ours
      close_pipe();
      pid_ = -1;
      return;
    }
    if (info.si_pid == pid_ || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  close_pipe();
  // Kills the shell if it outstayed its grace, and whatever it started that still lingers.
  ::kill(-pid_, SIGKILL);
  int status = 0;
  wait_for(pid_, &status);
  pid_ = -1;
}

std::string describe_exit_status(int status) {
  if (WIFSIGNALED(status)) {
    return "command was killed by signal " + std::to_string(WTERMSIG(status));
  }
  int code = WEXITSTATUS(status);
  std::string out = "command exited with status " + std::to_string(code);
  // The shell's conventions, so that a typo in the command is recognisable at a glance.
  if (code == 127) out += " (command not found)";
  if (code == 126) out += " (command not executable)";
  return out;
}

namespace {

// ---- the pipe: sink ---------------------------------------------------------------------------

// write(2) to a pipe whose reader may be gone, without the SIGPIPE that would end the process:
// the signal is blocked in this thread for the call, and one it raised is taken back.
ssize_t write_no_sigpipe(int fd, const void* data, std::size_t n) {
  sigset_t pipe_only, old, pending;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigemptyset(&pending);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  ::sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ssize_t rc = ::write(fd, data, n);
  int err = errno;
  // Also after a partial write: the reader went away during it.
  sigemptyset(&pending);
  ::sigpending(&pending);
  if (!was_pending && sigismember(&pending, SIGPIPE) == 1) {
    timespec zero{};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return rc;
}

class PipeSink final : public ByteSink {
 public:
  PipeSink(std::string url, const std::string& command)
      : ByteSink(std::move(url)),
        command_(spawn_shell(this->url(), command, ShellPipe::to_stdin)) {}

  void write(std::span<const std::byte> bytes) override {
    if (error_) throw *error_;
    if (command_.fd() < 0) throw Error::invalid_argument(url(), "", "write after close");
    while (!bytes.empty()) {
      ssize_t n = write_no_sigpipe(command_.fd(), bytes.data(), bytes.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        if (err != EPIPE) throw_errno(url(), "write to the command", err);
        // The command stopped reading: it has exited, or is about to.
        std::optional<int> status = command_.wait();
        std::string why = status ? describe_exit_status(*status) : std::string("status unknown");
        error_.emplace(ErrorCode::unavailable, url(), "",
                       "the command stopped reading its input (" + why + ")");
        throw *error_;
      }
      bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
  }

  void close() override {
    if (error_) throw *error_;
    if (command_.fd() < 0) return;
    // Closing the pipe ends the command's input.
    if (auto failure = command_.finish()) {
      throw Error::unavailable(url(), "", std::move(*failure));
    }
  }

 private:
  // Destroyed without close(), it stops the command before its input ends, so that the command
  // does not take what it was given for the whole.
  ShellCommand command_;
  std::optional<Error> error_;  // the command's early exit, thrown again by write and close
};

}  // namespace

std::unique_ptr<ByteSink> open_pipe_sink(const std::string& url, const SinkOptions& options) {
  std::string command = pipe_command(url, options.allow_pipe, "SinkOptions::allow_pipe");
  return std::make_unique<PipeSink>(url, command);
}

Backend pipe_backend() {
  return Backend{
      .schemes = {"pipe"},
      .open = open_pipe_source,
      .open_sink = open_pipe_sink,
  };
}

}  // namespace wds
