// python/module.cpp: _wdscpp, the CPython extension behind the `wdscpp` package.
//
// A Python Dataset holds one of four typed C++ pipelines (raw samples, decoded samples, tuples,
// or Python objects made by map()) and dispatches each fluent method to the pipeline it holds;
// a Python Loader holds the matching wds::Loader. Stages run in C++ on the loader's threads (or
// the caller's, when a Dataset is iterated directly) with the GIL released; a Python callable
// given to map() or select() takes the GIL for each call. Items become Python objects only when
// they reach Python: tensors as Tensor (DLPack and NumPy views of the same memory), samples as
// dict-like objects whose fields are converted on access.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "wds/dlpack.hpp"
#include "wds/wds.hpp"

namespace py = pybind11;

namespace {

// --- Python objects owned by C++ stages ---

// The GIL for a call into Python from any thread. A loader's worker thread is unknown to Python:
// pybind11's gil_scoped_acquire makes it a thread state and deletes it again at the end of every
// call, which was most of a map() call's cost (~15 of ~24 µs per item). Here a thread Python
// does not know keeps the state it gets at its first call until it ends.
class Gil {
 public:
  Gil() {
    thread_local Keeper keeper;  // first call on this thread: before the state exists
    gil_.emplace();
    keeper.keep(*gil_);
  }

 private:
  struct Keeper {
    bool foreign = PyGILState_GetThisThreadState() == nullptr;
    bool kept = false;
    void keep(py::gil_scoped_acquire& g) {
      if (foreign && !kept) {
        g.inc_ref();
        kept = true;
      }
    }
    // At the thread's end: drop the reference kept above; the acquire's own release then
    // deletes the state. Loaders are closed before finalization, so workers end before it.
    ~Keeper() {
      if (kept && Py_IsInitialized() && !_Py_IsFinalizing()) {
        py::gil_scoped_acquire g;
        g.dec_ref();
      }
    }
  };
  std::optional<py::gil_scoped_acquire> gil_;
};

// An item of a pipeline after map(): a Python object, owned by C++ code that may run without
// the GIL. Moves never touch the reference count; the destructor takes the GIL to drop it.
class PyItem {
 public:
  PyItem() = default;
  explicit PyItem(py::object o) : p_(o.release().ptr()) {}
  PyItem(PyItem&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
  PyItem& operator=(PyItem&& other) noexcept {
    if (this != &other) {
      reset();
      p_ = std::exchange(other.p_, nullptr);
    }
    return *this;
  }
  PyItem(const PyItem&) = delete;
  PyItem& operator=(const PyItem&) = delete;
  ~PyItem() { reset(); }

  // The object, still owned by this item; needs the GIL to be used.
  py::handle get() const noexcept { return p_; }
  // The object, handed over to the caller; needs the GIL.
  py::object take() { return py::reinterpret_steal<py::object>(std::exchange(p_, nullptr)); }

 private:
  void reset() noexcept {
    if (p_ && Py_IsInitialized()) {
      Gil gil;
      Py_DECREF(p_);
    }
    p_ = nullptr;
  }
  PyObject* p_ = nullptr;
};

// A Python callable shared by every copy of a stage (one per loader worker): copying the
// shared_ptr needs no GIL, and the last owner drops the callable with the GIL.
struct PyFn {
  explicit PyFn(py::object f) : fn(std::move(f)) {}
  PyFn(const PyFn&) = delete;
  PyFn& operator=(const PyFn&) = delete;
  ~PyFn() {
    if (Py_IsInitialized()) {
      Gil gil;
      fn = py::object();
    } else {
      fn.release();  // the interpreter is gone: nothing to drop
    }
  }
  py::object fn;
};
using PyFnPtr = std::shared_ptr<const PyFn>;

// --- errors ---

// The exception classes, one per ErrorCode, made at import (owned by the module).
struct ErrorClasses {
  py::handle base, not_found, unavailable, corrupt_data, invalid_argument, permission_denied;
  py::handle of(wds::ErrorCode code) const {
    switch (code) {
      case wds::ErrorCode::not_found:
        return not_found;
      case wds::ErrorCode::unavailable:
        return unavailable;
      case wds::ErrorCode::corrupt_data:
        return corrupt_data;
      case wds::ErrorCode::invalid_argument:
        return invalid_argument;
      case wds::ErrorCode::permission_denied:
        return permission_denied;
    }
    return base;
  }
};
ErrorClasses g_errors;
// Python exceptions raised by map()/select() callables on worker threads, by the cause of the
// wds::Error that carried them to the consumer, so that the consumer re-raises the original
// exception (its type and traceback) rather than a wds error about it. Owned by the module.
py::handle g_pending;

const char* code_name(wds::ErrorCode code) {
  switch (code) {
    case wds::ErrorCode::not_found:
      return "not_found";
    case wds::ErrorCode::unavailable:
      return "unavailable";
    case wds::ErrorCode::corrupt_data:
      return "corrupt_data";
    case wds::ErrorCode::invalid_argument:
      return "invalid_argument";
    case wds::ErrorCode::permission_denied:
      return "permission_denied";
  }
  return "error";
}

// The Python exception for `e` (not raised); needs the GIL.
py::object make_exception(const wds::Error& e) {
  py::object exc = g_errors.of(e.code())(py::str(e.what()));
  exc.attr("code") = code_name(e.code());
  exc.attr("url") = e.url();
  exc.attr("member") = e.member();
  exc.attr("cause") = e.cause();
  return exc;
}

// Sets the Python error for a wds::Error reaching Python: the original exception of a Python
// callable, with a note naming the URL and sample, or the class of its category.
void raise_error(const wds::Error& e) {
  py::str cause(e.cause());
  if (g_pending && PyDict_Contains(g_pending.ptr(), cause.ptr()) == 1) {
    py::object original = py::reinterpret_borrow<py::dict>(g_pending)[cause];
    PyDict_DelItem(g_pending.ptr(), cause.ptr());
    if (py::hasattr(original, "add_note")) {
      original.attr("add_note")(py::str("wds: {}").format(e.what()));
    }
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(original.ptr())), original.ptr());
    return;
  }
  py::object exc = make_exception(e);
  PyErr_SetObject(g_errors.of(e.code()).ptr(), exc.ptr());
}

