// The writers as Python objects: _TarWriter, a wds::TarWriter writing to a URL (open_sink) or to a
// Python file object. The webdataset-compatible TarWriter and ShardWriter (python/wdscpp/
// writers.py) are built on it: they choose the encoding of Python-only values (pickle, JSON
// text), and this unit encodes the rest by extension (wds/encode.hpp: strings, numbers, npy,
// images) and writes.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
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
    py::gil_scoped_release nogil;  // an upload sink may resolve credentials
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

// Writes one sample; `fields` are (name, value) pairs. encode: values by extension (wds/
// encode.hpp, a trailing .gz compressing); otherwise values must be bytes-like and are written
// as they are. Returns the payload bytes written.
std::uint64_t write_sample(PyTarWriter& self, const std::string& key,
                           const std::vector<std::pair<std::string, py::object>>& fields,
                           bool encode) {
  std::vector<std::pair<std::string, wds::Value>> values;
  values.reserve(fields.size());
  for (const auto& [ext, v] : fields) {
    const std::string member = key + "." + ext;
    if (!encode && !is_bytes_like(v)) {
      throw wds::Error::invalid_argument(
          self.url, member,
          "not bytes (" + std::string(py::str(py::type::of(v).attr("__name__"))) +
              ") and the writer does not encode");
    }
    values.emplace_back(ext, value_from_python(v, member));
  }
  py::gil_scoped_release nogil;
  std::lock_guard lock(self.mu);
  if (!self.w) throw wds::Error::invalid_argument(self.url, key, "write after close");
  wds::Sample s(key);
  for (auto& [ext, v] : values) {
    const std::string member = key + "." + ext;
    wds::Bytes b = encode ? wds::encode_field(ext, v, {}, member) : std::move(v.get<wds::Bytes>());
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
      .def("write", &write_sample, py::arg("key"), py::arg("fields"), py::arg("encode") = true)
      .def(
          "close",
          [](PyTarWriter& self) {
            py::gil_scoped_release nogil;
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
