// Small text helpers (internal) that several parts of the library need: ASCII only, whatever
// the locale.
#pragma once

#include <string>
#include <string_view>

namespace wds {

inline bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

inline bool is_ascii_digit(char c) {
  return c >= '0' && c <= '9';
}

inline bool is_ascii_alnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_ascii_digit(c);
}

// `s` with ASCII letters in lower case.
inline std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// `s` without leading and trailing ASCII white space.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace wds
