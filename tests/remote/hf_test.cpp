// hf:// against a loopback stand-in for the Hugging Face Hub (tests/support/hub_server.hpp):
// reads through the Hub's redirect to its CDN (which must not see the token), listings through
// the tree API page by page, the token from the environment and the token file, private
// repositories, 429 with Retry-After (waited and counted as throttled), and the revision pinned
// to one commit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "tests/support/env.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/hub_server.hpp"
#include "wds/remote.hpp"
#include "wds/source.hpp"
#include "wds/webdataset.hpp"

namespace wds {
namespace {

using namespace std::chrono_literals;
using Strings = std::vector<std::string>;

constexpr std::array<const char*, 12> kHfVariables = {"HF_TOKEN",
                                                      "HUGGING_FACE_HUB_TOKEN",
                                                      "HF_TOKEN_PATH",
                                                      "HF_HOME",
                                                      "XDG_CACHE_HOME",
                                                      "HF_ENDPOINT",
                                                      "HOME",
                                                      "WDS_JOB_ID",
                                                      "TORCHELASTIC_RUN_ID",
                                                      "SLURM_JOB_ID",
                                                      "OMPI_MCA_ess_base_jobid",
                                                      "PMIX_NAMESPACE"};

// A shard of `n` samples, large enough (about 3 KiB) to go through the CDN.
std::string shard(const std::string& prefix, int n) {
  return test::make_tar([&](TarWriter& w) {
    for (int i = 0; i < n; ++i) {
      w.write(test::make_sample(
          prefix + std::to_string(i),
          {{"txt", std::string(600, static_cast<char>('a' + i))}, {"cls", std::to_string(i)}}));
    }
  });
}

class Hf : public ::testing::Test {
 protected:
  Hf() {
    // No token from the machine's own environment or files: each test sets what it uses.
    ::setenv("HF_TOKEN_PATH", (dir_.path() / "no-token").c_str(), 1);
    files_ = {{"data/train-0.tar", shard("a", 3)},
              {"data/train-1.tar", shard("b", 2)},
              {"data/train-2.tar", shard("c", 4)},
              {"data/val-0.tar", shard("v", 1)},
              {"data/README.md", "small: served by the Hub itself"},
              {"data/extra/train-9.tar", shard("x", 1)},
              {"other/train-5.tar", shard("o", 1)}};
    sha_ = hub_.commit("datasets/org/name", "main", files_);
  }

  // Options for the fixture's Hub, with quick retries.
  OpenOptions open() const {
    OpenOptions o;
    o.backend_options.set(HfOptions{.endpoint = hub_.endpoint()});
    o.backend_options.set(HttpOptions{.initial_backoff = 10ms});
    return o;
  }
  static WebDatasetOptions one_rank(OpenOptions open) {
    WebDatasetOptions o;
    o.distributed.rank = 0;
    o.distributed.world_size = 1;
    o.open = std::move(open);
    return o;
  }

