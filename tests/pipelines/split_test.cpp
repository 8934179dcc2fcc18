#include "wds/split.hpp"

#include <gtest/gtest.h>

#include "wds/brace.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

using Strings = std::vector<std::string>;

TEST(Split, NodeThenWorkerAsWebDataset) {
  // WebDataset's verified example: 12 shards, RANK=1 WORLD_SIZE=3, WORKER=1 NUM_WORKERS=2.
  Strings urls = brace_expand("s{00..11}");
  Strings node = split_by_node(urls, 1, 3);
  EXPECT_EQ(node, (Strings{"s01", "s04", "s07", "s10"}));
  EXPECT_EQ(split_by_worker(node, 1, 2), (Strings{"s04", "s10"}));
}

TEST(Split, EveryShardGoesToExactlyOneConsumer) {
  Strings urls = brace_expand("s{0..22}");
  Strings all;
  for (int r = 0; r < 3; ++r) {
    for (int w = 0; w < 4; ++w) {
      Strings part = split_by_worker(split_by_node(urls, r, 3), w, 4);
      all.insert(all.end(), part.begin(), part.end());
    }
  }
  std::sort(all.begin(), all.end());
  Strings sorted = urls;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(all, sorted);
}

TEST(Split, SingleConsumerGetsEverything) {
  Strings urls{"a", "b"};
  EXPECT_EQ(split_by_node(urls, 0, 1), urls);
  EXPECT_TRUE(split_by_node(Strings{}, 0, 2).empty());
}

TEST(Split, OutOfRangeIsAnError) {
  Strings urls{"a"};
  EXPECT_THROW(split_by_node(urls, 3, 3), Error);
  EXPECT_THROW(split_by_node(urls, -1, 3), Error);
  EXPECT_THROW(split_by_node(urls, 0, 0), Error);
  try {
    split_by_worker(urls, 2, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.cause().find("worker 2"), std::string::npos);
  }
}

}  // namespace
}  // namespace wds
