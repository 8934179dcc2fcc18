// to_tuple, map, map_dict, rename, batched, unbatched and collation.
#include "wds/transforms.hpp"
#include "wds/filters.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "tests/support/fixtures.hpp"
#include "tests/support/streams.hpp"
#include "wds/loader.hpp"

namespace wds {
namespace {

using test::from_vector;
using test::iota;

DecodedSample sample(const std::string& key, std::vector<std::pair<std::string, Value>> fields) {
  DecodedSample s(key, std::make_shared<ShardInfo>(ShardInfo{"s3://b/shard-7.tar", ""}));
  for (auto& [ext, v] : fields) s.set(ext, std::move(v));
  return s;
}

Tensor filled(Tensor::Shape shape, float start) {
  Tensor t(DType::float32, std::move(shape));
  float x = start;
  for (float& v : t.values<float>()) v = x++;
  return t;
}

// By reference: a copy of a pipeline starts from scratch, which would lose a restore().
template <class T>
std::vector<T> all(Pipeline<T>& p) {
  std::vector<T> out;
  for (T& x : p) out.push_back(std::move(x));
  return out;
}
template <class T>
std::vector<T> all(Pipeline<T>&& p) {
  return all(p);
}

TEST(ToTuple, TakesTheFirstPresentAlternative) {
  auto p = from_vector<DecodedSample>({sample("a", {{"png", "P"}, {"cls", 1}}),
                                       sample("b", {{"jpg", "J"}, {"png", "P2"}, {"cls", 2}})}) |
           to_tuple("jpg;png", "cls", "__key__");
  auto rows = all(p);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][0].get<std::string>(), "P");
  EXPECT_EQ(rows[0][1].get<std::int64_t>(), 1);
  EXPECT_EQ(rows[0][2].get<std::string>(), "a");
  EXPECT_EQ(rows[1][0].get<std::string>(), "J");
  // One string with spaces is several fields.
  auto q =
      from_vector<DecodedSample>({sample("a", {{"png", "P"}, {"cls", 1}})}) | to_tuple("png cls");
  EXPECT_EQ(all(q).front().size(), 2u);
}