  test::ClearedEnv env_{kHfVariables};
  test::TempDir dir_;
  test::HubServer hub_;
  std::map<std::string, std::string> files_;
  std::string sha_;
};

TEST_F(Hf, ReadsAShardThroughTheCdnAndTheTokenStaysWithTheHub) {
  ::setenv("HF_TOKEN", hub_.token().c_str(), 1);
  EXPECT_EQ(test::read_url("hf://datasets/org/name/data/train-0.tar", open()),
            files_["data/train-0.tar"]);
  const auto hub = hub_.hub_requests();
  const auto cdn = hub_.cdn_requests();
  ASSERT_EQ(hub.size(), 2u);  // the revision, then the file
  EXPECT_NE(hub[0].line.find("/api/datasets/org/name/revision/main"), std::string::npos)
      << hub[0].line;
  EXPECT_NE(hub[1].line.find("/datasets/org/name/resolve/" + sha_ + "/data/train-0.tar"),
            std::string::npos)
      << hub[1].line;
  EXPECT_TRUE(hub[0].authorization);
  EXPECT_TRUE(hub[1].authorization);
  ASSERT_EQ(cdn.size(), 1u);
  EXPECT_NE(cdn[0].line.find("/cdn/datasets/org/name/" + sha_ + "/data/train-0.tar"),
            std::string::npos);
  EXPECT_FALSE(cdn[0].authorization) << "the token went to the CDN host";
}

TEST_F(Hf, ASmallFileComesFromTheHubItselfAndRangeReadsWork) {
  EXPECT_EQ(test::read_url("hf://datasets/org/name/data/README.md", open()),
            files_["data/README.md"]);
  EXPECT_TRUE(hub_.cdn_requests().empty());
  OpenOptions o = open();
  o.offset = 1000;  // through the redirect, as a resumed read asks
  EXPECT_EQ(test::read_url("hf://datasets/org/name/data/train-1.tar", o),
            files_["data/train-1.tar"].substr(1000));
}

TEST_F(Hf, SamplesThroughWebDatasetWithABracePattern) {
  Pipeline<Sample> ds =
      WebDataset("hf://datasets/org/name/data/train-{0..2}.tar", one_rank(open()));
  Strings keys;
  for (Sample& s : ds) keys.push_back(s.key());
  EXPECT_EQ(keys, (Strings{"a0", "a1", "a2", "b0", "b1", "c0", "c1", "c2", "c3"}));
  const std::optional<SourceMetrics> hf = ds.metrics().source("hf");
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->shards, 3u);
  EXPECT_EQ(hf->retries, 0u);
}

TEST_F(Hf, AGlobIsListedPageByPageAtTheCommit) {
  const Strings urls = resolve_urls("hf://datasets/org/name/data/train-*.tar", open());
  const std::string at = "hf://datasets/org/name@" + sha_ + "/data/";
  EXPECT_EQ(urls, (Strings{at + "train-0.tar", at + "train-1.tar", at + "train-2.tar"}));
  std::size_t pages = 0;
  for (const auto& seen : hub_.hub_requests()) {
    if (seen.line.find("/tree/") != std::string::npos) ++pages;
  }
  EXPECT_GE(pages, 3u);  // 7 entries under data/, 2 a page
  // Through the pipeline too: samples of exactly those shards.
  std::size_t n = 0;
  for (Sample& s : WebDataset("hf://datasets/org/name/data/train-*.tar", one_rank(open()))) {
    n += s.key().empty() ? 0 : 1;
  }
  EXPECT_EQ(n, 9u);
}

TEST_F(Hf, AFolderIsListedOneLevelDeepAndAGlobReachesIntoSubfolders) {
  const std::string at = "hf://datasets/org/name@" + sha_ + "/";
  EXPECT_EQ(resolve_urls("hf://datasets/org/name/data/", open()),
            (Strings{at + "data/README.md", at + "data/train-0.tar", at + "data/train-1.tar",
                     at + "data/train-2.tar", at + "data/val-0.tar"}));
  EXPECT_EQ(resolve_urls("hf://datasets/org/name/*/train-*.tar", open()),
            (Strings{at + "data/train-0.tar", at + "data/train-1.tar", at + "data/train-2.tar",
                     at + "other/train-5.tar"}));
  bool recursive = false;
  for (const auto& seen : hub_.hub_requests()) {
    recursive = recursive || seen.line.find("recursive=true") != std::string::npos;
  }
  EXPECT_TRUE(recursive);
  std::string what;
  EXPECT_EQ(
      test::error_code([&] { resolve_urls("hf://datasets/org/name/data/*.zip", open()); }, &what),
      ErrorCode::not_found);
  EXPECT_NE(what.find("hf://datasets/org/name/data/*.zip"), std::string::npos) << what;
}

TEST_F(Hf, AListingIsResolvedOncePerProcess) {
  const Strings first = resolve_urls("hf://datasets/org/name/data/train-*.tar", open());
  const std::size_t requests = hub_.hub_requests().size();
  EXPECT_EQ(resolve_urls("hf://datasets/org/name/data/train-*.tar", open()), first);
  EXPECT_EQ(hub_.hub_requests().size(), requests);
}

// Another process of the job finds what the first one resolved in the cache directory: the
// branch's commit (per job id) and the listing at that commit. Each listing here runs in a child
// process, as another rank would, so this process's own memo plays no part.
TEST_F(Hf, AJobsProcessesShareTheCommitAndTheListingThroughTheCacheDirectory) {
  OpenOptions o = open();
  o.backend_options.set(CacheOptions{.dir = (dir_.path() / "cache").string()});
  const std::string pattern = "hf://datasets/org/name/data/train-*.tar";
  // The listing a child process made, or "" if it failed.
  auto list_in_child = [&](const std::string& name) {
    const std::filesystem::path out = dir_.path() / name;
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        std::ofstream f(out);
        for (const std::string& url : resolve_urls(pattern, o)) f << url << "\n";
        f.close();
        ::_exit(f ? 0 : 1);
      } catch (...) {
        ::_exit(2);
      }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::string();
    std::ifstream in(out);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };

