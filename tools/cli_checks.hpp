// Range checks for the tool's whole-number options, run on the text as typed. CLI11's own
// checks state their range as a 300-digit double, and an unsigned option takes "-1" as 2^64-1.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace wds::tool {

// N with min <= N <= max, described in help as `range` (">=1", "0..1024") and in errors as
// `words` (">= 1"). Text that is not a plain number ("1G", "x") is left to the option's
// conversion, which names what it accepts; only a minus sign is refused here, as no option
// takes a negative number.
inline CLI::Validator whole_number(std::uint64_t min, std::uint64_t max, const std::string& range,
                                   const std::string& words) {
  return CLI::Validator(
      [min, max, words](std::string& text) -> std::string {
        const std::string_view t = text;
        const std::string bad = "must be " + words + ", got " + text;
        const std::string big = "must be at most " + std::to_string(max) + ", got " + text;
        if (!t.empty() && t.front() == '-') return bad;
        std::uint64_t v = 0;
        auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec == std::errc::result_out_of_range) return big;
        if (ec != std::errc() || end != t.data() + t.size()) return {};
        return v < min ? bad : v > max ? big : std::string();
      },
      range);
}

// At least `min`, up to what T holds.
template <class T>
CLI::Validator at_least(std::uint64_t min) {
  return whole_number(min, static_cast<std::uint64_t>(std::numeric_limits<T>::max()),
                      ">=" + std::to_string(min), ">= " + std::to_string(min));
}

// From `min` to `max`.
inline CLI::Validator in_range(std::uint64_t min, std::uint64_t max) {
  const std::string range = std::to_string(min) + ".." + std::to_string(max);
  return whole_number(min, max, range, range);
}

}  // namespace wds::tool
