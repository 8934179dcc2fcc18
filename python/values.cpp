// Values as Python objects: Tensor (DLPack and NumPy views of the same memory), Json and Value
// trees (a Dict as a dict), and the dict-like Sample and DecodedSample, whose fields are
// converted on access.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "python/bindings.hpp"
#include "wds/dlpack.hpp"

namespace wdscpp {
namespace {

py::object json_to_python(const wds::Json& j) {
  using V = wds::Json::value_t;
  switch (j.type()) {
    case V::boolean:
      return py::bool_(j.get<bool>());
    case V::number_integer:
      return py::int_(j.get<std::int64_t>());
    case V::number_unsigned:
      return py::int_(j.get<std::uint64_t>());
    case V::number_float:
      return py::float_(j.get<double>());
    case V::string:
      return py::str(j.get_ref<const std::string&>());
    case V::array: {
      py::list out;
      for (const auto& e : j) out.append(json_to_python(e));
      return out;
    }
    case V::object: {
      py::dict out;
      for (const auto& el : j.items()) out[py::str(el.key())] = json_to_python(el.value());
      return out;
    }
    case V::binary: {
      const auto& b = j.get_binary();
      return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
    }
    default:
      return py::none();
  }
}

py::object to_python(const wds::Value& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          return py::none();
        } else if constexpr (std::is_same_v<X, wds::Bytes>) {
          return py::bytes(reinterpret_cast<const char*>(x.data()), x.size());
        } else if constexpr (std::is_same_v<X, std::string>) {
          return py::str(x);
        } else if constexpr (std::is_same_v<X, std::int64_t>) {
          return py::int_(x);
        } else if constexpr (std::is_same_v<X, double>) {
          return py::float_(x);
        } else if constexpr (std::is_same_v<X, wds::Json>) {
          return json_to_python(x);
        } else if constexpr (std::is_same_v<X, wds::Tensor>) {
          return py::cast(PyTensor{x});
        } else if constexpr (std::is_same_v<X, wds::Dict>) {
          // An npz field: a dict of arrays, as numpy.load gives.
          py::dict out;
          for (const wds::DictItem& item : x) out[py::str(item.name)] = to_python(item.value);
          return out;
        } else {
          py::list out;
          for (const wds::Value& e : x) out.append(to_python(e));
          return out;
        }
      },
      v.variant());
}

