// python/module.cpp: _wdscpp, the CPython extension behind the `wdscpp` package.
//
// A Python Dataset holds one of four typed C++ pipelines (raw samples, decoded samples, tuples,
// or Python objects made by map()) and dispatches each fluent method to the pipeline it holds;
// a Python Loader holds the matching wds::Loader. Stages run in C++ on the loader's threads (or
// the caller's, when a Dataset is iterated directly) with the GIL released; a Python callable
// given to map() or select() takes the GIL for each call. Items become Python objects only when
// they reach Python: tensors as Tensor (DLPack and NumPy views of the same memory), samples as
// dict-like objects whose fields are converted on access.
//
// One unit per group of bound classes (python/bindings.hpp): errors, values, dataset, loader,
// writers, streams.
#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "python/bindings.hpp"

namespace wdscpp {
namespace {
unsigned long g_main_thread = 0;  // PyThread_get_thread_ident() of threading.main_thread()
std::atomic<bool> g_exiting{false};
std::atomic<int> g_without_gil{0};  // threads but the main one between leaving and returned

bool on_main_thread() {
  return PyThread_get_thread_ident() == g_main_thread;
}
}  // namespace

void note_main_thread() {
  g_main_thread =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
}

namespace detail {
void leaving_gil() {
  if (!on_main_thread()) ++g_without_gil;
}
void returning_gil() {
  if (on_main_thread() || !g_exiting.load()) return;
  --g_without_gil;
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
bool wanting_gil() {
  if (on_main_thread() || PyGILState_Check()) return false;
  while (g_exiting.load()) std::this_thread::sleep_for(std::chrono::hours(1));
  ++g_without_gil;
  return true;
}
void returned_gil() {
  if (!on_main_thread()) --g_without_gil;
}
}  // namespace detail

void gil_after_fork_in_child() {
  g_main_thread = PyThread_get_thread_ident();  // the thread that forked is the child's only one
  g_without_gil.store(0);                       // the parent's threads are not here
  g_exiting.store(false);
}

void begin_exit() {
  g_exiting.store(true);
  PyThreadState* state = PyEval_SaveThread();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (g_without_gil.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  PyEval_RestoreThread(state);
}

}  // namespace wdscpp

PYBIND11_MODULE(_wdscpp, m) {
  m.doc() = "The wds C++ engine: WebDataset pipelines and loaders (import wdscpp).";
  m.attr("__version__") = WDS_VERSION;
  wdscpp::note_main_thread();

  wdscpp::bind_errors(m);
  wdscpp::bind_values(m);
  wdscpp::bind_dataset(m);
  wdscpp::bind_loader(m);
  wdscpp::bind_writers(m);
  wdscpp::bind_streams(m);
}
