// The pipe: source: a shell command's output, its exit status, and stopping it early.
#include "lib/storage/pipe.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"
#include "wds/tar_reader.hpp"

namespace wds {
namespace {

OpenOptions allowed(std::size_t buffer_size = std::size_t{1} << 20) {
  OpenOptions o;
  o.allow_pipe = true;
  o.buffer_size = buffer_size;
  return o;
}

std::unique_ptr<ByteSource> open_allowed(const std::string& url) {
  return open_pipe_source(url, allowed());
}

// Everything the source delivers; `error` receives the Error that ended it, if one did.
std::string drain(ByteSource& src, std::optional<Error>* error = nullptr) {
  std::string out;
  try {
    for (auto chunk = src.read(); !chunk.empty(); chunk = src.read()) {
      out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
    }
  } catch (const Error& e) {
    if (error == nullptr) throw;
    error->emplace(e);
  }
  return out;
}

// The Error with which a command's output ends, after checking the output.
Error failure_of(const std::string& url, const std::string& expected_output) {
  auto src = open_allowed(url);
  std::optional<Error> error;
  EXPECT_EQ(drain(*src, &error), expected_output);
  if (!error) {
    ADD_FAILURE() << url << " ended without an error";
    return Error::invalid_argument(url, "", "no error");
  }
  return *error;
}

// True when this process has no child left, zombie or running.
bool no_children() {
  int status = 0;
  return ::waitpid(-1, &status, WNOHANG) == -1 && errno == ECHILD;
}

// True when `pid` no longer runs (gone, or a zombie waiting for an init that does not reap).
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  std::size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

bool eventually_gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Reads the first line the command prints.
std::string read_line(ByteSource& src) {
  std::string out;
  while (out.find('\n') == std::string::npos) {
    auto chunk = src.read();
    if (chunk.empty()) break;
    out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
  }
  return out.substr(0, out.find('\n'));
}

// Sets or unsets an environment variable for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(PipeSource, ReadsTheCommandsOutputExactly) {
  auto src = open_allowed("pipe:printf abc");
  EXPECT_EQ(src->url(), "pipe:printf abc");
  EXPECT_EQ(src->local_path(), "");
  EXPECT_FALSE(src->size().has_value());
  EXPECT_EQ(drain(*src), "abc");
  EXPECT_TRUE(src->read().empty());  // stays at the end
  EXPECT_TRUE(src->read().empty());
  EXPECT_TRUE(no_children());
}

TEST(PipeSource, EmptyOutputIsAnEmptyStream) {
  auto src = open_allowed("pipe:true");
  EXPECT_TRUE(src->read().empty());
  EXPECT_TRUE(src->read().empty());
}

TEST(PipeSource, SchemeMatchesWithoutRegardToCase) {
  EXPECT_EQ(drain(*open_allowed("PIPE:printf 'a b'")), "a b");
}

TEST(PipeSource, StreamsLargeOutputInChunksOfTheBufferSize) {
  auto src = open_pipe_source("pipe:head -c 5000000 /dev/zero", allowed(4096));
  std::size_t total = 0, chunks = 0;
  bool all_zero = true;
  for (auto chunk = src->read(); !chunk.empty(); chunk = src->read()) {
    EXPECT_LE(chunk.size(), 4096u);
    for (std::byte b : chunk) all_zero &= b == std::byte{0};
    total += chunk.size();
    ++chunks;
  }
  EXPECT_EQ(total, 5000000u);
  EXPECT_GE(chunks, 5000000u / 4096);
  EXPECT_TRUE(all_zero);
}

TEST(PipeSource, StdinIsDevNull) {
  // cat would wait forever on an inherited terminal or pipe.
  EXPECT_EQ(drain(*open_allowed("pipe:cat; printf done")), "done");
}

// The pipes this process holds open, as /proc names them ("pipe:[1234]").
std::set<std::string> own_pipes() {
  std::set<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("pipe:", 0) == 0) out.insert(target);
  }
  return out;
}

std::set<std::string> added(const std::set<std::string>& after,
                            const std::set<std::string>& before) {
  std::set<std::string> out;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                      std::inserter(out, out.begin()));
  return out;
}

