#include "wds/value.hpp"

#include "lib/fields.hpp"
#include "wds/error.hpp"

namespace wds {

std::string_view Value::type_name() const noexcept {
  static constexpr std::string_view names[] = {"none", "bytes",  "string", "int", "float",
                                               "json", "tensor", "list",   "dict"};
  return names[v_.index()];
}

std::string Value::describe() const {
  std::string s(type_name());
  struct Render {
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(const Bytes& b) const { return std::to_string(b.size()) + " bytes"; }
    std::string operator()(const std::string& v) const {
      return v.size() <= 40 ? '"' + v + '"' : '"' + v.substr(0, 37) + "...\"";
    }
    std::string operator()(std::int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return std::to_string(v); }
    std::string operator()(const Json& v) const {
      std::string d = v.dump();
      return d.size() <= 40 ? d : d.substr(0, 37) + "...";
    }
    std::string operator()(const Tensor& v) const { return v.describe(); }
    std::string operator()(const Tuple& v) const { return "of " + std::to_string(v.size()); }
    std::string operator()(const Dict& v) const {
      std::string names;
      for (const DictItem& item : v) {
        if (names.size() > 40) {
          names += ", ...";
          break;
        }
        names += (names.empty() ? "" : ", ") + item.name;
      }
      return "{" + names + "}";
    }
  };
  std::string detail = std::visit(Render{}, v_);
  if (!detail.empty()) s += ' ' + detail;
  return s;
}

const Value* find(const Dict& dict, std::string_view name) noexcept {
  for (const DictItem& item : dict) {
    if (item.name == name) return &item.value;
  }
  return nullptr;
}

void Value::throw_wrong_type(std::string_view wanted) const {
  throw Error::invalid_argument("value is " + describe() + ", not " + std::string(wanted));
}

DecodedSample::DecodedSample(Sample&& sample)
    : key_(sample.key()), shard_(sample.shard()), offset_(sample.offset()) {
  fields_.reserve(sample.fields().size());
  for (wds::Field& f : sample.fields())
    fields_.push_back(Field{std::move(f.ext), std::move(f.data)});
}

const std::string& DecodedSample::url() const noexcept {
  static const std::string empty;
  return shard_ ? shard_->url : empty;
}

std::string DecodedSample::where() const {
  return url().empty() ? "sample '" + key_ + "'" : url() + ": sample '" + key_ + "'";
}

const Value* DecodedSample::find(std::string_view ext) const noexcept {
  const auto f = detail::find_field(fields_, ext);
  return f == fields_.end() ? nullptr : &f->value;
}

Value* DecodedSample::find(std::string_view ext) noexcept {
  return const_cast<Value*>(static_cast<const DecodedSample*>(this)->find(ext));
}

const Value& DecodedSample::at(std::string_view ext) const {
  if (const Value* v = find(ext)) return *v;
  throw detail::missing_field(fields_, ext, url(), key_);
}

Value& DecodedSample::at(std::string_view ext) {
  return const_cast<Value&>(static_cast<const DecodedSample*>(this)->at(ext));
}

void DecodedSample::set(std::string ext, Value value) {
  if (Value* v = find(ext)) {
    *v = std::move(value);
  } else {
    fields_.push_back(Field{std::move(ext), std::move(value)});
  }
}

bool DecodedSample::erase(std::string_view ext) {
  const auto f = detail::find_field(fields_, ext);
  if (f == fields_.end()) return false;
  fields_.erase(f);
  return true;
}

}  // namespace wds
