// Locks held across fork(). fork() copies only the calling thread: a lock another thread held at
// that moment stays locked in the child for good, and the child hangs at its first use of it (a
// torch DataLoader forks its workers while a Loader may read in the parent). A lock registered
// here is taken by the forking thread before fork() and released after it, in the parent and in
// the child, so the child finds it free and what it guards whole.
//
//   static std::mutex& mu = detail::new_mutex_held_across_fork();
//
// Thread-safe. Only for leaf locks: a thread that holds one must not wait for any other lock
// (registered or not) meanwhile, else fork() could wait for it for good. Not under
// ThreadSanitizer, whose deadlock detector fails a check of its own when one thread holds more
// than 64 locks (Bytes registers over a hundred): there, fork() is as it would be without this.
#pragma once

#include <mutex>

namespace wds::detail {

// Registers `mu` (never destroyed) to be held across every fork() from now on.
void hold_across_fork(std::mutex& mu);

// A new lock, registered, never destroyed: for a function-local static.
std::mutex& new_mutex_held_across_fork();

}  // namespace wds::detail