// A Python exception from a callable, as the wds::Error a stage hands to its handler; the
// exception itself waits in g_pending for the consumer. Needs the GIL.
wds::Error from_python(py::error_already_set& e, const char* stage) {
  std::string cause = std::string(stage) + ": " +
                      py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
                      py::str(e.value()).cast<std::string>();
  if (g_pending) {
    py::dict pending = py::reinterpret_borrow<py::dict>(g_pending);
    if (pending.size() > 64) pending.clear();  // exceptions a continuing handler skipped
    pending[py::str(cause)] = e.value();
  }
  return wds::Error(wds::ErrorCode::invalid_argument, "", "", cause);
}

// handler=: None (reraise), a name or one of the module's handler functions, or any callable
// taking the exception and returning true to skip the item, false to stop.
wds::ErrorHandler to_handler(const py::object& h, const py::module_& m) {
  if (h.is_none()) return wds::reraise_exception;
  std::string name;
  if (py::isinstance<py::str>(h)) {
    name = h.cast<std::string>();
  } else if (py::hasattr(h, "__name__") && py::hasattr(m, py::str(h.attr("__name__"))) &&
             m.attr(py::str(h.attr("__name__"))).ptr() == h.ptr()) {
    name = h.attr("__name__").cast<std::string>();
  }
  if (name == "reraise_exception") return wds::reraise_exception;
  if (name == "ignore_and_continue") return wds::ignore_and_continue;
  if (name == "ignore_and_stop") return wds::ignore_and_stop;
  if (name == "warn_and_continue") return wds::warn_and_continue;
  if (name == "warn_and_stop") return wds::warn_and_stop;
  if (!name.empty() || !PyCallable_Check(h.ptr())) {
    throw py::value_error(
        "handler: expected None, a callable or one of reraise_exception, "
        "ignore_and_continue, ignore_and_stop, warn_and_continue, "
        "warn_and_stop; got " +
        py::repr(h).cast<std::string>());
  }
  auto fn = std::make_shared<const PyFn>(h);
  return [fn](const wds::Error& e) -> bool {
    Gil gil;
    try {
      return py::cast<bool>(fn->fn(make_exception(e)));
    } catch (py::error_already_set&) {
      throw e;  // the handler re-raised (or failed): the error reaches the consumer
    }
  };
}

// --- values to Python ---

struct PyTensor {
  wds::Tensor t;
};

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
        } else {
          py::list out;
          for (const wds::Value& e : x) out.append(to_python(e));
          return out;
        }
      },
      v.variant());
}

