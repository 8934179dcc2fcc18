// Small text helpers (internal) that several parts of the library need: ASCII only, whatever
// the locale.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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

// Whether a and b are equal but for the case of ASCII letters.
inline bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// The value of a hexadecimal digit (either case), or -1.
inline int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `s` with each "%XX" (two hexadecimal digits) replaced by its byte; a '%' not followed by two
// hexadecimal digits stays as it is.
inline std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit_value(s[i + 1]) >= 0 &&
        hex_digit_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit_value(s[i + 1]) * 16 + hex_digit_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The environment variable `name` when it holds a whole number, else nullopt.
inline std::optional<std::uint64_t> env_number(const char* name) {
  const char* env = std::getenv(name);
  if (!env || !*env) return std::nullopt;
  std::string_view text(env);
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// `s` without leading and trailing ASCII white space.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

// `s` on one line: runs of white space and control characters as single spaces, trimmed, at
// most `max` bytes ("..." included, cut at a UTF-8 character boundary).
inline std::string one_line(std::string_view s, std::size_t max = 200) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (is_ascii_space(c) || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
    if (out.size() > max) break;
  }
  if (out.size() <= max) return out;
  std::size_t cut = max > 3 ? max - 3 : 0;  // room for the "..."
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  return std::string(trim(out)) + "...";
}

// A short, readable excerpt of an error page for a message: the text of an HTML or XML body
// (tags, comments and the contents of <head>, <script> and <style> dropped; the common entities
// decoded), white space and control characters collapsed to single spaces, at most `max` bytes
// ("..." included, cut at a UTF-8 character boundary).
inline std::string text_excerpt(std::string_view body, std::size_t max = 200) {
  std::string out;
  bool space = false;
  auto put = [&](char c) {
    if (is_ascii_space(c) || (static_cast<unsigned char>(c) < 0x20) || c == 0x7f) {
      space = !out.empty();
      return;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  };
  // Elements whose contents are not text a reader sees (<title> repeats the <h1> of most pages).
  constexpr std::string_view kHidden[] = {"head", "script", "style"};
  std::size_t i = 0;
  while (i < body.size() && out.size() <= max) {
    const char c = body[i];
    if (c == '<') {
      if (body.substr(i, 4) == "<!--") {
        const std::size_t end = body.find("-->", i + 4);
        i = end == std::string_view::npos ? body.size() : end + 3;
        continue;
      }
      const std::size_t end = body.find('>', i + 1);
      if (end == std::string_view::npos) break;  // a tag cut short: the rest is not text
      std::string name;
      std::size_t j = i + 1;
      const bool closing = j < end && body[j] == '/';
      if (closing) ++j;
      for (; j < end && is_ascii_alnum(body[j]); ++j) name += body[j];
      name = lowercase(name);
      i = end + 1;
      // A tag separates words ("<td>a</td><td>b</td>"), unless it only marks up text inside
      // a line ("<b>x</b>.").
      constexpr std::string_view kInline[] = {"a",  "b",    "i",     "u",    "em",  "strong",
                                              "tt", "code", "small", "span", "font"};
      if (std::find(std::begin(kInline), std::end(kInline), name) == std::end(kInline)) {
        space = space || !out.empty();
      }
      for (std::string_view hidden : kHidden) {
        if (name != hidden || closing || body[end - 1] == '/') continue;
        const std::string close = "</" + std::string(hidden);
        std::size_t at = i;
        for (;; ++at) {  // the closing tag, in any case
          at = body.find("</", at);
          if (at == std::string_view::npos || lowercase(body.substr(at, close.size())) == close) {
            break;
          }
        }
        const std::size_t close_end = at == std::string_view::npos ? at : body.find('>', at);
        i = close_end == std::string_view::npos ? body.size() : close_end + 1;
      }
      continue;
    }
    if (c == '&') {
      constexpr std::pair<std::string_view, char> kEntities[] = {
          {"&amp;", '&'},   {"&lt;", '<'},   {"&gt;", '>'},  {"&quot;", '"'},
          {"&apos;", '\''}, {"&#39;", '\''}, {"&nbsp;", ' '}};
      bool decoded = false;
      for (const auto& [entity, ch] : kEntities) {
        if (body.substr(i, entity.size()) == entity) {
          put(ch);
          i += entity.size();
          decoded = true;
          break;
        }
      }
      if (decoded) continue;
    }
    put(c);
    ++i;
  }
  return one_line(out, max);
}

// Structural UTF-8 check (no overlongs, no surrogates, nothing past U+10FFFF), as Python's
// bytes.decode("utf-8") would accept.
inline bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n;
    std::uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr std::uint32_t min_for[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_for[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

}  // namespace wds
