// The writers as Python objects: _TarWriter, a wds::TarWriter writing to a URL (open_sink) or to a
// Python file object. The webdataset-compatible TarWriter and ShardWriter (python/wdscpp/
// writers.py) are built on it: they choose the encoding of Python-only values (pickle, JSON
// text, decimal text), and this unit encodes the rest by extension (wds/encode.hpp: strings,
// numbers, npy, images, msgpack, CBOR, tenbin, npz) and writes.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "python/bindings.hpp"

namespace wdscpp {
namespace {

// A Python object with write(), as a sink. Writes come from a call that released the GIL, so
// each takes it back. close() leaves the object open, as tarfile leaves a file object it was given.
class PyFileSink final : public wds::ByteSink {
 public:
  explicit PyFileSink(py::object file)
      : ByteSink("<" + std::string(py::str(py::type::of(file).attr("__name__"))) + ">"),
        file_(std::move(file)) {}
  ~PyFileSink() override {
    Gil gil;
    file_ = py::object();
  }

  void write(std::span<const std::byte> bytes) override {
    Gil gil;
    try {
      file_.attr("write")(py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    } catch (py::error_already_set& e) {
      throw from_python(e, "TarWriter");
    }
  }
  void close() override {}

 private:
  py::object file_;
};

// The value named `name` in `table`; invalid_argument naming the option otherwise.
template <class E>
E pick(const char* option, const std::string& name,
       std::initializer_list<std::pair<std::string_view, E>> table) {
  for (const auto& [n, e] : table) {
    if (n == name) return e;
  }
  throw wds::Error::invalid_argument(std::string("TarWriter: unknown ") + option + " '" + name +
                                     "'");
}

struct PyTarWriter {
  std::mutex mu;  // one write at a time: calls release the GIL
  std::unique_ptr<wds::TarWriter> w;
  std::string url;
};

std::unique_ptr<PyTarWriter> make_writer(const py::object& dest, const std::string& compression,
                                         const std::string& format, int mode,
                                         std::optional<std::int64_t> mtime, bool allow_pipe) {
  wds::TarWriterOptions o;
  o.mode = mode;
  o.mtime = mtime;
  using F = wds::TarFormat;
  o.format = pick<F>("format", format, {{"ustar", F::ustar}, {"pax", F::pax}, {"gnu", F::gnu}});
  using C = wds::Compression;
  o.compression = pick<C>("compression", compression,
                          {{"none", C::none},
                           {"gzip", C::gzip},
                           {"bzip2", C::bzip2},
                           {"xz", C::xz},
                           {"zstd", C::zstd}});
  auto out = std::make_unique<PyTarWriter>();
  std::unique_ptr<wds::ByteSink> sink;
  if (PyUnicode_Check(dest.ptr())) {
    out->url = dest.cast<std::string>();
    wds::SinkOptions sink_options;
    sink_options.allow_pipe = allow_pipe;
    NoGil nogil;  // an upload sink may resolve credentials
    sink = wds::open_sink(out->url, sink_options);
  } else if (py::hasattr(dest, "write")) {
    sink = std::make_unique<PyFileSink>(dest);
    out->url = sink->url();
  } else {
    throw py::type_error("TarWriter: fileobj must be a path or URL string or have write()");
  }
  out->w = std::make_unique<wds::TarWriter>(std::move(sink), o);
  return out;
}

std::string type_name(const py::handle& v) {
  return py::str(py::type::of(v).attr("__name__"));
}

// The field `member`'s value as one Tensor (a NumPy array or a wdscpp.Tensor), else an error
// saying what `what` must hold.
wds::Value tensor_from_python(const py::handle& v, const std::string& member, const char* what) {
  wds::Value t = value_from_python(v, member);
  if (!t.is<wds::Tensor>()) {
    throw wds::Error::invalid_argument(
        "", member, std::string(what) + ", not a " + type_name(v) + " (cannot encode it)");
  }
  return t;
}

// A field's value shaped by its kind (see write_sample), where the plain conversion would make
// something else of it: an empty list is no JSON array here, a dict of arrays no JSON object.
wds::Value value_of_kind(const py::handle& v, const std::string& kind, const std::string& member) {
  if (kind == "document") {  // msgpack, CBOR: any JSON-like tree, bytes as binary values
    py::handle bad;
    if (auto j = json_from_python(v, true, &bad)) return std::move(*j);
    std::string what = py::repr(bad ? bad : v);
    if (what.size() > 60) what = what.substr(0, 57) + "...";
    throw wds::Error::invalid_argument(
        "", member,
        "cannot encode " + what + " (type " + type_name(bad ? bad : v) +
            ") in a document: it holds None, bool, int (-2**63 to 2**64-1), float, str, bytes, "
            "and lists, tuples and str-keyed dicts of these");
  }
  if (kind == "tensors") {  // tenbin: one array or a list of them
    if (!PyList_Check(v.ptr()) && !PyTuple_Check(v.ptr())) {
      return tensor_from_python(v, member, "a tenbin field holds a NumPy array or a list of them");
    }
    wds::Tuple t;
    for (py::handle e : v) {
      t.push_back(tensor_from_python(e, member, "a tenbin field's list holds NumPy arrays"));
    }
    return t;
  }
  if (kind == "arrays") {  // npz: a dict of arrays by name
    if (!PyDict_Check(v.ptr())) {
      throw wds::Error::invalid_argument(
          "", member, "an npz field holds a dict of NumPy arrays, not a " + type_name(v));
    }
    wds::Dict d;
    for (auto [k, e] : py::reinterpret_borrow<py::dict>(v)) {
      if (!PyUnicode_Check(k.ptr())) {
        throw wds::Error::invalid_argument(
            "", member, "an npz field's dict has a key that is no str (a " + type_name(k) + ")");
      }
      d.push_back(
          wds::DictItem{k.cast<std::string>(),
                        tensor_from_python(e, member, "an npz field's dict holds NumPy arrays")});
    }
    return d;
  }
  throw wds::Error::invalid_argument("", member, "unknown kind of value '" + kind + "'");
}

// Writes one sample; `fields` are (name, value) pairs. encode: values by extension (wds/
// encode.hpp, a trailing .gz compressing); otherwise values must be bytes-like and are written
// as they are. kinds: field name -> how its value is converted ("document": a msgpack or CBOR
// tree, "tensors": tenbin's list of arrays, "arrays": npz's dict of arrays), as writers.py
// chooses by extension; encode_as: field name -> the name whose extension chooses the encoding
// (webdataset writes "img" as "jpg"). Returns the payload bytes written.
std::uint64_t write_sample(PyTarWriter& self, const std::string& key,
                           const std::vector<std::pair<std::string, py::object>>& fields,
                           bool encode, const std::map<std::string, std::string>& kinds,
                           const std::map<std::string, std::string>& encode_as) {
  std::vector<std::pair<std::string, wds::Value>> values;
  values.reserve(fields.size());
  for (const auto& [ext, v] : fields) {
    const std::string member = key + "." + ext;
    if (!encode && !is_bytes_like(v)) {
      throw wds::Error::invalid_argument(
          self.url, member, "not bytes (" + type_name(v) + ") and the writer does not encode");
    }
    const auto kind = kinds.find(ext);
    values.emplace_back(ext, kind == kinds.end() ? value_from_python(v, member)
                                                 : value_of_kind(v, kind->second, member));
  }
  NoGil nogil;
  std::lock_guard lock(self.mu);
  if (!self.w) throw wds::Error::invalid_argument(self.url, key, "write after close");
  wds::Sample s(key);
  for (auto& [ext, v] : values) {
    const std::string member = key + "." + ext;
    const auto as = encode_as.find(ext);
    wds::Bytes b = !encode
                       ? std::move(v.get<wds::Bytes>())
                       : wds::encode_field(as == encode_as.end() ? ext : as->second, v, {}, member);
    if (!s.add(ext, std::move(b))) {
      throw wds::Error::invalid_argument(self.url, member, "duplicate field");
    }
  }
  self.w->write(s);
  return s.payload_bytes();
}

}  // namespace

void bind_writers(py::module_& m) {
  py::class_<PyTarWriter>(m, "_TarWriter",
                          "The engine of wdscpp.TarWriter: writes samples as tar members.")
      .def(py::init(&make_writer), py::arg("fileobj"), py::arg("compression") = "none",
           py::arg("format") = "ustar", py::arg("mode") = 0444, py::arg("mtime") = py::none(),
           py::arg("allow_pipe") = false)
      .def("write", &write_sample, py::arg("key"), py::arg("fields"), py::arg("encode") = true,
           py::arg("kinds") = std::map<std::string, std::string>(),
           py::arg("encode_as") = std::map<std::string, std::string>())
      .def(
          "close",
          [](PyTarWriter& self) {
            NoGil nogil;
            std::lock_guard lock(self.mu);
            if (!self.w) return;
            // Dropped even if close() fails, so a failed shard is never committed later.
            std::unique_ptr<wds::TarWriter> w = std::move(self.w);
            w->close();
          },
          "Finishes the archive and commits the sink (renames the file, uploads). Idempotent.")
      .def_property_readonly("closed", [](const PyTarWriter& self) { return !self.w; })
      .def_readonly("url", &PyTarWriter::url);
}

}  // namespace wdscpp
