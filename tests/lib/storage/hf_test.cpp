// hf:// URLs, the Hub's URLs and answers, and where the token and endpoint come from
// (lib/storage/hf.hpp); the backend against a stand-in Hub is tested in tests/remote/hf_test.cpp.
#include "lib/storage/hf.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>

#include "tests/support/env.hpp"
#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"

namespace wds::hf {
namespace {

constexpr std::array<const char*, 7> kHfVariables = {
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH",
    "HF_HOME",  "XDG_CACHE_HOME",         "HF_ENDPOINT",
    "HOME"};

TEST(HfUrl, DatasetsModelsAndSpaces) {
  Location d = parse_hf_url("hf://datasets/org/name/data/train-000.tar");
  EXPECT_EQ(d.type, RepoType::dataset);
  EXPECT_EQ(d.repo, "org/name");
  EXPECT_EQ(d.revision, std::nullopt);
  EXPECT_EQ(d.path, "data/train-000.tar");

  Location m = parse_hf_url("hf://org/model.v2/weights.bin");
  EXPECT_EQ(m.type, RepoType::model);
  EXPECT_EQ(m.repo, "org/model.v2");
  EXPECT_EQ(m.path, "weights.bin");

  Location s = parse_hf_url("hf://spaces/org/app@v1/a/b/");
  EXPECT_EQ(s.type, RepoType::space);
  EXPECT_EQ(s.revision, "v1");
  EXPECT_EQ(s.path, "a/b/");

  Location root = parse_hf_url("hf://datasets/org/name");
  EXPECT_EQ(root.path, "");
}

TEST(HfUrl, ARevisionIsPercentDecoded) {
  Location l = parse_hf_url("hf://datasets/org/name@refs%2Fconvert%2Fparquet/default/0.parquet");
  EXPECT_EQ(l.revision, "refs/convert/parquet");
  EXPECT_EQ(l.path, "default/0.parquet");
  EXPECT_EQ(hf_url(l, *l.revision, l.path),
            "hf://datasets/org/name@refs%2Fconvert%2Fparquet/default/0.parquet");
  EXPECT_EQ(resolve_url("https://hub.test", l, *l.revision, "a b/c.tar"),
            "https://hub.test/datasets/org/name/resolve/refs%2Fconvert%2Fparquet/a%20b/c.tar");
  EXPECT_EQ(api_url("https://hub.test", l, "tree", "main", "data"),
            "https://hub.test/api/datasets/org/name/tree/main/data");
  Location m = parse_hf_url("hf://org/m/x");
  EXPECT_EQ(api_url("https://hub.test", m, "revision", "v1.0"),
            "https://hub.test/api/models/org/m/revision/v1.0");
  EXPECT_EQ(resolve_url("https://hub.test", m, "main", "x"),
            "https://hub.test/org/m/resolve/main/x");
}

TEST(HfUrl, BadUrlsAreInvalidArgumentsNamingTheUrl) {
  for (const char* url : {"hf://", "hf://datasets/", "hf://datasets/org", "hf://datasets/org/",
                          "hf://org", "hf://datasets/org/na me/x", "hf://datasets/org/name@/x",
                          "hf://datasets/org/name@v%2/x", "hf://datasets/o*g/name/x",
                          "hf://datasets/org/name@refs/convert/parquet/x", "s3://bucket/key"}) {
    std::string what;
    EXPECT_EQ(test::error_code([&] { parse_hf_url(url); }, &what), ErrorCode::invalid_argument)
        << url;
    EXPECT_NE(what.find(url), std::string::npos) << what;
  }
}

TEST(HfConfig, TokenAndEndpointFromOptionsTheEnvironmentAndTheTokenFile) {
  test::ClearedEnv env{kHfVariables};
  test::TempDir dir;
  ::setenv("HOME", dir.path().c_str(), 1);
  Config none = resolve_config({});
  EXPECT_EQ(none.endpoint, "https://huggingface.co");
  EXPECT_EQ(none.token, "");

  dir.write(".cache/huggingface/token", "hf_home_default\n");
  EXPECT_EQ(resolve_config({}).token, "hf_home_default");
  ::setenv("XDG_CACHE_HOME", (dir.path() / "xdg").c_str(), 1);
  dir.write("xdg/huggingface/token", "hf_xdg");
  EXPECT_EQ(resolve_config({}).token, "hf_xdg");
  ::setenv("HF_HOME", (dir.path() / "hfhome").c_str(), 1);
  dir.write("hfhome/token", "hf_hf_home");
  EXPECT_EQ(resolve_config({}).token, "hf_hf_home");
  ::setenv("HF_TOKEN_PATH", dir.write("elsewhere", " hf_path \n").c_str(), 1);
  Config file = resolve_config({});
  EXPECT_EQ(file.token, "hf_path");
  EXPECT_EQ(file.token_source, "the token file " + dir.file("elsewhere"));
  ::setenv("HUGGING_FACE_HUB_TOKEN", "hf_old", 1);
  EXPECT_EQ(resolve_config({}).token, "hf_old");
  ::setenv("HF_TOKEN", "hf_env", 1);
  Config from_env = resolve_config({});
  EXPECT_EQ(from_env.token, "hf_env");
  EXPECT_EQ(from_env.token_source, "HF_TOKEN");
  EXPECT_EQ(resolve_config({.token = "hf_option"}).token, "hf_option");
  EXPECT_EQ(resolve_config({.anonymous = true}).token, "");

  ::setenv("HF_ENDPOINT", "https://mirror.test/", 1);
  EXPECT_EQ(resolve_config({}).endpoint, "https://mirror.test");
  EXPECT_EQ(resolve_config({.endpoint = "http://127.0.0.1:1"}).endpoint, "http://127.0.0.1:1");
  std::string what;
  EXPECT_EQ(test::error_code([] { resolve_config({.endpoint = "ftp://x"}); }, &what),
            ErrorCode::invalid_argument);
  ::setenv("HF_TOKEN", "hf_secret with space", 1);
  EXPECT_EQ(test::error_code([] { resolve_config({}); }, &what), ErrorCode::invalid_argument);
  EXPECT_EQ(what.find("hf_secret"), std::string::npos) << what;
}

TEST(HfAnswers, TreePagesCommitsLinksAndErrors) {
  const std::vector<TreeEntry> entries =
      parse_tree(R"([{"type":"directory","oid":"1","path":"data"},)"
                 R"({"type":"file","oid":"2","size":5,"path":"data/a.tar","lfs":{"size":5}}])");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_FALSE(entries[0].is_file);
  EXPECT_TRUE(entries[1].is_file);
  EXPECT_EQ(entries[1].path, "data/a.tar");
  EXPECT_EQ(test::error_code([] { parse_tree(R"({"error":"x"})"); }), ErrorCode::corrupt_data);
  EXPECT_EQ(test::error_code([] { parse_tree(R"([{"type":"file"}])"); }), ErrorCode::corrupt_data);

  const std::string sha = "0123456789abcdef0123456789abcdef01234567";
  EXPECT_EQ(parse_commit(R"({"id":"org/name","sha":")" + sha + "\"}"), sha);
  EXPECT_EQ(test::error_code([] { parse_commit(R"({"sha":"main"})"); }), ErrorCode::corrupt_data);
  EXPECT_TRUE(is_commit(sha));
  EXPECT_FALSE(is_commit("main"));

  EXPECT_EQ(next_link(R"(<https://hub.test/api/x?cursor=abc>; rel="next")"),
            "https://hub.test/api/x?cursor=abc");
  EXPECT_EQ(next_link(R"(<https://a/prev>; rel="prev", <https://a/next>; rel="next")"),
            "https://a/next");
  EXPECT_EQ(next_link(R"(<https://a/prev>; rel="prev")"), std::nullopt);
  EXPECT_EQ(next_link(""), std::nullopt);

  EXPECT_EQ(error_summary(R"({"error":"Repository not found"})"), "Repository not found");
  EXPECT_EQ(error_summary("<html><body><h1>Bad Gateway</h1></body></html>"), "Bad Gateway");
}

}  // namespace
}  // namespace wds::hf
