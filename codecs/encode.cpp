#include "wds/encode.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <cctype>
#include <cstring>

#include <memory>

#include "codecs/binary_json.hpp"
#include "codecs/formats.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"
#include "wds/npy.hpp"
#include "wds/tar_writer.hpp"
#include "wds/tenbin.hpp"

namespace wds {

namespace {

using detail::Codec;
using detail::FieldFormat;
using detail::Format;

// `how`: a compression of the format table ("gz": gzip).
Bytes compress(const Bytes& data, const FieldFormat& how, std::string_view member) {
  std::unique_ptr<archive, int (*)(archive*)> a(nullptr, archive_write_free);
  // The raw format writes one entry; the output buffer grows until it fits.
  std::size_t cap = data.size() + data.size() / 2 + 1024;
  for (;;) {
    Bytes out(cap);
    std::size_t used = 0;
    a.reset(archive_write_new());
    archive_write_set_format_raw(a.get());
    int r = how.codec == Codec::gzip    ? archive_write_add_filter_gzip(a.get())
            : how.codec == Codec::xz    ? archive_write_add_filter_xz(a.get())
            : how.codec == Codec::bzip2 ? archive_write_add_filter_bzip2(a.get())
                                        : archive_write_add_filter_zstd(a.get());
    // libarchive's gzip header records the time of writing by default: leave it out (MTIME 0),
    // so that the same value always gives the same bytes.
    if (r == ARCHIVE_OK && how.codec == Codec::gzip) {
      r = archive_write_set_filter_option(a.get(), "gzip", "timestamp", nullptr);
    }
    archive_write_set_bytes_in_last_block(a.get(), 1);
    if (r != ARCHIVE_OK ||
        archive_write_open_memory(a.get(), out.data(), out.size(), &used) != ARCHIVE_OK) {
      throw Error::invalid_argument("", std::string(member),
                                    "cannot compress with " + std::string(how.ext));
    }
    std::unique_ptr<archive_entry, void (*)(archive_entry*)> e(archive_entry_new(),
                                                               archive_entry_free);
    archive_entry_set_pathname(e.get(), "data");
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_size(e.get(), static_cast<la_int64_t>(data.size()));
    bool ok = archive_write_header(a.get(), e.get()) == ARCHIVE_OK &&
              (data.empty() || archive_write_data(a.get(), data.data(), data.size()) ==
                                   static_cast<la_ssize_t>(data.size())) &&
              archive_write_close(a.get()) == ARCHIVE_OK;
    if (ok) {
      Bytes exact(used);
      if (used) std::memcpy(exact.data(), out.data(), used);
      return exact;
    }
    if (cap > (std::size_t{1} << 40)) {
      throw Error::invalid_argument("", std::string(member), "cannot compress");
    }
    cap *= 2;
  }
}

[[noreturn]] void no_encoder(std::string_view ext, const Value& value, std::string_view member) {
  throw Error::invalid_argument("", std::string(member),
                                "no encoder for a " + std::string(value.type_name()) +
                                    " value in a field '" + std::string(ext) +
                                    "' (see wds/encode.hpp)");
}

Bytes text(const std::string& s) {
  return Bytes::copy_of(s);
}

// A writer's invalid_argument, naming the member.
template <class F>
Bytes with_member(std::string_view member, F&& write) {
  try {
    return write();
  } catch (const Error& e) {
    throw Error(e.code(), e.url(), std::string(member), e.cause());
  }
}

// The JSON document of a value for json, msgpack and cbor fields: numbers, JSON, and lists of
// strings, numbers and JSON.
Json json_of(const Value& value, std::string_view ext, std::string_view member) {
  if (const std::int64_t* i = value.get_if<std::int64_t>()) return Json(*i);
  if (const double* d = value.get_if<double>()) return Json(*d);
  if (const Json* j = value.get_if<Json>()) return *j;
  if (const Tuple* l = value.get_if<Tuple>()) {
    Json arr = Json::array();
    for (const Value& v : *l) {
      if (const std::string* s = v.get_if<std::string>()) {
        arr.push_back(*s);
      } else if (v.is<std::int64_t>() || v.is<double>() || v.is<Json>()) {
        arr.push_back(json_of(v, ext, member));
      } else {
        no_encoder(ext, v, member);
      }
    }
    return arr;
  }
  no_encoder(ext, value, member);
}

}  // namespace

Bytes encode_field(std::string_view ext, const Value& value, const EncodeOptions& options,
                   std::string_view member) {
  if (const FieldFormat* c = detail::compression_of(ext)) {
    const std::string_view inner = ext.substr(0, ext.size() - c->ext.size() - 1);
    return compress(encode_field(inner, value, options, member), *c, member);
  }
  // Extensions are lowercase when read back; "JPG" is encoded as "jpg" would be.
  const std::string last = lowercase(detail::last_extension(ext));
  const FieldFormat* format = detail::format_of(last);
  auto is = [format](Format f) { return format && format->format == f; };
  const bool json = is(Format::json);
  const bool number_text = is(Format::integer) || is(Format::text);
  if (const Bytes* b = value.get_if<Bytes>()) return *b;
  if (const std::string* s = value.get_if<std::string>()) return text(*s);
  if (number_text) {
    if (const std::int64_t* i = value.get_if<std::int64_t>()) return text(std::to_string(*i));
    if (const double* d = value.get_if<double>()) return text(Json(*d).dump());
  }
  if (json || is(Format::msgpack) || is(Format::cbor)) {
    const Json j = json_of(value, ext, member);
    if (json) return text(j.dump());
    return detail::write_binary_json(
        j, is(Format::msgpack) ? detail::BinaryJson::msgpack : detail::BinaryJson::cbor);
  }
  if (is(Format::tenbin)) {
    std::vector<Tensor> tensors;
    if (const Tensor* t = value.get_if<Tensor>()) tensors.push_back(*t);
    if (const Tuple* l = value.get_if<Tuple>()) {
      for (const Value& v : *l) {
        const Tensor* t = v.get_if<Tensor>();
        if (!t) no_encoder(ext, v, member);
        tensors.push_back(*t);
      }
    }
    if (!tensors.empty() || value.is<Tuple>())
      return with_member(member, [&] { return write_tenbin(tensors); });
  }
  if (is(Format::npz)) {
    if (const Dict* d = value.get_if<Dict>())
      return with_member(member, [&] { return write_npz(*d); });
  }
  if (const Tensor* t = value.get_if<Tensor>()) {
    if (is(Format::npy)) return write_npy(*t);
    if (is(Format::image)) {
      return with_member(member, [&] { return encode_image(*t, last, options.image); });
    }
  }
  no_encoder(ext, value, member);
}

Sample encode_sample(const DecodedSample& sample, const EncodeOptions& options) {
  Sample out(sample.key(), sample.shard(), sample.offset());
  for (const DecodedSample::Field& f : sample.fields()) {
    // Metadata such as a batch's __key__ is not written, as WebDataset's writer skips "_" names.
    if (f.ext.starts_with("_")) continue;
    Bytes b = encode_field(f.ext, f.value, options, sample.key() + "." + f.ext);
    if (!out.add(f.ext, std::move(b))) {
      throw Error::invalid_argument(sample.url(), sample.key() + "." + f.ext, "duplicate field");
    }
  }
  return out;
}

void TarWriter::write(const DecodedSample& sample, const EncodeOptions& options) {
  write(encode_sample(sample, options));
}
void TarWriter::write(const DecodedSample& sample) {
  write(encode_sample(sample));
}

void ShardWriter::write(const DecodedSample& sample, const EncodeOptions& options) {
  write(encode_sample(sample, options));
}
void ShardWriter::write(const DecodedSample& sample) {
  write(encode_sample(sample));
}

}  // namespace wds