TEST(ToTuple, MissingFieldNamesTheSample) {
  auto p = from_vector<DecodedSample>({sample("k9", {{"png", "P"}})}) | to_tuple("jpg", "png");
  std::string what;
  EXPECT_EQ(test::error_code([&] { all(p); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("s3://b/shard-7.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("k9"), std::string::npos) << what;
  EXPECT_NE(what.find("'jpg'"), std::string::npos) << what;
  EXPECT_NE(what.find("png"), std::string::npos) << what;  // what it has
  // Not an error on request: a none value.
  auto q = from_vector<DecodedSample>({sample("k9", {{"png", "P"}})}) |
           to_tuple({"jpg", "png"}, {.missing_is_error = false});
  auto rows = all(q);
  EXPECT_TRUE(rows.at(0)[0].is_none());
  // A continuing handler drops the sample.
  auto r = from_vector<DecodedSample>({sample("a", {{"png", "P"}}), sample("b", {{"jpg", "J"}})}) |
           to_tuple({"jpg"}, {.handler = ignore_and_continue});
  EXPECT_EQ(all(r).size(), 1u);
  EXPECT_EQ(test::error_code([] { to_tuple("a b", "c"); }), ErrorCode::invalid_argument);
}

TEST(Map, TransformsDropsAndRoutesErrors) {
  auto p = from_vector(iota(6)) | map([](int x) -> std::optional<int> {
             if (x % 2) return std::nullopt;  // dropped, like WebDataset's None
             return x * 10;
           });
  EXPECT_EQ(all(p), (std::vector<int>{0, 20, 40}));
  auto throwing = from_vector(iota(4)) | map(
                                             [](int x) {
                                               if (x == 2) throw std::runtime_error("two");
                                               return x;
                                             },
                                             ignore_and_continue);
  EXPECT_EQ(all(throwing), (std::vector<int>{0, 1, 3}));
  // The sample's URL and key reach the handler.
  std::string seen;
  auto named = from_vector<DecodedSample>({sample("k1", {{"cls", 1}})}) |
               map(
                   [](DecodedSample s) -> DecodedSample {
                     s.get<std::string>("cls");  // wrong type
                     return s;
                   },
                   [&](const Error& e) {
                     seen = e.what();
                     return true;
                   });
  EXPECT_TRUE(all(named).empty());
  EXPECT_NE(seen.find("k1"), std::string::npos) << seen;
  EXPECT_NE(seen.find("shard-7.tar"), std::string::npos) << seen;
}

TEST(MapDict, ReplacesNamedFields) {
  auto p = from_vector<DecodedSample>({sample("a", {{"cls", 3}, {"txt", "x"}})}) |
           map_dict({{"cls", [](Value&& v) { return Value(v.get<std::int64_t>() + 1); }}});
  auto out = all(p);
  EXPECT_EQ(out.at(0).get<std::int64_t>("cls"), 4);
  EXPECT_EQ(out.at(0).get<std::string>("txt"), "x");
  auto missing = from_vector<DecodedSample>({sample("a", {{"txt", "x"}})}) |
                 map_dict({{"cls", [](Value&& v) { return std::move(v); }}});
  EXPECT_EQ(test::error_code([&] { all(missing); }), ErrorCode::invalid_argument);
}

TEST(Rename, MovesFieldsKeepingOrDroppingTheRest) {
  auto in = [] {
    return from_vector<DecodedSample>({sample("a", {{"png", "P"}, {"cls", 1}, {"txt", "t"}})});
  };
  auto kept = all(in() | rename({{"image", "jpg;png"}, {"label", "cls"}}));
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].get<std::string>("image"), "P");
  EXPECT_EQ(kept[0].get<std::int64_t>("label"), 1);
  EXPECT_EQ(kept[0].find("png"), nullptr);
  EXPECT_NE(kept[0].find("txt"), nullptr);
  EXPECT_EQ(kept[0].key(), "a");
  auto only = all(in() | rename({{"image", "png"}}, false));
  EXPECT_EQ(only.at(0).fields().size(), 1u);
  EXPECT_EQ(test::error_code([&] {
              all(in() | rename({{"x", "npy"}}));
            }),
            ErrorCode::invalid_argument);
}

TEST(Batched, GroupsInOrderWithPartialLastBatch) {
  // WebDataset's test: 10 items, batch 3 -> 4 batches, the last [9].
  auto batches = all(from_vector(iota(10)) | batched(3));
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(batches[3], (std::vector<int>{9}));
  EXPECT_EQ(all(from_vector(iota(10)) | batched(3, false)).size(), 3u);
  auto sums = all(from_vector(iota(10)) |
                  batched(5, [](std::vector<int>&& v) { return v.front() + v.back(); }));
  EXPECT_EQ(sums, (std::vector<int>{4, 14}));
  EXPECT_EQ(test::error_code([] { batched(0); }), ErrorCode::invalid_argument);
}

TEST(Collate, StacksTensorsIntoOneContiguousBatch) {
  std::vector<Tuple> rows;
  for (int i = 0; i < 4; ++i) {
    rows.push_back(Tuple{Value(filled({2, 3}, static_cast<float>(i * 6))), Value(i),
                         Value("s" + std::to_string(i)), Value(0.5 * i)});
  }
  Tuple batch = collate(std::move(rows));
  const Tensor& images = batch[0].get<Tensor>();
  EXPECT_EQ(images.shape(), (Tensor::Shape{4, 2, 3}));
  auto v = images.values<float>();
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<float>(i));
  const Tensor& labels = batch[1].get<Tensor>();
  EXPECT_EQ(labels.dtype(), DType::int64);
  EXPECT_EQ(labels.values<std::int64_t>()[3], 3);
  EXPECT_EQ(batch[2].get<Tuple>().at(2).get<std::string>(), "s2");
  EXPECT_EQ(batch[3].get<Tensor>().dtype(), DType::float64);

  std::vector<Tuple> bad{Tuple{Value(filled({2, 3}, 0))}, Tuple{Value(filled({3, 2}, 0))}};
  std::string what;
  EXPECT_EQ(test::error_code([&] { collate(std::move(bad)); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("float32[3, 2]"), std::string::npos) << what;
}

TEST(Collate, RowsOfOneBlockInOrderBecomeAViewOfIt) {
  const Tensor block = filled({4, 2, 3}, 0);
  auto column = [&](std::initializer_list<std::int64_t> rows) {
    std::vector<Value> out;
    for (std::int64_t r : rows) out.emplace_back(block[r]);
    return out;
  };
  // Rows 0..2 of the block: a view, no copy.
  Tensor view = collate_column(column({0, 1, 2})).get<Tensor>();
  EXPECT_EQ(view.data(), block.data());
  EXPECT_EQ(view, block.rows(0, 3));
  // Out of order, or not from the block's start: a copy with the same values.
  Tensor swapped = collate_column(column({1, 0})).get<Tensor>();
  EXPECT_NE(swapped.data(), block.data());
  EXPECT_EQ(swapped[0], block[1]);
  Tensor tail = collate_column(column({2, 3})).get<Tensor>();
  EXPECT_NE(tail.data(), block[2].data());
  EXPECT_EQ(tail, block.rows(2, 4));
  // Same pointers but another block: copied.
  std::vector<Value> mixed = column({0, 1});
  mixed[1] = filled({2, 3}, 6);
  EXPECT_NE(collate_column(std::move(mixed)).get<Tensor>().data(), block.data());
}

TEST(Batched, DefaultCollationTakesBatchesFromAPool) {
  std::vector<Tuple> rows;
  for (int i = 0; i < 6; ++i) rows.push_back({Value(filled({2, 2}, float(i))), Value(i)});
  auto p = from_vector(rows) | batched(2);
  for (int pass = 0; pass < 2; ++pass) {
    int i = 0;
    for (Tuple& b : p) {
      EXPECT_EQ(b[0].get<Tensor>()[1], filled({2, 2}, float(2 * i + 1)));
      EXPECT_EQ(b[0].get<Tensor>().data(), b[0].get<Tensor>().storage().get());
      ++i;
    }
    EXPECT_EQ(i, 3);
  }
  // One image batch per batch from the pool, reused once the last one was dropped.
  EXPECT_EQ(p.metrics().pool_allocations + p.metrics().pool_reuses, 6u);
  EXPECT_GT(p.metrics().pool_reuses, 0u);
}

// LoaderOptions::memory reaches batched() on every worker: each batch's tensor is a block of
// that allocator, and every block goes back to it.
TEST(Batched, TakesItsBlocksFromTheLoadersMemory) {
  struct Counting final : BlockAllocator {
    std::byte* allocate(std::size_t nbytes) override {
      std::byte* p = detail::allocate_aligned(nbytes).release();
      std::lock_guard lock(mutex);
      live.insert(p);
      return p;
    }
    void deallocate(std::byte* block, std::size_t) noexcept override {
      {
        std::lock_guard lock(mutex);
        live.erase(block);
        ++freed;
      }
      detail::AlignedFree()(block);
    }
    bool owns(const void* p) {
      std::lock_guard lock(mutex);
      return live.count(static_cast<std::byte*>(const_cast<void*>(p))) > 0;
    }
    std::mutex mutex;
    std::set<std::byte*> live;
    int freed = 0;
  };
  auto memory = std::make_shared<Counting>();
  std::vector<Tuple> rows;
  for (int i = 0; i < 40; ++i) rows.push_back({Value(filled({4, 4}, float(i)))});
  {
    Loader<Tuple> loader(from_vector(rows) | batched(4), {.workers = 2, .memory = memory});
    int batches = 0;
    for (Tuple& b : loader) {
      EXPECT_TRUE(memory->owns(b[0].get<Tensor>().storage().get()));
      ++batches;
    }
    EXPECT_EQ(batches, 10);
  }
  EXPECT_TRUE(memory->live.empty());
  EXPECT_GT(memory->freed, 0);
}

TEST(Map, CountsWhatItsHandlerDrops) {
  auto p = from_vector(iota(5)) | map(
                                      [](int x) {
                                        if (x == 3) throw std::runtime_error("three");
                                        return x;
                                      },
                                      ignore_and_continue);
  EXPECT_EQ(all(p).size(), 4u);
  EXPECT_EQ(p.metrics().dropped, 1u);
}

TEST(Collate, SamplesCollateFieldByFieldWithKeys) {
  std::vector<DecodedSample> rows{sample("a", {{"cls", 1}, {"npy", filled({2}, 0)}}),
                                  sample("b", {{"cls", 2}, {"npy", filled({2}, 2)}})};
  DecodedSample batch = collate(std::move(rows));
  EXPECT_EQ(batch.get<Tuple>("__key__").at(1).get<std::string>(), "b");
  EXPECT_EQ(batch.get<Tensor>("npy").shape(), (Tensor::Shape{2, 2}));
  std::vector<DecodedSample> back = uncollate(std::move(batch));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].key(), "b");
  EXPECT_EQ(back[1].get<std::int64_t>("cls"), 2);
  EXPECT_EQ(back[1].get<Tensor>("npy"), filled({2}, 2));
  std::vector<DecodedSample> mismatched{sample("a", {{"cls", 1}}), sample("b", {{"txt", "x"}})};
  EXPECT_EQ(test::error_code([&] { collate(std::move(mismatched)); }), ErrorCode::invalid_argument);
}

TEST(Unbatched, IsTheInverseOfBatched) {
  std::vector<Tuple> rows;
  for (int i = 0; i < 7; ++i) rows.push_back(Tuple{Value(filled({3}, i * 3.0f)), Value(i)});
  auto round = all(from_vector(rows) | batched(3) | unbatched());
  ASSERT_EQ(round.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(round[static_cast<std::size_t>(i)][0].get<Tensor>(), filled({3}, i * 3.0f));
    EXPECT_EQ(round[static_cast<std::size_t>(i)][1].get<std::int64_t>(), i);
  }
  auto ints = all(from_vector(iota(5)) | batched(2) | unbatched());
  EXPECT_EQ(ints, iota(5));
}

TEST(TransformResume, StatelessStagesSaveAndBufferedDecodedItemsRefuse) {
  auto p = from_vector(iota(20)) | map([](int x) { return x + 1; }) | batched(4);
  std::vector<std::vector<int>> head;
  for (auto& b : p) {
    head.push_back(b);
    if (head.size() == 2) break;
  }
  auto q = from_vector(iota(20)) | map([](int x) { return x + 1; }) | batched(4);
  q.restore(p.state());
  auto rest = all(q);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0].front(), 9);

  auto shuffled = from_vector<DecodedSample>({sample("a", {}), sample("b", {}), sample("c", {})})
                      .shuffle(10, 10);
  shuffled.begin_pass();
  shuffled.next();
  std::string what;
  EXPECT_EQ(test::error_code([&] { shuffled.state(); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("before decode()"), std::string::npos) << what;
}

}  // namespace
}  // namespace wds
