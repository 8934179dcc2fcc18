// A one-line progress display on stderr (items, bytes, rates) for the tool's long commands.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace wds::tool {

// "12.3 MB": decimal units, as disks and network rates are quoted.
inline std::string human_bytes(double bytes) {
  static const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= 1000 && u < 5) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

// Shown only when stderr is a terminal, so logs and pipes get no control characters, and
// redrawn at most 10 times a second, so a fast loop does not spend its time printing.
class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  // `unit` names the items ("samples"); `total` items are expected (0: unknown).
  explicit Progress(std::string label, std::string unit = "samples", std::uint64_t total = 0)
      : label_(std::move(label)),
        unit_(std::move(unit)),
        total_(total),
        enabled_(::isatty(STDERR_FILENO) == 1),
        start_(Clock::now()),
        last_draw_(start_) {}
  ~Progress() { done(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(std::uint64_t items, std::uint64_t bytes) {
    items_ += items;
    bytes_ += bytes;
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw(now);
  }

  // Erases the line, so that what is printed next starts on a clean one.
  void done() {
    if (drawn_) std::fputs("\r\033[K", stderr);
    drawn_ = false;
  }

  // Extra text at the end of the line ("queue 3/8").
  void note(std::string text) { note_ = std::move(text); }

  std::uint64_t items() const noexcept { return items_; }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  void draw(Clock::time_point now) {
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::string items = std::to_string(items_);
    if (total_ > 0) items += "/" + std::to_string(total_);
    items += " " + unit_;
    if (total_ > 0) items += " (" + std::to_string(items_ * 100 / total_) + "%)";
    const double item_rate = secs > 0 ? static_cast<double>(items_) / secs : 0;
    const double byte_rate = secs > 0 ? static_cast<double>(bytes_) / secs : 0;
    std::fprintf(stderr, "\r\033[K%s: %s, %s, %.0f %s/s, %s/s%s%s", label_.c_str(), items.c_str(),
                 human_bytes(static_cast<double>(bytes_)).c_str(), item_rate, unit_.c_str(),
                 human_bytes(byte_rate).c_str(), note_.empty() ? "" : ", ", note_.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  std::string label_;
  std::string unit_;
  std::uint64_t total_;
  bool enabled_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  std::uint64_t items_ = 0;
  std::uint64_t bytes_ = 0;
  bool drawn_ = false;
  std::string note_;
};

}  // namespace wds::tool
