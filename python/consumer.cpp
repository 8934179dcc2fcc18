// One consumer thread at a time for a Loader or a Dataset iterated directly (bindings.hpp).
#include <stdexcept>
#include <string>

#include "python/bindings.hpp"

namespace wdscpp {
namespace {

// The name of the Python thread with this ident, for messages.
std::string thread_name(unsigned long ident) {
  for (py::handle t : py::module_::import("threading").attr("enumerate")()) {
    if (py::int_(t.attr("ident")).cast<unsigned long>() == ident) {
      return "'" + py::str(t.attr("name")).cast<std::string>() + "'";
    }
  }
  return std::to_string(ident);
}

}  // namespace

Consumer::Call Consumer::enter(const char* object, const char* method) {
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

void Consumer::check_owner(const char* object) const {
  const unsigned long me = PyThread_get_thread_ident();
  if (owner_ && *owner_ != me) {
    throw std::runtime_error(std::string("wdscpp.") + object + ": next() on thread " +
                             thread_name(me) + ", but thread " + thread_name(*owner_) +
                             " began the pass in progress: a " + object +
                             " has one consumer thread at a time (give each thread its own " +
                             object + "; iter() on this thread begins a new pass)");
  }
}

}  // namespace wdscpp
