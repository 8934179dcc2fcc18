// Listing local shards: directories, globs, file: URLs, and what counts as a pattern.
#include "lib/storage/file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/fixtures.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

// A directory of shards, with the things a listing must leave out.
class ListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Written out of order, so that sorting shows.
    for (const char* name : {"train-10.tar", "train-02.tar", "train-01.tar", "val-00.tar",
                             "train-1.tar", "Zeta.tar", "readme.txt"}) {
      dir_.write(name, "x");
    }
    dir_.write("train-03.tar/inner.tar", "x");  // a directory that matches the glob
    dir_.write("sub/train-99.tar", "x");        // not listed: not recursive
    dir_.write(".hidden.tar", "x");
    std::filesystem::create_symlink(dir_.file("train-01.tar"), dir_.file("link-01.tar"));
    std::filesystem::create_symlink(dir_.file("missing.tar"), dir_.file("dangling.tar"));
    root_ = dir_.path().string() + "/";
  }

  Strings with_root(const Strings& names) const {
    Strings out;
    for (const std::string& n : names) out.push_back(root_ + n);
    return out;
  }

  test::TempDir dir_;
  std::string root_;
};

ErrorCode error_code_of(const std::string& pattern) {
  try {
    list_local(pattern);
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << pattern << " listed without an error";
  return ErrorCode::invalid_argument;
}

TEST_F(ListingTest, DirectoryListsItsRegularFilesSortedBytewise) {
  EXPECT_EQ(list_local(root_),
            with_root({"Zeta.tar", "link-01.tar", "readme.txt", "train-01.tar", "train-02.tar",
                       "train-1.tar", "train-10.tar", "val-00.tar"}));
}

TEST_F(ListingTest, GlobWithStar) {
  EXPECT_EQ(list_local(root_ + "train-*.tar"),
            with_root({"train-01.tar", "train-02.tar", "train-1.tar", "train-10.tar"}));
}

TEST_F(ListingTest, GlobWithQuestionMarkAndBrackets) {
  EXPECT_EQ(list_local(root_ + "train-0?.tar"), with_root({"train-01.tar", "train-02.tar"}));
  EXPECT_EQ(list_local(root_ + "train-[01]?.tar"),
            with_root({"train-01.tar", "train-02.tar", "train-10.tar"}));
  EXPECT_EQ(list_local(root_ + "*-00.tar"), with_root({"val-00.tar"}));
}

TEST_F(ListingTest, GlobHasNoBraceExpansion) {
  EXPECT_EQ(error_code_of(root_ + "train-{01,02}*.tar"), ErrorCode::not_found);
}

TEST_F(ListingTest, GlobOverDirectories) {
  EXPECT_EQ(list_local(root_ + "*/*.tar"),
            with_root({"sub/train-99.tar", "train-03.tar/inner.tar"}));
  // "dirs-*/" lists the files of every matching directory.
  EXPECT_EQ(list_local(root_ + "s*/"), with_root({"sub/train-99.tar"}));
}

TEST_F(ListingTest, RelativePatterns) {
  std::filesystem::path old = std::filesystem::current_path();
  std::filesystem::current_path(dir_.path());
  Strings dir, glob;
  try {
    dir = list_local("sub/");
    glob = list_local("train-0?.tar");
  } catch (...) {
    std::filesystem::current_path(old);
    throw;
  }
  std::filesystem::current_path(old);
  EXPECT_EQ(dir, Strings{"sub/train-99.tar"});
  EXPECT_EQ(glob, (Strings{"train-01.tar", "train-02.tar"}));
}

TEST_F(ListingTest, FileUrlPrefixIsKept) {
  std::string url = "file://" + root_;
  EXPECT_EQ(list_local(url + "train-0*.tar"),
            (Strings{url + "train-01.tar", url + "train-02.tar"}));
  EXPECT_EQ(list_local(url + "sub/"), Strings{url + "sub/train-99.tar"});
  // With a host, and with the file: form that has no "//".
  EXPECT_EQ(list_local("file://localhost" + root_ + "val-*"),
            Strings{"file://localhost" + root_ + "val-00.tar"});
  EXPECT_EQ(list_local("file:" + root_ + "val-*"), Strings{"file:" + root_ + "val-00.tar"});
}

TEST_F(ListingTest, PercentInANameIsEscapedInFileUrls) {
  dir_.write("pct/a%20b.tar", "x");
  std::string url = "file://" + root_ + "pct/";
  EXPECT_EQ(list_local(url), Strings{url + "a%2520b.tar"});
  EXPECT_EQ(list_local(url + "*.tar"), Strings{url + "a%2520b.tar"});
  // Plain paths stay as they are.
  EXPECT_EQ(list_local(root_ + "pct/"), Strings{root_ + "pct/a%20b.tar"});
}

TEST_F(ListingTest, NoMatchIsNotFoundNamingThePattern) {
  std::string pattern = root_ + "test-*.tar";
  try {
    list_local(pattern);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_EQ(e.url(), pattern);
    EXPECT_NE(e.cause().find("no files match"), std::string::npos) << e.cause();
    EXPECT_NE(std::string(e.what()).find(pattern), std::string::npos) << e.what();
  }
  // Only directories match: still no files.
  EXPECT_EQ(error_code_of(root_ + "train-03.*"), ErrorCode::not_found);
  EXPECT_EQ(error_code_of(root_ + "no-such-dir/*.tar"), ErrorCode::not_found);
}

TEST_F(ListingTest, MissingOrEmptyDirectoryIsNotFound) {
  EXPECT_EQ(error_code_of(root_ + "no-such-dir/"), ErrorCode::not_found);
  std::filesystem::create_directory(dir_.file("empty"));
  dir_.write("empty/.only-hidden", "x");
  EXPECT_EQ(error_code_of(root_ + "empty/"), ErrorCode::not_found);
  EXPECT_EQ(error_code_of(root_ + "readme.txt/"), ErrorCode::not_found);  // ENOTDIR
}

TEST_F(ListingTest, UnreadableDirectoryIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every directory";
  std::filesystem::create_directory(dir_.file("locked"));
  dir_.write("locked/a.tar", "x");
  ::chmod(dir_.file("locked").c_str(), 0);
  ErrorCode dir = error_code_of(root_ + "locked/");
  ErrorCode glob = error_code_of(root_ + "locked/*.tar");
  ::chmod(dir_.file("locked").c_str(), 0755);
  EXPECT_EQ(dir, ErrorCode::permission_denied);
  EXPECT_EQ(glob, ErrorCode::permission_denied);
}

TEST_F(ListingTest, PlainPathListsItselfIfItIsAFile) {
  EXPECT_EQ(list_local(root_ + "val-00.tar"), with_root({"val-00.tar"}));
  EXPECT_EQ(error_code_of(root_ + "val-01.tar"), ErrorCode::not_found);
}

TEST(Listing, EmptyPatternIsInvalid) {
  try {
    list_local("");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
}

TEST(IsListingPattern, Cases) {
  EXPECT_TRUE(is_listing_pattern("data/"));
  EXPECT_TRUE(is_listing_pattern("/data/train-*.tar"));
  EXPECT_TRUE(is_listing_pattern("data/train-0?.tar"));
  EXPECT_TRUE(is_listing_pattern("data/train-[0-4].tar"));
  EXPECT_TRUE(is_listing_pattern("file:///data/"));
  EXPECT_TRUE(is_listing_pattern("file:///data/*.tar"));
  EXPECT_TRUE(is_listing_pattern("file:///data/a?.tar"));
  EXPECT_TRUE(is_listing_pattern("s3://bucket/prefix/"));
  EXPECT_TRUE(is_listing_pattern("s3://bucket/train-*.tar"));
  EXPECT_TRUE(is_listing_pattern("gs://bucket/dir/"));

  EXPECT_FALSE(is_listing_pattern(""));
  EXPECT_FALSE(is_listing_pattern("-"));
  EXPECT_FALSE(is_listing_pattern("data/train-000.tar"));
  EXPECT_FALSE(is_listing_pattern("file:///data/train-000.tar"));
  EXPECT_FALSE(is_listing_pattern("s3://bucket/a.tar"));
  // In a remote URL '?' starts a query and '[' is literal.
  EXPECT_FALSE(is_listing_pattern("s3://bucket/a.tar?versionId=3"));
  EXPECT_FALSE(is_listing_pattern("https://host/a[1].tar"));
  // A pipe: URL is a shell command, whatever it holds.
  EXPECT_FALSE(is_listing_pattern("pipe:cat data/*.tar"));
  EXPECT_FALSE(is_listing_pattern("pipe:ls data/"));
}

}  // namespace
}  // namespace wds
