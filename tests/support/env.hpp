// A scoped environment for tests that read variables (launchers, split policies, credentials).
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace wds::test {

// Unsets the named variables for its lifetime and then puts back what was there, so that a test
// neither sees the machine's own settings (CI under SLURM, say) nor leaks its own into the next.
class ClearedEnv {
 public:
  explicit ClearedEnv(std::span<const char* const> names,
                      std::initializer_list<const char*> extra = {}) {
    for (const char* name : names) save_and_unset(name);
    for (const char* name : extra) save_and_unset(name);
  }
  ~ClearedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  ClearedEnv(const ClearedEnv&) = delete;
  ClearedEnv& operator=(const ClearedEnv&) = delete;

 private:
  void save_and_unset(const char* name) {
    const char* value = std::getenv(name);
    saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    ::unsetenv(name);
  }

  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

}  // namespace wds::test