// decode()'s image keywords as ImageDecodeOptions; bad values are ValueErrors (invalid_argument)
// when the stage is made.
wds::ImageDecodeOptions image_options(int resize, int crop, int random_resized_crop,
                                      std::pair<double, double> scale,
                                      std::pair<double, double> ratio, double flip,
                                      const py::object& normalize,
                                      const std::optional<std::string>& layout,
                                      const std::optional<std::string>& dtype, bool full_decode) {
  auto invalid = [](const std::string& what) {
    return wds::Error(wds::ErrorCode::invalid_argument, "", "", what);
  };
  wds::ImageDecodeOptions o;
  o.resize = resize;
  o.crop = crop;
  o.reduced_decode = !full_decode;
  o.random_resized_crop.size = random_resized_crop;
  std::tie(o.random_resized_crop.scale_min, o.random_resized_crop.scale_max) = scale;
  std::tie(o.random_resized_crop.ratio_min, o.random_resized_crop.ratio_max) = ratio;
  o.flip = flip;
  if (py::isinstance<py::str>(normalize)) {
    if (normalize.cast<std::string>() != "imagenet") {
      throw invalid("decode normalize='" + normalize.cast<std::string>() +
                    "': use 'imagenet' or (mean, std)");
    }
    wds::set_imagenet_normalization(o);
  } else if (!normalize.is_none()) {
    try {
      auto [mean, std] = normalize.cast<std::pair<std::vector<float>, std::vector<float>>>();
      o.mean = std::move(mean);
      o.std = std::move(std);
    } catch (const py::cast_error&) {
      throw invalid("decode normalize: use 'imagenet' or (mean, std), two sequences of numbers");
    }
  }
  if (layout) {
    if (*layout != "chw" && *layout != "hwc") {
      throw invalid("decode layout='" + *layout + "': use 'chw' or 'hwc'");
    }
    o.chw = *layout == "chw";
  }
  if (dtype) {
    if (*dtype == "uint8") {
      o.dtype = wds::DType::uint8;
    } else if (*dtype == "float16") {
      o.dtype = wds::DType::float16;
    } else if (*dtype == "float32") {
      o.dtype = wds::DType::float32;
    } else {
      throw invalid("decode dtype='" + *dtype + "': use 'uint8', 'float16' or 'float32'");
    }
  }
  return o;
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

// --- samples, dict-like ---

struct PySample {
  wds::Sample s;
};
struct PyDecoded {
  wds::DecodedSample s;
};

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

// --- pipelines ---

template <class T>
using P = wds::Pipeline<T>;
using AnyPipeline = std::variant<P<wds::Sample>, P<wds::DecodedSample>, P<wds::Tuple>, P<PyItem>>;

template <class T>
constexpr const char* item_kind() {
  if constexpr (std::is_same_v<T, wds::Sample>)
    return "sample";
  else if constexpr (std::is_same_v<T, wds::DecodedSample>)
    return "decoded";
  else if constexpr (std::is_same_v<T, wds::Tuple>)
    return "tuple";
  else
    return "python";
}

[[noreturn]] void wrong_kind(const char* method, const char* kind, const char* wanted) {
  throw py::type_error(std::string(method) + "() needs " + wanted + "; this dataset yields " +
                       kind + " items");
}

// --- one consumer thread at a time; fork() ---

// The name of the Python thread with this ident, for messages.
std::string thread_name(unsigned long ident) {
  for (py::handle t : py::module_::import("threading").attr("enumerate")()) {
    if (py::int_(t.attr("ident")).cast<unsigned long>() == ident) {
      return "'" + py::str(t.attr("name")).cast<std::string>() + "'";
    }
  }
  return std::to_string(ident);
}

// Who iterates a Loader (or a Dataset iterated directly). Their C++ objects take one consumer
// thread at a time, and a call releases the GIL while it waits: two threads in next() at once
// used to corrupt the hand-off (a hang, or an abort). Here a call overlapping another thread's
// call raises, and so does next() on a thread other than the one whose iter() began the pass
// (iter() on another thread begins a new pass, which that thread then owns): one of two threads
// iterating one Loader gets a RuntimeError, whatever the timing. Guarded by the GIL.
class Consumer {
 public:
  // Marks a call running until its end (the GIL released inside); throws RuntimeError if one
  // of another thread is.
  class Call {
   public:
    explicit Call(Consumer& c) : c_(&c) {}
    Call(Call&& other) noexcept : c_(std::exchange(other.c_, nullptr)) {}
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    Call& operator=(Call&&) = delete;
    ~Call() {
      if (c_) c_->busy_ = false;
    }

   private:
    Consumer* c_;
  };
  Call enter(const char* object, const char* method) {
    const unsigned long me = PyThread_get_thread_ident();
    if (busy_) {
      throw std::runtime_error(
          std::string("wdscpp.") + object + ": " + method + " on thread " + thread_name(me) +
          " while thread " + thread_name(busy_thread_) + " is in " + busy_method_ + " on it: a " +
          object + " has one consumer thread at a time (give each thread its own " + object + ")");
    }
    busy_ = true;
    busy_thread_ = me;
    busy_method_ = method;
    return Call(*this);
  }
  // iter(): this thread owns the pass it begins.
  void begin_pass() { owner_ = PyThread_get_thread_ident(); }
  void end_pass() { owner_.reset(); }
  // next(): only on the thread that began the pass.
  void check_owner(const char* object) const {
    const unsigned long me = PyThread_get_thread_ident();
    if (owner_ && *owner_ != me) {
      throw std::runtime_error(std::string("wdscpp.") + object + ": next() on thread " +
                               thread_name(me) + ", but thread " + thread_name(*owner_) +
                               " began the pass in progress: a " + object +
                               " has one consumer thread at a time (give each thread its own " +
                               object + "; iter() on this thread begins a new pass)");
    }
  }
  bool busy() const { return busy_; }
  // In a child after fork(): the threads of the parent are gone.
  void forget_threads() {
    busy_ = false;
    owner_.reset();
  }

 private:
  bool busy_ = false;
  unsigned long busy_thread_ = 0;
  const char* busy_method_ = "";
  std::optional<unsigned long> owner_;
};

struct Dataset {
  explicit Dataset(AnyPipeline pipeline) : p(std::move(pipeline)) {}
  Dataset(Dataset&& other) noexcept : p(std::move(other.p)) {}
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  ~Dataset();
  AnyPipeline p;
  Consumer consumer;
  bool tracked = false;         // in g_iterated (iter() was called on it)
  bool inherited_pass = false;  // its pass was begun by the parent before fork()
};

// Calls fn(item) for a map() or select(): the GIL for the call, the item made a Python object.
template <class T>
py::object call_python(const PyFn& fn, T&& item, const char* stage) {
  try {
    return fn.fn(item_to_python(std::move(item)));
  } catch (py::error_already_set& e) {
    throw from_python(e, stage);
  }
}

template <class T>
P<PyItem> map_pipeline(const P<T>& p, PyFnPtr fn, wds::ErrorHandler handler) {
  return p.then(wds::map(
      [fn](T&& item) -> std::optional<PyItem> {
        Gil gil;
        py::object out = call_python(*fn, std::move(item), "map");
        if (out.is_none()) return std::nullopt;  // webdataset's map: None drops the sample
        return PyItem(std::move(out));
      },
      std::move(handler)));
}

// select(pred) on items Python cannot see without converting them: the item is converted for
// the call and the original kept; for Python items the object itself is passed.
template <class T>
P<T> select_pipeline(const P<T>& p, PyFnPtr fn) {
  return p.select([fn](const T& item) -> bool {
    Gil gil;
    try {
      if constexpr (std::is_same_v<T, PyItem>) {
        return py::cast<bool>(fn->fn(item.get()));
      } else if constexpr (std::is_same_v<T, wds::Sample>) {
        return py::cast<bool>(fn->fn(py::cast(PySample{item})));
      } else if constexpr (std::is_same_v<T, wds::DecodedSample>) {
        return py::cast<bool>(fn->fn(py::cast(PyDecoded{item})));
      } else {
        return py::cast<bool>(fn->fn(item_to_python(wds::Tuple(item))));
      }
    } catch (py::error_already_set& e) {
      throw from_python(e, "select");
    }
  });
}

// Python items are batched into a list.
struct ListCollate {
  PyItem operator()(std::vector<PyItem>&& rows) const {
    Gil gil;
    py::list out;
    for (PyItem& r : rows) out.append(r.take());
    return PyItem(std::move(out));
  }
};

// --- loaders ---

template <class T>
using L = std::unique_ptr<wds::Loader<T>>;
using AnyLoader = std::variant<L<wds::Sample>, L<wds::DecodedSample>, L<wds::Tuple>, L<PyItem>>;

// Every live loader, so that they can be closed before the interpreter finalizes (atexit): a
// worker that asks for the GIL during finalization is ended by Python in the middle of C++
// code. Guarded by the GIL.
std::unordered_set<class PyLoader*> g_loaders;
// Every Dataset iterated directly (its pipeline may hold a live stream, whose sources may have
// threads), for fork(). Guarded by the GIL.
std::unordered_set<Dataset*> g_iterated;

Dataset::~Dataset() {
  if (tracked) g_iterated.erase(this);
}

// A C++ object of the parent, in a child after fork(): its threads do not exist here, so it is
// never destroyed (that would join them: std::system_error, an abort at exit). The child's
// copy of its memory is dropped with the child.
template <class T>
void abandon(T&& object) {
  std::make_unique<std::decay_t<T>>(std::forward<T>(object)).release();
}

// How long next() waits without the GIL before it looks for a signal (Ctrl-C): the
// KeyboardInterrupt comes within about this much.
constexpr std::chrono::milliseconds kSignalSlice{50};

class PyLoader {
 public:
  // Needs the GIL.
  explicit PyLoader(AnyLoader l) : l_(std::move(l)) { g_loaders.insert(this); }
  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;
  ~PyLoader() {
    g_loaders.erase(this);
    close();
  }
  // Stops and joins the workers, without the GIL (one may be waiting for it in a map()
  // callable); needs the GIL on entry. In a child after fork(), the parent's loader is only
  // abandoned. Never raises (the destructor's).
  void close() {
    if (getpid() != pid_) forked();
    py::gil_scoped_release nogil;
    std::visit([](auto& l) { l.reset(); }, l_);
  }
  // close() for Python's close() and `with`: waits in slices and runs Python's signal handlers
  // between them, so that Ctrl-C interrupts a close that waits for a worker inside a stalled
  // read (KeyboardInterrupt; the loader is closed for every other use, and close() again
  // goes on waiting). With `limit` (at exit), no signals: gives up after it and abandons the
  // workers, false then.
  bool close_interruptibly(std::optional<std::chrono::milliseconds> limit = std::nullopt) {
    if (getpid() != pid_) forked();
    return std::visit(
        [&](auto& l) {
          if (!l) return true;
          closing_ = true;
          const auto until = std::chrono::steady_clock::now() + limit.value_or(kForever);
          for (;;) {
            bool stopped = false;
            {
              py::gil_scoped_release nogil;
              stopped = l->stop_for(kSignalSlice);
            }
            if (stopped) break;
            if (limit) {
              if (std::chrono::steady_clock::now() < until) continue;
              abandon(std::move(l));
              return false;
            }
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
          }
          py::gil_scoped_release nogil;
          l.reset();  // the workers are joined: at once
          return true;
        },
        l_);
  }
  // In a child after fork(): the workers are the parent's.
  void forked() {
    if (inherited_) return;
    inherited_ = true;
    std::visit([](auto& l) { abandon(std::move(l)); }, l_);
    consumer.forget_threads();
  }
  // The loader, for a call; raises if it is closed or the parent's.
  template <class T>
  wds::Loader<T>& live(const L<T>& l) const {
    if (inherited_ || getpid() != pid_) {
      throw std::runtime_error(
          "wdscpp.Loader: this Loader was made in process " + std::to_string(pid_) +
          " and this is process " + std::to_string(getpid()) +
          ", a child made by fork(): its worker threads are not here. Make a new Loader in the "
          "child (with torch's DataLoader: num_workers=0, the Loader's own workers do the work)");
    }
    if (!l || closing_) throw py::value_error("this Loader is closed");
    return *l;
  }
  // Runs fn(loader) on the live loader without the GIL (a worker may be waiting for it).
  template <class F>
  void without_gil(F&& fn) {
    std::visit(
        [&](auto& x) {
          auto& loader = live(x);
          py::gil_scoped_release nogil;
          fn(loader);
        },
        l_);
  }

  AnyLoader l_;
  Consumer consumer;

 private:
  static constexpr std::chrono::milliseconds kForever{std::chrono::hours(24 * 365)};
  pid_t pid_ = getpid();
  bool inherited_ = false;
  bool closing_ = false;  // close() began (an interrupted one leaves the loader closed)
};

// os.register_at_fork(after_in_child=...): the parent's loaders and live streams are left alone.
void after_fork_in_child() {
  for (PyLoader* l : g_loaders) l->forked();
  for (Dataset* d : g_iterated) {
    // A copy of the pipeline is its configuration (epoch included) without the running pass.
    std::visit(
        [](auto& p) {
          auto fresh = p;
          abandon(std::move(p));
          p = std::move(fresh);
        },
        d->p);
    d->consumer.forget_threads();
    d->inherited_pass = true;
  }
}

// Loader.__next__: waits in slices, the GIL released, and runs Python's signal handlers between
// them; an exception from one (KeyboardInterrupt) leaves the loader as it was: the next call
// continues with the item it was waiting for.
py::object loader_next(PyLoader& l) {
  auto call = l.consumer.enter("Loader", "next()");
  l.consumer.check_owner("Loader");
  return std::visit(
      [&](auto& x) -> py::object {
        auto& loader = l.live(x);
        using Item = typename std::decay_t<decltype(loader)>::iterator::value_type;
        std::optional<Item> item;
        for (;;) {
          bool got = false;
          {
            py::gil_scoped_release nogil;
            got = loader.next_for(kSignalSlice, item);
            // A daemon thread must not take the GIL once the interpreter finalizes (Python ends
            // the thread inside this C++ frame): it waits on without it, as before.
            while (!got && _Py_IsFinalizing()) got = loader.next_for(std::chrono::hours(1), item);
          }
          if (got) break;
          if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        }
        if (!item) {
          l.consumer.end_pass();
          throw py::stop_iteration();
        }
        return item_to_python(std::move(*item));
      },
      l.l_);
}

// Dataset.__next__: the pipeline runs on this thread, the GIL released.
py::object dataset_next(Dataset& d) {
  auto call = d.consumer.enter("Dataset", "next()");
  if (d.inherited_pass) {
    throw std::runtime_error(
        "wdscpp.Dataset: its pass was begun in the parent process before fork(), and its "
        "sources are not in this process: begin a new pass with iter() here");
  }
  if (!d.tracked) throw py::stop_iteration();  // no pass begun yet
  d.consumer.check_owner("Dataset");
  return std::visit(
      [&](auto& p) -> py::object {
        using Item = typename std::decay_t<decltype(p)>::value_type;
        std::optional<Item> item;
        {
          py::gil_scoped_release nogil;
          item = p.next();
        }
        if (!item) {
          d.consumer.end_pass();
          throw py::stop_iteration();
        }
        return item_to_python(std::move(*item));
      },
      d.p);
}

std::vector<std::string> to_strings(const py::args& args, const char* method) {
  std::vector<std::string> out;
  for (py::handle a : args) {
    if (!py::isinstance<py::str>(a)) {
      throw py::type_error(std::string(method) + "(): expected strings, got " +
                           py::repr(a).cast<std::string>());
    }
    out.push_back(a.cast<std::string>());
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_wdscpp, m) {
  m.doc() = "The wds C++ engine: WebDataset pipelines and loaders (import wdscpp).";

  // Errors: one class per category under wdscpp.Error, each also a subclass of the built-in
  // exception a Python caller would catch for it.
  auto make_class = [&](const char* name, py::handle bases, const char* doc) {
    std::string full = std::string("wdscpp.") + name;
    PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
    if (!cls) throw py::error_already_set();
    m.attr(name) = py::reinterpret_steal<py::object>(cls);
    return py::handle(cls);
  };
  g_errors.base = make_class("Error", PyExc_Exception,
                             "A wds error: .code (category), .url, .member and .cause.");
  auto bases = [&](PyObject* builtin) {
    return py::make_tuple(g_errors.base, py::handle(builtin));
  };
  g_errors.not_found =
      make_class("NotFoundError", bases(PyExc_FileNotFoundError), "No such file, key or object.");
  g_errors.unavailable = make_class("UnavailableError", bases(PyExc_OSError),
                                    "A transient failure (I/O, network, 5xx): a retry may work.");
  g_errors.corrupt_data = make_class("CorruptDataError", py::make_tuple(g_errors.base),
                                     "The bytes are not what they claim to be.");
  g_errors.invalid_argument = make_class("InvalidArgumentError", bases(PyExc_ValueError),
                                         "A malformed request (pattern, option, field).");
  g_errors.permission_denied = make_class("PermissionDeniedError", bases(PyExc_PermissionError),
                                          "Access refused (EACCES, HTTP 401/403).");
  py::dict pending;
  m.attr("_pending_errors") = pending;
  g_pending = pending;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const wds::Error& e) {
      raise_error(e);
    }
  });

  // The handlers of webdataset, by name; WebDataset(handler=...) runs them in C++.
  m.attr("reraise_exception") = py::cpp_function(
      [](py::object e) -> bool {
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.ptr())), e.ptr());
        throw py::error_already_set();
      },
      py::name("reraise_exception"));
  m.def("ignore_and_continue", [](py::object) { return true; });
  m.def("ignore_and_stop", [](py::object) { return false; });
  m.def("warn_and_continue", [](py::object e) {
    py::module_::import("warnings").attr("warn")(py::str(e));
    return true;
  });
  m.def("warn_and_stop", [](py::object e) {
    py::module_::import("warnings").attr("warn")(py::str(e));
    return false;
  });

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

  py::class_<Dataset> ds(m, "Dataset", "A pipeline: fluent stages, one pass per iteration.");
  ds.def_property_readonly("item_kind",
                           [](const Dataset& d) {
                             return std::visit(
                                 [](const auto& p) {
                                   using T = typename std::decay_t<decltype(p)>::value_type;
                                   return item_kind<T>();
                                 },
                                 d.p);
                           })
      .def(
          "shuffle",
          [](const Dataset& d, std::size_t bufsize, std::size_t initial) {
            return std::visit([&](const auto& p) { return Dataset{p.shuffle(bufsize, initial)}; },
                              d.p);
          },
          py::arg("bufsize"), py::arg("initial") = 100)
      .def(
          "slice",
          [](const Dataset& d, std::uint64_t start, std::optional<std::uint64_t> stop,
             std::uint64_t step) {
            return std::visit([&](const auto& p) { return Dataset{p.slice(start, stop, step)}; },
                              d.p);
          },
          py::arg("start"), py::arg("stop") = py::none(), py::arg("step") = 1)
      .def(
          "repeat",
          [](const Dataset& d, std::optional<std::uint64_t> n) {
            return std::visit([&](const auto& p) { return Dataset{p.repeat(n)}; }, d.p);
          },
          py::arg("nepochs") = py::none())
      .def("with_epoch",
           [](const Dataset& d, std::uint64_t n) {
             return std::visit([&](const auto& p) { return Dataset{p.with_epoch(n)}; }, d.p);
           })
      .def("with_length",
           [](const Dataset& d, std::uint64_t n) {
             return std::visit([&](const auto& p) { return Dataset{p.with_length(n)}; }, d.p);
           })
      .def(
          "decode",
          [m](const Dataset& d, py::args specs, py::object handler, std::vector<std::string> only,
              int resize, int crop, int random_resized_crop, std::pair<double, double> scale,
              std::pair<double, double> ratio, double flip, py::object normalize,
              std::optional<std::string> layout, std::optional<std::string> dtype,
              bool full_decode) {
            wds::DecodeOptions options;
            options.handler = to_handler(handler, m);
            options.only = std::move(only);
            options.image = image_options(resize, crop, random_resized_crop, scale, ratio, flip,
                                          normalize, layout, dtype, full_decode);
            std::vector<wds::Decoder> decoders;
            for (std::string& s : to_strings(specs, "decode"))
              decoders.emplace_back(std::string_view(s));
            return std::visit(
                [&](const auto& p) -> Dataset {
                  using T = typename std::decay_t<decltype(p)>::value_type;
                  if constexpr (std::is_same_v<T, wds::Sample> ||
                                std::is_same_v<T, wds::DecodedSample>) {
                    return Dataset{p.then(wds::decode(decoders, options))};
                  } else {
                    wrong_kind("decode", item_kind<T>(), "samples");
                  }
                },
                d.p);
          },
          py::arg("handler") = py::none(), py::arg("only") = std::vector<std::string>{},
          py::arg("resize") = 0, py::arg("crop") = 0, py::arg("random_resized_crop") = 0,
          py::arg("scale") = std::pair<double, double>{0.08, 1.0},
          py::arg("ratio") = std::pair<double, double>{3.0 / 4.0, 4.0 / 3.0}, py::arg("flip") = 0.0,
          py::arg("normalize") = py::none(), py::arg("layout") = py::none(),
          py::arg("dtype") = py::none(), py::arg("full_decode") = false,
          "decode('rgb8', ...): image specs; txt, cls, json and npy fields always decode.\n"
          "Images: resize=N (shorter side), crop=N (centre), or random_resized_crop=N with\n"
          "scale=(min, max) and ratio=(min, max) as torchvision's RandomResizedCrop; flip=p;\n"
          "normalize='imagenet' or (mean, std); layout='chw'|'hwc'; dtype='uint8'|'float16'|\n"
          "'float32'. Each sample's crop and flip come from (seed, epoch, shard name, key).")
      .def(
          "to_tuple",
          [m](const Dataset& d, py::args fields, bool missing_is_error, py::object handler) {
            wds::ToTupleOptions options;
            options.missing_is_error = missing_is_error;
            options.handler = to_handler(handler, m);
            auto stage = wds::to_tuple(to_strings(fields, "to_tuple"), options);
            return std::visit(
                [&](const auto& p) -> Dataset {
                  using T = typename std::decay_t<decltype(p)>::value_type;
                  if constexpr (std::is_same_v<T, wds::Sample> ||
                                std::is_same_v<T, wds::DecodedSample>) {
                    return Dataset{p.then(stage)};
                  } else {
                    wrong_kind("to_tuple", item_kind<T>(), "samples");
                  }
                },
                d.p);
          },
          py::arg("missing_is_error") = true, py::arg("handler") = py::none())
      .def(
          "batched",
          [](const Dataset& d, std::size_t n, bool partial) {
            return std::visit(
                [&](const auto& p) -> Dataset {
                  using T = typename std::decay_t<decltype(p)>::value_type;
                  if constexpr (std::is_same_v<T, wds::Sample>) {
                    wrong_kind("batched", item_kind<T>(),
                               "decoded samples, tuples or Python items (decode() first)");
                  } else if constexpr (std::is_same_v<T, PyItem>) {
                    return Dataset{p.then(wds::batched(n, ListCollate{}, partial))};
                  } else {
                    return Dataset{p.then(wds::batched(n, partial))};
                  }
                },
                d.p);
          },
          py::arg("batchsize"), py::arg("partial") = true)
      .def("unbatched",
           [](const Dataset& d) {
             return std::visit(
                 [&](const auto& p) -> Dataset {
                   using T = typename std::decay_t<decltype(p)>::value_type;
                   if constexpr (std::is_same_v<T, wds::Tuple> ||
                                 std::is_same_v<T, wds::DecodedSample>) {
                     return Dataset{p.then(wds::unbatched())};
                   } else {
                     wrong_kind("unbatched", item_kind<T>(), "batches of tuples or samples");
                   }
                 },
                 d.p);
           })
      .def(
          "map",
          [m](const Dataset& d, py::function f, py::object handler) {
            auto fn = std::make_shared<const PyFn>(f);
            auto h = to_handler(handler, m);
            return std::visit([&](const auto& p) { return Dataset{map_pipeline(p, fn, h)}; }, d.p);
          },
          py::arg("f"), py::arg("handler") = py::none(),
          "f(item) -> any Python object (None drops the item); runs on the loader's threads, "
          "taking the GIL for each call.")
      .def("select",
           [](const Dataset& d, py::function f) {
             auto fn = std::make_shared<const PyFn>(f);
             return std::visit([&](const auto& p) { return Dataset{select_pipeline(p, fn)}; }, d.p);
           })
      .def("__len__",
           [](const Dataset& d) {
             try {
               return std::visit([](const auto& p) { return p.size(); }, d.p);
             } catch (const wds::Error& e) {
               // TypeError, as len() of an object without a length: list(ds) then just iterates.
               throw py::type_error(e.cause());
             }
           })
      .def_property_readonly(
          "epoch",
          [](const Dataset& d) { return std::visit([](const auto& p) { return p.epoch(); }, d.p); })
      .def("set_epoch",
           [](Dataset& d, std::uint64_t e) {
             auto call = d.consumer.enter("Dataset", "set_epoch()");
             std::visit([&](auto& p) { p.set_epoch(e); }, d.p);
           })
      .def("state",
           [](Dataset& d) {
             auto call = d.consumer.enter("Dataset", "state()");
             return py::bytes(std::visit([](const auto& p) { return p.state(); }, d.p));
           })
      .def("restore",
           [](Dataset& d, const py::bytes& state) {
             std::string s = state;
             auto call = d.consumer.enter("Dataset", "restore()");
             py::gil_scoped_release nogil;
             std::visit([&](auto& p) { p.restore(s); }, d.p);
           })
      .def(
          "fingerprint",
          [](const Dataset& d) {
            return std::visit([](const auto& p) { return p.fingerprint(); }, d.p);
          },
          "A hash of the configuration without rank and worker: equal on every rank of a job "
          "started the same way.")
      .def("__iter__",
           [](py::object self) {
             Dataset& d = self.cast<Dataset&>();
             auto call = d.consumer.enter("Dataset", "iter()");
             if (!d.tracked) {
               g_iterated.insert(&d);
               d.tracked = true;
             }
             d.inherited_pass = false;
             {
               py::gil_scoped_release nogil;
               std::visit([](auto& p) { p.begin_pass(); }, d.p);
             }
             d.consumer.begin_pass();
             return self;
           })
      .def("__next__", &dataset_next);

  m.def(
      "WebDataset",
      [m](py::object urls, bool resampled, py::object shardshuffle,
          std::optional<std::uint64_t> seed, std::optional<std::string> split_policy,
          py::object handler, std::optional<int> rank, std::optional<int> world_size,
          std::optional<std::uint64_t> nshards, bool allow_empty, std::uint64_t streams,
          std::size_t stream_shuffle) {
        wds::WebDatasetOptions o;
        o.streams = streams;
        o.stream_shuffle = stream_shuffle;
        o.resampled = resampled;
        o.seed = seed;
        if (split_policy) o.split_policy = wds::parse_split_policy(*split_policy);
        o.handler = to_handler(handler, m);
        o.distributed.rank = rank;
        o.distributed.world_size = world_size;
        o.nshards = nshards;
        o.allow_empty = allow_empty;
        // webdataset's shardshuffle: True shuffles the shards (here one permutation per epoch,
        // the same on every rank, before the split); a number is a shuffle buffer of that many
        // shard URLs per worker, as in webdataset.
        if (py::isinstance<py::bool_>(shardshuffle)) {
          o.shuffle_shards = shardshuffle.cast<bool>();
        } else if (!shardshuffle.is_none()) {
          o.shard_shuffle = shardshuffle.cast<std::size_t>();
        }
        if (py::isinstance<py::str>(urls)) {
          std::string pattern = urls.cast<std::string>();
          py::gil_scoped_release nogil;  // listings may go to the network
          return Dataset{wds::WebDataset(std::string_view(pattern), std::move(o))};
        }
        std::vector<std::string> list = urls.cast<std::vector<std::string>>();
        py::gil_scoped_release nogil;
        return Dataset{wds::WebDataset(std::move(list), std::move(o))};
      },
      py::arg("urls"), py::kw_only(), py::arg("resampled") = false,
      py::arg("shardshuffle") = py::none(), py::arg("seed") = py::none(),
      py::arg("split_policy") = py::none(), py::arg("handler") = py::none(),
      py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
      py::arg("nshards") = py::none(), py::arg("allow_empty") = false, py::arg("streams") = 0,
      py::arg("stream_shuffle") = 0,
      "The shards of `urls` (a pattern or a list) as samples, split between ranks and workers "
      "(streams=C: canonical streams, resumable on another world size; stream_shuffle: each "
      "stream's sample shuffle buffer).");

  m.def(
      "merge_states",
      [](const std::vector<py::bytes>& states) {
        std::vector<std::string> in(states.begin(), states.end());
        std::string merged;
        {
          py::gil_scoped_release nogil;
          merged = wds::merge_states(in);
        }
        return py::bytes(merged);
      },
      py::arg("states"),
      "One checkpoint from the states of a job's ranks (Dataset.state() or Loader.state() with "
      "streams): restorable on any number of ranks and workers dividing the stream count.");

  // At exit. A loader another thread is still in (a daemon thread's loop) is left as it is:
  // closing it would pull it from under that call. Workers that do not stop within 5 s (inside
  // a read that does not return: a stalled source) are left to the process's end, not waited
  // for: an exit after Ctrl-C on a stalled source is not another wait for it.
  m.def("_close_loaders", [] {
    std::vector<PyLoader*> all(g_loaders.begin(), g_loaders.end());
    for (PyLoader* l : all) {
      if (l->consumer.busy()) continue;
      if (!l->close_interruptibly(std::chrono::seconds(5))) {
        PySys_WriteStderr(
            "wdscpp: a Loader's workers did not stop within 5 s at exit (a source stalled in a "
            "read?); left to end with the process\n");
      }
    }
  });
  py::module_::import("atexit").attr("register")(m.attr("_close_loaders"));
  m.def("_after_fork_in_child", &after_fork_in_child);
  py::module_::import("os").attr("register_at_fork")(py::arg("after_in_child") =
                                                         m.attr("_after_fork_in_child"));

  py::class_<PyLoader>(m, "Loader", "Runs a Dataset on worker threads; one pass per iteration.")
      .def(py::init([](const Dataset& d, std::int64_t workers, std::int64_t prefetch, bool ordered,
                       bool resumable, std::optional<std::uint64_t> epoch_length) {
             // Values beyond the C++ options' types, refused as the C++ check does.
             if (workers < 1 || workers > wds::detail::kMaxWorkers) {
               throw wds::Error(wds::ErrorCode::invalid_argument, "", "",
                                "Loader: workers = " + std::to_string(workers) + " is not in [1, " +
                                    std::to_string(wds::detail::kMaxWorkers) + "]");
             }
             if (prefetch < 1) {
               throw wds::Error(wds::ErrorCode::invalid_argument, "", "",
                                "Loader: prefetch must be >= 1, got " + std::to_string(prefetch));
             }
             return std::visit(
                 [&](const auto& p) {
                   using T = typename std::decay_t<decltype(p)>::value_type;
                   wds::LoaderOptions<T> o;
                   o.workers = static_cast<int>(workers);
                   o.prefetch = static_cast<std::size_t>(prefetch);
                   o.ordered = ordered;
                   o.resumable = resumable;
                   o.epoch_length = epoch_length;
                   L<T> loader;
                   {
                     py::gil_scoped_release nogil;
                     loader = std::make_unique<wds::Loader<T>>(p, std::move(o));
                   }
                   return std::make_unique<PyLoader>(AnyLoader(std::move(loader)));
                 },
                 d.p);
           }),
           py::arg("dataset"), py::kw_only(), py::arg("workers") = 1, py::arg("prefetch") = 2,
           py::arg("ordered") = false, py::arg("resumable") = false,
           py::arg("epoch_length") = py::none())
      .def(
          "close",
          [](PyLoader& l) {
            auto call = l.consumer.enter("Loader", "close()");
            l.close_interruptibly();
          },
          "Stops and joins the workers; the loader cannot be used afterwards.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyLoader& l, py::args) {
             auto call = l.consumer.enter("Loader", "close()");
             l.close_interruptibly();
           })
      .def("set_epoch",
           [](PyLoader& l, std::uint64_t e) {
             auto call = l.consumer.enter("Loader", "set_epoch()");
             l.without_gil([&](auto& loader) { loader.set_epoch(e); });
           })
      .def("with_epoch",
           [](py::object self, std::uint64_t n) {
             PyLoader& l = self.cast<PyLoader&>();
             auto call = l.consumer.enter("Loader", "with_epoch()");
             l.without_gil([&](auto& loader) { loader.with_epoch(n); });
             return self;
           })
      .def("state",
           [](PyLoader& l) {
             auto call = l.consumer.enter("Loader", "state()");
             return py::bytes(std::visit([&](auto& x) { return l.live(x).state(); }, l.l_));
           })
      .def("restore",
           [](PyLoader& l, const py::bytes& state) {
             std::string s = state;
             auto call = l.consumer.enter("Loader", "restore()");
             l.without_gil([&](auto& loader) { loader.restore(s); });
           })
      .def("__iter__",
           [](py::object self) {
             PyLoader& l = self.cast<PyLoader&>();
             auto call = l.consumer.enter("Loader", "iter()");
             l.without_gil([&](auto& loader) { loader.begin_pass(); });
             l.consumer.begin_pass();
             return self;
           })
      .def("__next__", &loader_next);
}
