#include "lib/fork.hpp"

#include <pthread.h>

#include <vector>

#if defined(__SANITIZE_THREAD__)
#define WDS_FORK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WDS_FORK_TSAN 1
#endif
#endif

namespace wds::detail {
namespace {

struct Held {
  std::mutex mu;  // guards `locks`; held across fork() too, so none is added meanwhile
  std::vector<std::mutex*> locks;
};

void lock_all();
void unlock_all();

Held& held() {
  // Never destroyed, as the locks it lists: a thread may fork while the process exits.
  static Held* h = [] {
    auto* made = new Held();
#ifndef WDS_FORK_TSAN
    pthread_atfork(lock_all, unlock_all, unlock_all);
#endif
    return made;
  }();
  return *h;
}

// In registration order; a thread holds one at a time, so any order does.
void lock_all() {
  Held& h = held();
  h.mu.lock();
  for (std::mutex* m : h.locks) m->lock();
}
void unlock_all() {
  Held& h = held();
  for (auto it = h.locks.rbegin(); it != h.locks.rend(); ++it) (*it)->unlock();
  h.mu.unlock();
}

}  // namespace

void hold_across_fork(std::mutex& mu) {
  Held& h = held();
  std::lock_guard lock(h.mu);
  h.locks.push_back(&mu);
}

std::mutex& new_mutex_held_across_fork() {
  auto* made = new std::mutex;  // never destroyed: registered for good
  hold_across_fork(*made);
  return *made;
}

}  // namespace wds::detail
