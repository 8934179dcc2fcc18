// python/bindings.hpp: what the units of the _wdscpp module share: the Python objects C++
// stages own, errors, items as Python objects, the Dataset, and each unit's bind_x().
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <variant>

#include "wds/wds.hpp"

namespace py = pybind11;

namespace wdscpp {

// Each adds its classes and functions to the module, in this order (module.cpp).
void bind_errors(py::module_& m);   // errors.cpp: the exception classes and the handlers
void bind_values(py::module_& m);   // values.cpp: Tensor, Sample, DecodedSample
void bind_dataset(py::module_& m);  // dataset.cpp: Dataset, WebDataset, merge_states
void bind_loader(py::module_& m);   // loader.cpp: Loader; closing at exit, fork()
void bind_writers(py::module_& m);  // writers.cpp: _TarWriter (wdscpp/writers.py builds on it)
void bind_streams(py::module_& m);  // streams.cpp: _Reader, _Writer (wdscpp/gopen.py)

// --- The GIL at exit ---

// Once the interpreter finalizes, a thread other than the main one that takes the GIL (or waits
// for it) is ended by Python with pthread_exit inside our C++ frames, and the unwinding aborts
// the process at the first destructor on its way ("terminate called without an active
// exception"). Only daemon threads run then: one iterating a Loader or a Dataset, a Loader's
// worker running map() for one. So at exit, before finalization, begin_exit() has the threads
// in our code without the GIL park for good where they would take it again (the process is
// ending), and lets those already waiting for it through first, the GIL released, for at most
// 500 ms. The main thread goes on.
void begin_exit();
// Which thread is the main one (threading.main_thread()); module.cpp calls it at import.
void note_main_thread();
// In a child after fork(): the thread that forked is its main one; the parent's threads are gone.
void gil_after_fork_in_child();
namespace detail {
// Bookkeeping for begin_exit() (no-ops on the main thread).
void leaving_gil();    // NoGil: before giving up the GIL
void returning_gil();  // NoGil: before taking it back; parks here for good once exiting
// Gil: before taking it; parks here for good once exiting, unless this thread holds it already
// (parked with it, it would keep the main thread from exiting). True when counted.
bool wanting_gil();
void returned_gil();  // either, when counted: with the GIL (back)
}  // namespace detail

// py::gil_scoped_release, parked instead of ended when it comes back at exit (above).
class NoGil {
 public:
  NoGil() {
    detail::leaving_gil();
    state_ = PyEval_SaveThread();
  }
  ~NoGil() {
    detail::returning_gil();
    PyEval_RestoreThread(state_);
    detail::returned_gil();
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

// --- Python objects owned by C++ stages ---

// The GIL for a call into Python from any thread. A loader's worker thread is unknown to Python:
// pybind11's gil_scoped_acquire makes it a thread state and deletes it again at the end of every
// call, which was most of a map() call's cost. Here a thread Python does not know keeps the
// state it gets at its first call until it ends.
class Gil {
 public:
  Gil() {
    thread_local Keeper keeper;  // first call on this thread: before the state exists
    const bool counted = detail::wanting_gil();
    gil_.emplace();
    if (counted) detail::returned_gil();
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

// --- errors (errors.cpp) ---

// A Python exception from a callable, as the wds::Error a stage hands to its handler; the
// exception itself waits for the consumer, who re-raises it. Needs the GIL.
wds::Error from_python(py::error_already_set& e, const char* stage);
// handler=: None (reraise), a name or one of the module's handler functions, or any callable
// taking the exception and returning true to skip the item, false to stop.
wds::ErrorHandler to_handler(const py::object& h, const py::module_& m);

// --- items as Python objects (values.cpp) ---

struct PyTensor {
  wds::Tensor t;
};
struct PySample {
  wds::Sample s;
};
struct PyDecoded {
  wds::DecodedSample s;
};

py::object item_to_python(wds::Sample&& s);
py::object item_to_python(wds::DecodedSample&& s);
py::object item_to_python(wds::Tuple&& t);
py::object item_to_python(PyItem&& item);

// A field's value as Python sees it in a sample (str, int, bytes, wdscpp.Tensor, ...).
py::object value_to_python(const wds::Value& v);
// Whether v is bytes, a bytearray or a memoryview.
bool is_bytes_like(const py::handle& v);
// v as a JSON document, when it is one: None, bool, int (up to 2**64 - 1), float, str, lists,
// tuples and dicts with str keys of these; bytes-likes too, as binary values, if bytes_as_binary
// (msgpack and CBOR hold them; JSON text does not). Otherwise nothing, and `bad`, if given,
// receives the first object that is none of these (a value, or a dict's key). Needs the GIL.
std::optional<wds::Json> json_from_python(const py::handle& v, bool bytes_as_binary,
                                          py::handle* bad = nullptr, int depth = 0);
// A Python value as a field's Value: bytes-like (copied), str, int, float, a NumPy array (a C-order
// copy) or a wdscpp.Tensor; anything else is an invalid_argument Error naming `member`. Needs the
// GIL.
wds::Value value_from_python(const py::handle& v, const std::string& member);

// --- the Dataset (dataset.cpp), one consumer thread at a time (consumer.cpp) ---

template <class T>
using P = wds::Pipeline<T>;
using AnyPipeline = std::variant<P<wds::Sample>, P<wds::DecodedSample>, P<wds::Tuple>, P<PyItem>>;

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
  Call enter(const char* object, const char* method);
  // iter(): this thread owns the pass it begins.
  void begin_pass() { owner_ = PyThread_get_thread_ident(); }
  void end_pass() { owner_.reset(); }
  // next(): only on the thread that began the pass.
  void check_owner(const char* object) const;
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

// Every Dataset iterated directly (its pipeline may hold a live stream, whose sources may have
// threads), for fork(). Guarded by the GIL.
extern std::unordered_set<Dataset*> g_iterated;

}  // namespace wdscpp
