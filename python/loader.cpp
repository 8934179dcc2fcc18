// The Loader: a wds::Loader over a Dataset's pipeline, iterated with the GIL released and
// interruptible by Ctrl-C; every live loader is closed at exit, and left alone in a child after
// fork().
#include <unistd.h>

#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "python/bindings.hpp"

namespace wdscpp {
namespace {

template <class T>
using L = std::unique_ptr<wds::Loader<T>>;
using AnyLoader = std::variant<L<wds::Sample>, L<wds::DecodedSample>, L<wds::Tuple>, L<PyItem>>;

// Every live loader, so that they can be closed before the interpreter finalizes (atexit): a
// worker that asks for the GIL during finalization is ended by Python in the middle of C++
// code. Guarded by the GIL.
std::unordered_set<class PyLoader*> g_loaders;

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
    NoGil nogil;
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
              NoGil nogil;
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
          NoGil nogil;
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
          NoGil nogil;
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
  gil_after_fork_in_child();
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
            NoGil nogil;  // a daemon thread back during finalization parks in its destructor
            got = loader.next_for(kSignalSlice, item);
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

}  // namespace

void bind_loader(py::module_& m) {
  // At exit. A loader another thread is still in (a daemon thread's loop) is left as it is:
  // closing it would pull it from under that call. Workers that do not stop within 5 s (inside
  // a read that does not return: a stalled source) are left to the process's end, not waited
  // for: an exit after Ctrl-C on a stalled source is not another wait for it. Then the threads
  // still in our code park before they take the GIL again (begin_exit).
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
    begin_exit();
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
               throw wds::Error::invalid_argument("Loader: workers = " + std::to_string(workers) +
                                                  " is not in [1, " +
                                                  std::to_string(wds::detail::kMaxWorkers) + "]");
             }
             if (prefetch < 1) {
               throw wds::Error::invalid_argument("Loader: prefetch must be >= 1, got " +
                                                  std::to_string(prefetch));
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
                     NoGil nogil;
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

}  // namespace wdscpp
