// wds/value.hpp: Value, a decoded field, and DecodedSample, a sample of decoded fields.
//
// decode() turns each field's bytes into a Value: bytes, a string (txt), an integer (cls), a
// number, a JSON document (json, msgpack, cbor), a tensor (images, npy), a list (a tenbin list
// of tensors; what collation makes of strings and JSON) or a dict (the named arrays of an npz).
// to_tuple() makes a Tuple, a vector of values.
//
//   for (wds::DecodedSample& s : ds) {
//     const wds::Tensor& img = s.get<wds::Tensor>("jpg");   // throws if absent or not a tensor
//     std::int64_t label = s.get<std::int64_t>("cls");
//     if (const wds::Value* meta = s.find("json")) use(meta->get<wds::Json>());
//   }
//
// Moving a Value is cheap; copying copies bytes and strings but shares tensor storage.
//
// Thread safety: value types; distinct objects may be used from different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "wds/bytes.hpp"
#include "wds/sample.hpp"
#include "wds/tensor.hpp"

namespace wds {

class Value;
struct DictItem;
using Json = nlohmann::json;
// A list of values: to_tuple's result, a tenbin field's tensors, and collated columns of
// strings, bytes or JSON.
using Tuple = std::vector<Value>;
// Named values in their order, names unique: an npz field's arrays ({"x": tensor, ...}, as
// numpy.load gives them). find(dict, name) looks one up.
using Dict = std::vector<DictItem>;

class Value {
 public:
  using Variant = std::variant<std::monostate, Bytes, std::string, std::int64_t, double, Json,
                               Tensor, Tuple, Dict>;

  // Defined below, where DictItem is complete: the variant's constructors need every
  // alternative's type (clang instantiates them at the end of this class).
  Value() = default;  // none
  Value(Bytes v);
  Value(std::string v);
  Value(const char* v);
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) Value(I v);
  Value(double v);
  Value(Json v);
  Value(Tensor v);
  Value(Tuple v);
  Value(Dict v);

  bool is_none() const noexcept { return v_.index() == 0; }
  template <class T>
  bool is() const noexcept {
    return std::holds_alternative<T>(v_);
  }
  // The held value; throws invalid_argument naming both types if it holds another type.
  template <class T>
  T& get() {
    if (T* p = std::get_if<T>(&v_)) return *p;
    throw_wrong_type(type_name_of<T>());
  }
  template <class T>
  const T& get() const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw_wrong_type(type_name_of<T>());
  }
  template <class T>
  T* get_if() noexcept {
    return std::get_if<T>(&v_);
  }
  template <class T>
  const T* get_if() const noexcept {
    return std::get_if<T>(&v_);
  }
  Variant& variant() noexcept { return v_; }
  const Variant& variant() const noexcept { return v_; }

  // "none", "bytes", "string", "int", "float", "json", "tensor", "list" or "dict".
  std::string_view type_name() const noexcept;
  // One line for logs: the type and a short rendering ("tensor uint8[256, 256, 3]", "int 7").
  std::string describe() const;

 private:
  template <class T>
  static std::string_view type_name_of() noexcept {
    return Value(T{}).type_name();
  }
  [[noreturn]] void throw_wrong_type(std::string_view wanted) const;

  Variant v_;
};

struct DictItem {
  std::string name;
  Value value;
};

inline Value::Value(Bytes v) : v_(std::move(v)) {}
inline Value::Value(std::string v) : v_(std::move(v)) {}
inline Value::Value(const char* v) : v_(std::string(v)) {}
template <class I>
requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) Value::Value(I v)
    : v_(static_cast<std::int64_t>(v)) {}
inline Value::Value(double v) : v_(v) {}
inline Value::Value(Json v) : v_(std::move(v)) {}
inline Value::Value(Tensor v) : v_(std::move(v)) {}
inline Value::Value(Tuple v) : v_(std::move(v)) {}
inline Value::Value(Dict v) : v_(std::move(v)) {}

// The value named `name` in `dict`, or nullptr.
const Value* find(const Dict& dict, std::string_view name) noexcept;

// A sample after decode(): the key, where it came from, and its fields as values, in archive
// order. A batch of samples collated by batched() is also one: each field holds the collated
// column and the field "__key__" the list of keys.
class DecodedSample {
 public:
  struct Field {
    std::string ext;
    Value value;
  };

  DecodedSample() = default;
  explicit DecodedSample(std::string key, std::shared_ptr<const ShardInfo> shard = nullptr,
                         std::uint64_t offset = 0)
      : key_(std::move(key)), shard_(std::move(shard)), offset_(offset) {}
  // Takes the sample's fields as bytes values (no copy).
  explicit DecodedSample(Sample&& sample);

  const std::string& key() const noexcept { return key_; }
  const std::string& url() const noexcept;
  const std::shared_ptr<const ShardInfo>& shard() const noexcept { return shard_; }
  std::uint64_t offset() const noexcept { return offset_; }
  // "url: key" for error messages.
  std::string where() const;

  std::vector<Field>& fields() noexcept { return fields_; }
  const std::vector<Field>& fields() const noexcept { return fields_; }

  Value* find(std::string_view ext) noexcept;
  const Value* find(std::string_view ext) const noexcept;
  // The field's value; throws invalid_argument naming the sample if absent.
  Value& at(std::string_view ext);
  const Value& at(std::string_view ext) const;
  template <class T>
  const T& get(std::string_view ext) const {
    return at(ext).get<T>();
  }
  template <class T>
  T& get(std::string_view ext) {
    return at(ext).get<T>();
  }
  // Sets the field, replacing a present one.
  void set(std::string ext, Value value);
  // Removes the field; false if absent.
  bool erase(std::string_view ext);

 private:
  std::string key_;
  std::shared_ptr<const ShardInfo> shard_;
  std::uint64_t offset_ = 0;
  std::vector<Field> fields_;
};

}  // namespace wds