  ::setenv("WDS_JOB_ID", "job-1", 1);
  const std::string first = list_in_child("first");
  ASSERT_NE(first.find("@" + sha_ + "/data/train-0.tar"), std::string::npos) << first;
  const std::size_t requests = hub_.hub_requests().size();
  EXPECT_GT(requests, 0u);
  // The branch moves; the job's next process asks the Hub nothing and lists the same commit.
  const std::string moved = hub_.commit("datasets/org/name", "main", files_);
  EXPECT_EQ(list_in_child("second"), first);
  EXPECT_EQ(hub_.hub_requests().size(), requests);
  // Another job resolves the branch afresh.
  ::setenv("WDS_JOB_ID", "job-2", 1);
  const std::string third = list_in_child("third");
  EXPECT_NE(third.find("@" + moved + "/data/train-0.tar"), std::string::npos) << third;
  EXPECT_GT(hub_.hub_requests().size(), requests);
  // Without a job id, a branch is resolved in each process; the listing at the commit is
  // still shared.
  ::unsetenv("WDS_JOB_ID");
  const std::size_t before = hub_.hub_requests().size();
  EXPECT_EQ(list_in_child("fourth"), third);
  EXPECT_EQ(hub_.hub_requests().size(), before + 1);  // the revision, no tree page
}

TEST_F(Hf, TheRevisionIsPinnedToOneCommitWhileTheBranchMoves) {
  const Strings listed = resolve_urls("hf://datasets/org/name/data/train-0.*", open());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(test::read_url("hf://datasets/org/name/data/train-0.tar", open()),
            files_["data/train-0.tar"]);
  const std::string moved = hub_.commit("datasets/org/name", "main", {{"data/train-0.tar", "v2"}});
  // The listed URL names the commit; the branch was resolved once in this process.
  EXPECT_EQ(test::read_url(listed[0], open()), files_["data/train-0.tar"]);
  EXPECT_EQ(test::read_url("hf://datasets/org/name/data/train-0.tar", open()),
            files_["data/train-0.tar"]);
  EXPECT_EQ(test::read_url("hf://datasets/org/name@" + moved + "/data/train-0.tar", open()), "v2");
  // Without pinning, each request reads the branch as it is.
  OpenOptions unpinned = open();
  unpinned.backend_options.set(HfOptions{.endpoint = hub_.endpoint(), .pin_revision = false});
  EXPECT_EQ(test::read_url("hf://datasets/org/name/data/train-0.tar", unpinned), "v2");
}

TEST_F(Hf, ARevisionWithASlashIsWrittenPercentEncoded) {
  hub_.commit("datasets/org/name", "refs/convert/parquet", {{"x/0.parquet", "parquet bytes"}});
  EXPECT_EQ(test::read_url("hf://datasets/org/name@refs%2Fconvert%2Fparquet/x/0.parquet", open()),
            "parquet bytes");
  OpenOptions v = open();
  v.backend_options.set(HfOptions{.endpoint = hub_.endpoint(), .revision = "refs/convert/parquet"});
  EXPECT_EQ(test::read_url("hf://datasets/org/name/x/0.parquet", v), "parquet bytes");
}

TEST_F(Hf, ModelAndSpaceRepositories) {
  hub_.commit("org/model", "main", {{"weights.bin", "model bytes"}});
  hub_.commit("spaces/org/app", "main", {{"app.py", "space bytes"}});
  EXPECT_EQ(test::read_url("hf://org/model/weights.bin", open()), "model bytes");
  EXPECT_EQ(test::read_url("hf://spaces/org/app/app.py", open()), "space bytes");
}

TEST_F(Hf, TheTokenComesFromTheEnvironmentOrTheTokenFile) {
  hub_.make_private("datasets/org/name");
  const std::string url = "hf://datasets/org/name/data/README.md";
  const std::string& token = hub_.token();
  ::setenv("HF_TOKEN", token.c_str(), 1);
  EXPECT_EQ(test::read_url(url, open()), files_["data/README.md"]);
  ::unsetenv("HF_TOKEN");
  ::setenv("HUGGING_FACE_HUB_TOKEN", token.c_str(), 1);  // the older name
  EXPECT_EQ(test::read_url(url, open()), files_["data/README.md"]);
  ::unsetenv("HUGGING_FACE_HUB_TOKEN");
  ::setenv("HF_TOKEN_PATH", dir_.write("path-token", token + "\n").c_str(), 1);
  EXPECT_EQ(test::read_url(url, open()), files_["data/README.md"]);
  // The file `hf auth login` writes: $HF_HOME/token, HF_HOME defaulting to
  // ~/.cache/huggingface.
  ::unsetenv("HF_TOKEN_PATH");
  ::setenv("HF_HOME", (dir_.path() / "home").c_str(), 1);
  dir_.write("home/token", token);
  EXPECT_EQ(test::read_url(url, open()), files_["data/README.md"]);
  ::unsetenv("HF_HOME");
  ::setenv("HOME", (dir_.path() / "user").c_str(), 1);
  dir_.write("user/.cache/huggingface/token", token);
  EXPECT_EQ(test::read_url(url, open()), files_["data/README.md"]);
  // HfOptions::anonymous sends none, whatever the environment holds.
  OpenOptions anonymous = open();
  anonymous.backend_options.set(HfOptions{.endpoint = hub_.endpoint(), .anonymous = true});
  EXPECT_EQ(test::error_code([&] { test::read_url(url, anonymous); }),
            ErrorCode::permission_denied);
}