TEST(PipeSource, ChildHoldsNoPipeEndButItsStdout) {
  // Close-on-exec: the command holds neither its pipe's read end nor another source's pipe,
  // either of which would keep a pipe from ever reaching its end.
  std::set<std::string> before = own_pipes();
  auto other = open_allowed("pipe:yes");
  ASSERT_FALSE(other->read().empty());
  std::set<std::string> other_pipe = added(own_pipes(), before);
  ASSERT_EQ(other_pipe.size(), 1u);

  before = own_pipes();
  auto src = open_allowed("pipe:for f in /proc/$$/fd/*; do readlink \"$f\" || :; done");
  std::set<std::string> this_pipe = added(own_pipes(), before);
  ASSERT_EQ(this_pipe.size(), 1u);
  std::string listing = drain(*src);
  auto count = [&](const std::string& target) {
    std::size_t n = 0;
    for (std::size_t at = listing.find(target + "\n"); at != std::string::npos;
         at = listing.find(target + "\n", at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count(*this_pipe.begin()), 1u) << listing;  // stdout, and not the read end
  EXPECT_EQ(count(*other_pipe.begin()), 0u) << listing;
}

TEST(PipeSource, RefusedWithoutPermission) {
  ScopedEnv env("WDS_ALLOW_PIPE", nullptr);
  try {
    open_pipe_source("pipe:printf abc", OpenOptions{});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::permission_denied);
    EXPECT_EQ(e.url(), "pipe:printf abc");
    EXPECT_NE(e.cause().find("allow_pipe"), std::string::npos) << e.cause();
    EXPECT_NE(e.cause().find("WDS_ALLOW_PIPE=1"), std::string::npos) << e.cause();
  }
  ScopedEnv other("WDS_ALLOW_PIPE", "yes");  // only "1" allows
  EXPECT_THROW(open_pipe_source("pipe:printf abc", OpenOptions{}), Error);
}

TEST(PipeSource, AllowedByTheEnvironment) {
  {
    ScopedEnv env("WDS_ALLOW_PIPE", "1");
    EXPECT_EQ(drain(*open_pipe_source("pipe:printf abc", OpenOptions{})), "abc");
  }
  ScopedEnv env("WDS_ALLOW_PIPE", nullptr);
  EXPECT_THROW(open_pipe_source("pipe:printf abc", OpenOptions{}), Error);
}

TEST(PipeSource, RefusesAnOffset) {
  OpenOptions o = allowed();
  o.offset = 10;
  try {
    open_pipe_source("pipe:printf abc", o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find("seek"), std::string::npos) << e.cause();
  }
  EXPECT_TRUE(no_children());
}

TEST(PipeSource, RefusesUrlsWithoutACommand) {
  for (std::string url : {"pipe:", "pipe:  ", "file:x", "pip"}) {
    try {
      open_pipe_source(url, allowed());
      ADD_FAILURE() << url;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << url;
    }
  }
}

TEST(PipeSource, NonZeroExitIsAnErrorAtTheEnd) {
  Error e = failure_of("pipe:exit 3", "");
  EXPECT_EQ(e.code(), ErrorCode::unavailable);
  EXPECT_EQ(e.url(), "pipe:exit 3");
  EXPECT_EQ(e.cause(), "command exited with status 3");

  // The output comes first, the failure after it.
  e = failure_of("pipe:printf x; exit 4", "x");
  EXPECT_EQ(e.code(), ErrorCode::unavailable);
  EXPECT_EQ(e.url(), "pipe:printf x; exit 4");
  EXPECT_EQ(e.cause(), "command exited with status 4");
  EXPECT_TRUE(no_children());
}

TEST(PipeSource, ExitStatus141IsAnErrorToo) {
  // Python webdataset ignores 141 (SIGPIPE in the shell); here it is a failure like any other.
  EXPECT_EQ(failure_of("pipe:exit 141", "").cause(), "command exited with status 141");
}

TEST(PipeSource, FailureIsReportedAgainOnLaterReads) {
  auto src = open_allowed("pipe:exit 5");
  EXPECT_THROW(src->read(), Error);
  try {
    src->read();
    FAIL() << "a failed command read as a clean end";
  } catch (const Error& e) {
    EXPECT_EQ(e.cause(), "command exited with status 5");
  }
}

TEST(PipeSource, DeathBySignalIsAnError) {
  Error e = failure_of("pipe:printf y; kill -9 $$", "y");
  EXPECT_EQ(e.code(), ErrorCode::unavailable);
  EXPECT_EQ(e.cause(), "command was killed by signal 9");
  EXPECT_TRUE(no_children());
}

TEST(PipeSource, MissingCommandIsAnError) {
  Error e = failure_of("pipe:wds-test-no-such-command-x7 2>/dev/null", "");
  EXPECT_EQ(e.code(), ErrorCode::unavailable);
  EXPECT_NE(e.cause().find("status 127"), std::string::npos) << e.cause();
  EXPECT_NE(e.cause().find("not found"), std::string::npos) << e.cause();
}

TEST(PipeSource, DestroyingEarlyStopsAnEndlessCommand) {
  auto start = std::chrono::steady_clock::now();
  {
    auto src = open_allowed("pipe:yes");
    ASSERT_FALSE(src->read().empty());
    ASSERT_FALSE(src->read().empty());
  }
  EXPECT_LT(seconds_since(start), 0.9);
  EXPECT_TRUE(no_children());
}

TEST(PipeSource, DestroyingBeforeReadingStopsTheCommand) {
  { auto src = open_allowed("pipe:sleep 30"); }
  EXPECT_TRUE(no_children());
}

TEST(PipeSource, DestroyingStopsTheWholePipeline) {
  // The shell's background child is in the command's process group and is stopped with it.
  pid_t grandchild = 0;
  {
    auto src = open_allowed("pipe:sleep 30 & echo $!; wait");
    grandchild = std::stoi(read_line(*src));
  }
  EXPECT_TRUE(no_children());
  EXPECT_TRUE(eventually_gone(grandchild));
}

TEST(PipeSource, CommandIgnoringSigtermIsKilledAfterAGrace) {
  auto start = std::chrono::steady_clock::now();
  pid_t grandchild = 0;
  {
    auto src = open_allowed("pipe:trap '' TERM; sleep 30 & echo $!; wait; wait; wait");
    grandchild = std::stoi(read_line(*src));
  }
  double took = seconds_since(start);
  EXPECT_GE(took, 0.5);  // SIGTERM was ignored: the grace ran out first
  EXPECT_LT(took, 5.0);
  EXPECT_TRUE(no_children());
  EXPECT_TRUE(eventually_gone(grandchild));
}

TEST(PipeSource, ReadsATarThroughCat) {
  test::TempDir dir;
  std::string tar = test::make_tar([](TarWriter& w) {
    w.write_file("a.txt", "hello");
    w.write_file("a.cls", "1");
    w.write_file("b.bin", std::string(100000, 'z'));
  });
  std::string path = dir.write("shard.tar", tar);
  TarReader reader(open_pipe_source("pipe:cat '" + path + "'", allowed(1000)));
  std::vector<std::string> seen;
  while (const TarEntry* e = reader.next()) {
    Bytes data(e->size);
    reader.read_data(data.span());
    seen.push_back(e->name + "=" + std::to_string(data.size()) + ":" +
                   std::string(data.str().substr(0, 5)));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"a.txt=5:hello", "a.cls=1:1", "b.bin=100000:zzzzz"}));
  EXPECT_EQ(reader.url(), "pipe:cat '" + path + "'");
}

TEST(PipeSource, TarReaderReportsTheCommandsFailure) {
  // A command that dies mid-archive: the reader reports the command's failure, not merely a
  // truncated archive.
  test::TempDir dir;
  std::string tar = test::make_tar([](TarWriter& w) {
    w.write_file("a.txt", std::string(5000, 'a'));
    w.write_file("b.txt", std::string(5000, 'b'));
  });
  std::string path = dir.write("shard.tar", tar);
  try {
    TarReader reader(open_pipe_source("pipe:head -c 3000 '" + path + "'; exit 2", allowed()));
    while (const TarEntry* e = reader.next()) {
      Bytes data(e->size);
      reader.read_data(data.span());
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable) << e.what();
    EXPECT_NE(e.cause().find("command exited with status 2"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(no_children());
}

}  // namespace
}  // namespace wds
