// The exceptions of wdscpp: one class per wds::ErrorCode, the original exception of a Python
// callable carried to the consumer, and webdataset's handlers.
#include <memory>
#include <string>

#include "python/bindings.hpp"

namespace wdscpp {
namespace {

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

}  // namespace

// The exception waits in g_pending for the consumer.
wds::Error from_python(py::error_already_set& e, const char* stage) {
  std::string cause = std::string(stage) + ": " +
                      py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
                      py::str(e.value()).cast<std::string>();
  if (g_pending) {
    py::dict pending = py::reinterpret_borrow<py::dict>(g_pending);
    if (pending.size() > 64) pending.clear();  // exceptions a continuing handler skipped
    pending[py::str(cause)] = e.value();
  }
  return wds::Error::invalid_argument(cause);
}

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

void bind_errors(py::module_& m) {
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
  // Also tarfile's ReadError, which webdataset's readers raise for a damaged tar.
  g_errors.corrupt_data =
      make_class("CorruptDataError",
                 py::make_tuple(g_errors.base, py::module_::import("tarfile").attr("ReadError")),
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
}

}  // namespace wdscpp