TEST_F(Hf, APrivateRepositoryWithoutTheTokenIsAClearError) {
  hub_.make_private("datasets/org/name");
  const std::string url = "hf://datasets/org/name/data/train-0.tar";
  std::string what;
  EXPECT_EQ(test::error_code([&] { test::read_url(url, open()); }, &what),
            ErrorCode::permission_denied);
  EXPECT_NE(what.find(url), std::string::npos) << what;
  EXPECT_NE(what.find("HTTP 401"), std::string::npos) << what;
  EXPECT_NE(what.find("set HF_TOKEN"), std::string::npos) << what;
  // A wrong token: said where it came from, never what it is.
  ::setenv("HF_TOKEN", "hf_wrong_secret_value", 1);
  EXPECT_EQ(test::error_code([&] { test::read_url(url, open()); }, &what),
            ErrorCode::permission_denied);
  EXPECT_NE(what.find("the token from HF_TOKEN"), std::string::npos) << what;
  EXPECT_EQ(what.find("hf_wrong_secret_value"), std::string::npos) << what;
  // The same when the revision is a commit (no API request first: the read itself is refused).
  EXPECT_EQ(
      test::error_code(
          [&] { test::read_url("hf://datasets/org/name@" + sha_ + "/data/train-0.tar", open()); },
          &what),
      ErrorCode::permission_denied);
  EXPECT_NE(what.find("the token from HF_TOKEN"), std::string::npos) << what;
  EXPECT_EQ(test::error_code([&] { resolve_urls("hf://datasets/org/name/data/", open()); }, &what),
            ErrorCode::permission_denied);
}

TEST_F(Hf, MissingFilesAndRepositoriesAreNotFound) {
  std::string what;
  EXPECT_EQ(test::error_code(
                [&] { test::read_url("hf://datasets/org/name/data/nope.tar", open()); }, &what),
            ErrorCode::not_found);
  EXPECT_NE(what.find("hf://datasets/org/name/data/nope.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("Entry not found"), std::string::npos) << what;
  EXPECT_EQ(
      test::error_code([&] { test::read_url("hf://datasets/org/gone/a.tar", open()); }, &what),
      ErrorCode::not_found);
  EXPECT_NE(what.find("Repository not found"), std::string::npos) << what;
  EXPECT_EQ(
      test::error_code([&] { test::read_url("hf://datasets/org/name/data/", open()); }, &what),
      ErrorCode::invalid_argument);
}

TEST_F(Hf, A429IsWaitedAsItAsksAndCountedAsThrottled) {
  hub_.throttle(1, 1);  // the first request: the revision, on opening the first shard
  std::mutex mu;
  std::vector<bool> throttled;
  OpenOptions o = open();
  o.on_retry = [&](const Error& cause, int) {
    std::lock_guard lock(mu);
    throttled.push_back(is_throttled(cause));
  };
  const auto start = std::chrono::steady_clock::now();
  Pipeline<Sample> ds = WebDataset("hf://datasets/org/name/data/train-{0..1}.tar", one_rank(o));
  std::size_t n = 0;
  for (Sample& s : ds) n += s.key().empty() ? 0 : 1;
  EXPECT_EQ(n, 5u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 950ms);
  const std::optional<SourceMetrics> hf = ds.metrics().source("hf");
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->retries, 1u);
  EXPECT_EQ(hf->throttled, 1u);
  EXPECT_EQ(ds.metrics().throttled(), 1u);
  EXPECT_EQ(throttled, (std::vector<bool>{true}));
}

TEST_F(Hf, A429OnAListingIsWaitedToo) {
  OpenOptions o = open();
  o.backend_options.set(HfOptions{.endpoint = hub_.endpoint(), .revision = sha_});
  std::mutex mu;
  std::vector<std::string> causes;
  o.on_retry = [&](const Error& cause, int) {
    std::lock_guard lock(mu);
    causes.push_back(std::string(is_throttled(cause) ? "throttled: " : "") + cause.what());
  };
  hub_.throttle(2, 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(resolve_urls("hf://datasets/org/name/data/train-*.tar", o).size(), 3u);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1950ms);
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_EQ(causes[0].rfind("throttled: ", 0), 0u) << causes[0];
  EXPECT_NE(causes[0].find("as Retry-After asked"), std::string::npos) << causes[0];
}

}  // namespace
}  // namespace wds
