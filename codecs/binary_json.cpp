#include "codecs/binary_json.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::detail {

namespace {

const char* name_of(BinaryJson format) {
  return format == BinaryJson::msgpack ? "msgpack" : "cbor";
}

// nlohmann's DOM builder, with a bound on nesting and a UTF-8 check of strings and keys: a
// callback returning false stops the reader, and `refused` says why.
class CheckedBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  explicit CheckedBuilder(Json& result) : dom_(result) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return utf8(v, "a string") && dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) { return deeper() && dom_.start_object(n); }
  bool key(string_t& v) { return utf8(v, "a map key") && dom_.key(v); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return deeper() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(pos, token, e);  // throws e
  }

  std::string refused;

 private:
  bool deeper() {
    if (++depth_ <= kMaxBinaryJsonDepth) return true;
    refused = "nested deeper than " + std::to_string(kMaxBinaryJsonDepth) + " levels";
    return false;
  }
  bool utf8(const string_t& s, const char* what) {
    if (valid_utf8(s)) return true;
    refused = std::string(what) + " is not UTF-8";
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::size_t depth_ = 0;
};

}  // namespace

Json parse_binary_json(std::span<const std::byte> data, BinaryJson format) {
  const auto* begin = reinterpret_cast<const std::uint8_t*>(data.data());
  Json result;
  CheckedBuilder builder(result);
  const auto input_format = format == BinaryJson::msgpack
                                ? nlohmann::detail::input_format_t::msgpack
                                : nlohmann::detail::input_format_t::cbor;
  bool ok = false;
  try {
    // strict: the document must end where the bytes do.
    ok = Json::sax_parse(begin, begin + data.size(), &builder, input_format, true);
  } catch (const Json::exception& e) {
    throw Error::corrupt_data(std::string("bad ") + name_of(format) + ": " + e.what());
  }
  if (!ok) {
    throw Error::corrupt_data(std::string("bad ") + name_of(format) + ": " +
                              (builder.refused.empty() ? "cannot parse" : builder.refused));
  }
  return result;
}

Bytes write_binary_json(const Json& value, BinaryJson format) {
  std::vector<std::uint8_t> out;
  if (format == BinaryJson::msgpack) {
    Json::to_msgpack(value, out);
  } else {
    Json::to_cbor(value, out);
  }
  return Bytes::copy_of(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(out.data()), out.size()));
}

}  // namespace wds::detail
