// _Reader and _Writer: one URL's bytes through the engine's storage (every backend: files,
// pipe:, http(s), s3, azure, ...), for wdscpp.gopen. The GIL is released while bytes move.
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "python/bindings.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"

namespace wdscpp {
namespace {

class Reader {
 public:
  Reader(const std::string& url, bool allow_pipe) {
    wds::OpenOptions options;
    options.allow_pipe = allow_pipe;
    NoGil nogil;
    src_ = wds::open_url(url, options);
  }

  // Up to n bytes (all that is left for n < 0); empty at the end.
  py::bytes read(std::int64_t n) {
    std::string out;
    {
      NoGil nogil;
      while (src_ && (n < 0 || out.size() < static_cast<std::size_t>(n))) {
        if (pos_ == chunk_.size()) {
          chunk_ = src_->read();
          pos_ = 0;
          if (chunk_.empty()) break;
        }
        std::size_t take = chunk_.size() - pos_;
        if (n >= 0) take = std::min(take, static_cast<std::size_t>(n) - out.size());
        out.append(reinterpret_cast<const char*>(chunk_.data() + pos_), take);
        pos_ += take;
      }
    }
    return py::bytes(out);
  }

  void close() {
    NoGil nogil;
    src_.reset();
    chunk_ = {};
    pos_ = 0;
  }

 private:
  std::unique_ptr<wds::ByteSource> src_;
  std::span<const std::byte> chunk_;
  std::size_t pos_ = 0;
};

class Writer {
 public:
  Writer(const std::string& url, bool allow_pipe) {
    wds::SinkOptions options;
    options.allow_pipe = allow_pipe;
    NoGil nogil;
    sink_ = wds::open_sink(url, options);
  }
  void write(const py::bytes& data) {
    if (!sink_) throw wds::Error::invalid_argument("write to a closed stream");
    std::string_view view = data;
    NoGil nogil;
    sink_->write(std::as_bytes(std::span(view.data(), view.size())));
  }
  // Finishes the write (renames a file into place, uploads, waits for a pipe's command).
  void close() {
    if (!sink_) return;
    auto sink = std::move(sink_);
    NoGil nogil;
    sink->close();
  }

 private:
  std::unique_ptr<wds::ByteSink> sink_;
};

}  // namespace

void bind_streams(py::module_& m) {
  py::class_<Reader>(m, "_Reader", "A URL's bytes, read through the engine's storage.")
      .def(py::init<const std::string&, bool>(), py::arg("url"), py::arg("allow_pipe") = false)
      .def("read", &Reader::read, py::arg("n") = -1)
      .def("close", &Reader::close);
  py::class_<Writer>(m, "_Writer",
                     "Bytes written to a URL through the engine's sinks; close() finishes them.")
      .def(py::init<const std::string&, bool>(), py::arg("url"), py::arg("allow_pipe") = false)
      .def("write", &Writer::write)
      .def("close", &Writer::close);
}

}  // namespace wdscpp
