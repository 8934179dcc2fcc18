// Tensor, Value and the DLPack bridge.
#include "wds/tensor.hpp"

#include <gtest/gtest.h>

#include "tests/support/fixtures.hpp"
#include "wds/dlpack.hpp"
#include "wds/value.hpp"

namespace wds {
namespace {

Tensor counting(Tensor::Shape shape) {
  Tensor t(DType::int32, std::move(shape));
  std::int32_t i = 0;
  for (auto& v : t.values<std::int32_t>()) v = i++;
  return t;
}

TEST(Tensor, ShapeViewsAndCopies) {
  Tensor t = counting({2, 3, 4});
  EXPECT_EQ(t.numel(), 24u);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  Tensor row = t[1];
  EXPECT_EQ(row.shape(), (Tensor::Shape{3, 4}));
  EXPECT_EQ(row.values<std::int32_t>()[0], 12);
  row.values<std::int32_t>()[0] = -1;  // a view: writes through
  EXPECT_EQ(t.values<std::int32_t>()[12], -1);
  Tensor deep = t.clone();
  deep.values<std::int32_t>()[0] = 99;
  EXPECT_EQ(t.values<std::int32_t>()[0], 0);
  EXPECT_EQ(t.reshape({6, 4})[5].values<std::int32_t>()[3], 23);
  EXPECT_EQ(t.describe(), "int32[2, 3, 4]");
  std::string what;
  EXPECT_EQ(test::error_code([&] { t.values<float>(); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("int32[2, 3, 4]"), std::string::npos) << what;
  EXPECT_EQ(test::error_code([&] { t.reshape({5, 5}); }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([&] { t[2]; }), ErrorCode::invalid_argument);
  EXPECT_EQ(test::error_code([] { Tensor(DType::uint8, {2, -1}); }), ErrorCode::invalid_argument);
  // A view outlives its parent.
  Tensor kept = counting({4, 2})[3];
  EXPECT_EQ(kept.values<std::int32_t>()[1], 7);
}

TEST(Value, HoldsEachKindAndNamesWrongGets) {
  Value i = 7;
  EXPECT_TRUE(i.is<std::int64_t>());
  EXPECT_EQ(i.get<std::int64_t>(), 7);
  Value s = "text";
  EXPECT_EQ(s.get<std::string>(), "text");
  Value j = Json{{"a", 1}};
  EXPECT_EQ(j.get<Json>()["a"], 1);
  Value t = counting({2});
  std::string what;
  EXPECT_EQ(test::error_code([&] { t.get<std::string>(); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("tensor int32[2]"), std::string::npos) << what;
  EXPECT_NE(what.find("not string"), std::string::npos) << what;
  Value moved = std::move(t);
  EXPECT_EQ(moved.get<Tensor>().numel(), 2u);
  EXPECT_TRUE(Value().is_none());
}

TEST(DecodedSample, FieldsByName) {
  Sample raw("k", std::make_shared<ShardInfo>(ShardInfo{"a.tar", ""}), 1536);
  raw.add("cls", Bytes::copy_of("3"));
  DecodedSample s(std::move(raw));
  EXPECT_EQ(s.key(), "k");
  EXPECT_EQ(s.url(), "a.tar");
  EXPECT_EQ(s.offset(), 1536u);
  EXPECT_EQ(s.get<Bytes>("cls").str(), "3");
  s.set("cls", 3);
  EXPECT_EQ(s.get<std::int64_t>("cls"), 3);
  std::string what;
  EXPECT_EQ(test::error_code([&] { s.at("jpg"); }, &what), ErrorCode::invalid_argument);
  EXPECT_NE(what.find("a.tar"), std::string::npos) << what;
  EXPECT_NE(what.find("cls"), std::string::npos) << what;
  EXPECT_TRUE(s.erase("cls"));
  EXPECT_FALSE(s.erase("cls"));
}

TEST(DLPack, ExportsWithoutCopyAndKeepsStorageAlive) {
  DLManagedTensor* m = nullptr;
  const std::byte* data = nullptr;
  {
    Tensor t = counting({2, 3});
    data = t.data();
    m = to_dlpack(t);
  }  // the tensor is gone; the DLPack view keeps the storage
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->dl_tensor.data, data);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.shape[0], 2);
  EXPECT_EQ(m->dl_tensor.shape[1], 3);
  EXPECT_EQ(m->dl_tensor.strides[0], 3);
  EXPECT_EQ(m->dl_tensor.strides[1], 1);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLInt);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 32);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(static_cast<const std::int32_t*>(m->dl_tensor.data)[5], 5);
  // Back again: the same memory, released through the deleter once.
  Tensor back = from_dlpack(m);
  EXPECT_EQ(back.data(), data);
  EXPECT_EQ(back, counting({2, 3}));
  DLManagedTensor* f = to_dlpack(Tensor(DType::float16, {4}));
  EXPECT_EQ(f->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(f->dl_tensor.dtype.bits, 16);
  f->deleter(f);
}

}  // namespace
}  // namespace wds