// The DLPack capsule of a tensor: a view of its memory, kept alive until the consumer (or, if
// none takes it, the capsule) calls the deleter.
py::object dlpack_capsule(const wds::Tensor& t) {
  DLManagedTensor* m = wds::to_dlpack(t);
  PyObject* cap = PyCapsule_New(
      m, "dltensor", +[](PyObject* c) {
        if (PyCapsule_IsValid(c, "dltensor")) {  // never consumed (a consumer renames it)
          auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
          if (mt && mt->deleter) mt->deleter(mt);
        }
      });
  if (!cap) {
    m->deleter(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

// A NumPy array viewing the tensor's memory (no copy); the array's base keeps the storage.
py::array to_numpy(const wds::Tensor& t) {
  const std::size_t itemsize = wds::dtype_size(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides(shape.size(), static_cast<py::ssize_t>(itemsize));
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  auto owner = std::make_unique<wds::Tensor>(t);
  py::capsule base(owner.get(), [](void* p) {
    std::unique_ptr<wds::Tensor> owned(static_cast<wds::Tensor*>(p));
  });
  owner.release();  // now the capsule's
  return py::array(py::dtype(std::string(wds::to_string(t.dtype()))), std::move(shape),
                   std::move(strides), t.data(), base);
}

py::list sample_keys(const wds::Sample& s) {
  py::list keys;
  keys.append("__key__");
  keys.append("__url__");
  if (!s.local_path().empty()) keys.append("__local_path__");
  for (const wds::Field& f : s.fields()) keys.append(f.ext);
  return keys;
}
std::optional<py::object> sample_get(const wds::Sample& s, const std::string& k) {
  if (k == "__key__") return py::str(s.key());
  if (k == "__url__") return py::str(s.url());
  if (k == "__local_path__" && !s.local_path().empty()) return py::str(s.local_path());
  if (const wds::Bytes* b = s.find(k)) {
    return py::bytes(reinterpret_cast<const char*>(b->data()), b->size());
  }
  return std::nullopt;
}
py::list sample_keys(const wds::DecodedSample& s) {
  py::list keys;
  if (!s.find("__key__")) keys.append("__key__");
  keys.append("__url__");
  for (const auto& f : s.fields()) keys.append(f.ext);
  return keys;
}
std::optional<py::object> sample_get(const wds::DecodedSample& s, const std::string& k) {
  if (const wds::Value* v = s.find(k)) return to_python(*v);
  if (k == "__key__") return py::str(s.key());
  if (k == "__url__") return py::str(s.url());
  return std::nullopt;
}

// The dict interface of both sample classes.
template <class W>
void def_mapping(py::class_<W>& c) {
  c.def("__getitem__",
        [](const W& w, const std::string& k) {
          if (auto v = sample_get(w.s, k)) return *v;
          throw py::key_error(k);
        })
      .def(
          "get",
          [](const W& w, const std::string& k, py::object dflt) {
            if (auto v = sample_get(w.s, k)) return *v;
            return dflt;
          },
          py::arg("key"), py::arg("default") = py::none())
      .def("__contains__",
           [](const W& w, const std::string& k) { return sample_get(w.s, k).has_value(); })
      .def("keys", [](const W& w) { return sample_keys(w.s); })
      .def("__iter__", [](const W& w) { return py::iter(sample_keys(w.s)); })
      .def("__len__", [](const W& w) { return sample_keys(w.s).size(); })
      .def("values",
           [](const W& w) {
             py::list out;
             for (auto k : sample_keys(w.s)) out.append(*sample_get(w.s, py::cast<std::string>(k)));
             return out;
           })
      .def("items",
           [](const W& w) {
             py::list out;
             for (auto k : sample_keys(w.s)) {
               out.append(py::make_tuple(k, *sample_get(w.s, py::cast<std::string>(k))));
             }
             return out;
           })
      .def("__repr__", [](const W& w) {
        std::string r = "<sample " + w.s.key();
        for (const auto& f : w.s.fields()) r += " " + f.ext;
        return r + ">";
      });
}

// The element type of a NumPy array, or nothing for one a Tensor cannot hold (object, str, ...).
std::optional<wds::DType> dtype_of(const py::dtype& dt) {
  const std::string name = py::str(dt.attr("name"));
  for (int i = 0; i <= static_cast<int>(wds::DType::complex128); ++i) {
    const auto d = static_cast<wds::DType>(i);
    if (wds::to_string(d) == name) return d;
  }
  return std::nullopt;
}

// A copy of the array as a Tensor (C order, native byte order).
wds::Tensor to_tensor(py::array a, const std::string& member) {
  a = py::array::ensure(a, py::array::c_style);
  if (!a) throw py::error_already_set();
  const std::optional<wds::DType> d = dtype_of(a.dtype());
  if (!d) {
    throw wds::Error::invalid_argument(
        "", member, "cannot write an array of dtype " + std::string(py::str(a.dtype())));
  }
  if (a.dtype().byteorder() == '>' || a.dtype().byteorder() == '<') {  // not native ('=')
    a = a.attr("astype")(a.dtype().attr("newbyteorder")("="));
    a = py::array::ensure(a, py::array::c_style);
  }
  wds::Tensor::Shape shape(a.shape(), a.shape() + a.ndim());
  wds::Tensor t(*d, std::move(shape));
  if (t.nbytes()) std::memcpy(t.data(), a.data(), t.nbytes());
  return t;
}

wds::Bytes to_bytes(const py::handle& v) {
  if (PyBytes_Check(v.ptr())) {
    return wds::Bytes::copy_of(
        std::string_view(PyBytes_AS_STRING(v.ptr()), PyBytes_GET_SIZE(v.ptr())));
  }
  // bytearray, memoryview and other buffers: their bytes in C order.
  py::bytes b = py::reinterpret_steal<py::bytes>(PyBytes_FromObject(v.ptr()));
  if (!b) throw py::error_already_set();
  return wds::Bytes::copy_of(
      std::string_view(PyBytes_AS_STRING(b.ptr()), PyBytes_GET_SIZE(b.ptr())));
}

}  // namespace

py::object value_to_python(const wds::Value& v) {
  return to_python(v);
}

bool is_bytes_like(const py::handle& v) {
  return PyBytes_Check(v.ptr()) || PyByteArray_Check(v.ptr()) || PyMemoryView_Check(v.ptr());
}

std::optional<wds::Json> json_from_python(const py::handle& v, bool bytes_as_binary,
                                          py::handle* bad, int depth) {
  auto refuse = [&]() -> std::optional<wds::Json> {
    if (bad && !*bad) *bad = v;
    return std::nullopt;
  };
  if (depth > 64) return refuse();
  if (v.is_none()) return wds::Json(nullptr);
  if (PyBool_Check(v.ptr())) return wds::Json(v.cast<bool>());
  if (PyLong_Check(v.ptr())) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (!overflow) return wds::Json(x);
    // Up to 2**64 - 1, as msgpack and CBOR hold them.
    const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
    if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      return refuse();
    }
    return wds::Json(u);
  }
  if (PyFloat_Check(v.ptr())) return wds::Json(v.cast<double>());
  if (PyUnicode_Check(v.ptr())) return wds::Json(v.cast<std::string>());
  if (bytes_as_binary && is_bytes_like(v)) {
    const wds::Bytes b = to_bytes(v);
    const auto* p = reinterpret_cast<const std::uint8_t*>(b.data());
    return wds::Json::binary(std::vector<std::uint8_t>(p, p + b.size()));
  }
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    wds::Json out = wds::Json::array();
    for (py::handle e : v) {
      auto j = json_from_python(e, bytes_as_binary, bad, depth + 1);
      if (!j) return std::nullopt;
      out.push_back(std::move(*j));
    }
    return out;
  }
  if (PyDict_Check(v.ptr())) {
    wds::Json out = wds::Json::object();
    for (auto [k, e] : py::reinterpret_borrow<py::dict>(v)) {
      if (!PyUnicode_Check(k.ptr())) {
        if (bad && !*bad) *bad = k;
        return std::nullopt;
      }
      auto j = json_from_python(e, bytes_as_binary, bad, depth + 1);
      if (!j) return std::nullopt;
      out[k.cast<std::string>()] = std::move(*j);
    }
    return out;
  }
  return refuse();
}

wds::Value value_from_python(const py::handle& v, const std::string& member) {
  if (is_bytes_like(v)) return to_bytes(v);
  // Containers (a decoded pickle, a tenbin list of arrays): JSON when they are JSON, else a
  // list of values.
  if (PyDict_Check(v.ptr()) || PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    if (auto j = json_from_python(v, false)) return std::move(*j);
    if (!PyDict_Check(v.ptr())) {
      wds::Tuple t;
      for (py::handle e : v) t.push_back(value_from_python(e, member));
      return t;
    }
    // A dict of arrays (an npz) with str keys: a Dict.
    wds::Dict d;
    for (auto [k, e] : py::reinterpret_borrow<py::dict>(v)) {
      if (!PyUnicode_Check(k.ptr())) {
        throw wds::Error::invalid_argument("", member,
                                           "a dict with a key that is no str cannot be a field");
      }
      d.push_back(wds::DictItem{k.cast<std::string>(), value_from_python(e, member)});
    }
    return d;
  }
  if (PyUnicode_Check(v.ptr())) return v.cast<std::string>();
  if (py::isinstance<PyTensor>(v)) return v.cast<const PyTensor&>().t;
  if (py::isinstance<py::array>(v)) return to_tensor(py::reinterpret_borrow<py::array>(v), member);
  if (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr())) return v.cast<std::int64_t>();
  if (PyFloat_Check(v.ptr())) return v.cast<double>();
  throw wds::Error::invalid_argument(
      "", member,
      "a value of type " + std::string(py::str(py::type::of(v).attr("__name__"))) +
          " cannot be a field here (bytes, str, int, float, a NumPy array, a wdscpp.Tensor, "
          "JSON-like dicts and lists, lists of these, dicts of these with str keys)");
}

py::object item_to_python(wds::Sample&& s) {
  return py::cast(PySample{std::move(s)});
}
py::object item_to_python(wds::DecodedSample&& s) {
  return py::cast(PyDecoded{std::move(s)});
}
py::object item_to_python(wds::Tuple&& t) {
  py::tuple out(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) out[i] = to_python(t[i]);
  return out;
}
py::object item_to_python(PyItem&& item) {
  return item.take();
}

void bind_values(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor",
                       "A dense C-contiguous CPU array; __dlpack__ and numpy() share its memory.")
      .def_property_readonly("shape",
                             [](const PyTensor& t) {
                               py::tuple s(t.t.ndim());
                               for (std::size_t i = 0; i < t.t.ndim(); ++i) s[i] = t.t.shape()[i];
                               return s;
                             })
      .def_property_readonly("dtype",
                             [](const PyTensor& t) { return std::string(to_string(t.t.dtype())); })
      .def_property_readonly("ndim", [](const PyTensor& t) { return t.t.ndim(); })
      .def_property_readonly("nbytes", [](const PyTensor& t) { return t.t.nbytes(); })
      .def_property_readonly(
          "data_ptr",
          [](const PyTensor& t) { return reinterpret_cast<std::uintptr_t>(t.t.data()); })
      .def("__len__",
           [](const PyTensor& t) {
             if (t.t.ndim() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.t.shape()[0];
           })
      .def("__getitem__",
           [](const PyTensor& t, std::int64_t i) {
             if (t.t.ndim() == 0) throw py::index_error("a 0-d tensor has no rows");
             const std::int64_t n = t.t.shape()[0];
             if (i < 0) i += n;
             if (i < 0 || i >= n) throw py::index_error("tensor index out of range");
             return PyTensor{t.t[i]};
           })
      .def("__dlpack__",
           [](const PyTensor& t, py::args, py::kwargs) { return dlpack_capsule(t.t); })
      .def("__dlpack_device__", [](const PyTensor&) { return py::make_tuple(int(kDLCPU), 0); })
      .def(
          "numpy", [](const PyTensor& t) { return to_numpy(t.t); },
          "A NumPy array viewing the same memory (no copy).")
      .def(
          "__array__",
          [](const PyTensor& t, py::object dtype, py::object) -> py::object {
            py::array a = to_numpy(t.t);
            if (dtype.is_none()) return a;
            return a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__repr__", [](const PyTensor& t) { return "<wdscpp.Tensor " + t.t.describe() + ">"; });

  py::class_<PySample> sample(m, "Sample", "A raw sample: s['__key__'], s['jpg'] (bytes), ...");
  def_mapping(sample);
  py::class_<PyDecoded> decoded(m, "DecodedSample",
                                "A decoded sample (or a batch of them): fields as Python values.");
  def_mapping(decoded);
}

}  // namespace wdscpp
