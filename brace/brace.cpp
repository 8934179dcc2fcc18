// Brace expansion as Python's braceexpand 0.1.7 does it, plus WebDataset's expand_urls.
//
// One scan pairs every '{' with its '}' (any imbalance is an error naming its position); recursive
// descent over those pairs then builds a tree once: a Pattern is a product of Parts (literal, int
// or letter range, list of alternative Patterns). The tree's names are counted (checked against
// ExpandOptions::max_names) and then expanded odometer-style into a reserve()d vector.
#include "wds/brace.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "wds/error.hpp"

namespace wds {
namespace {

struct Pattern;

struct IntRange {
  std::int64_t first = 0;
  std::uint64_t step = 1;
  bool descending = false;
  std::uint64_t count = 0;
  std::size_t width = 0;  // %0Nd width including the sign; 0 = no padding
};

// Index into braceexpand's alphabet "A..Za..z".
struct CharRange {
  int first = 0;
  int step = 1;  // signed: negative walks down
  std::uint64_t count = 0;
};

struct Alternatives {
  std::vector<Pattern> items;
};

using Part = std::variant<std::string, IntRange, CharRange, Alternatives>;

// The cartesian product of its parts; no parts means one empty string.
struct Pattern {
  std::vector<Part> parts;
  bool unescape = false;  // escape mode on and the level's text holds a backslash
};

// The pattern as an error names it: a huge one (built by a script, or a hostile variable) is
// shortened to its two ends and its length, so that the message stays readable.
std::string shown(std::string_view pattern) {
  constexpr std::size_t kHead = 80, kTail = 40;
  if (pattern.size() <= kHead + kTail + 40) return std::string(pattern);
  return std::string(pattern.substr(0, kHead)) + "..." +
         std::string(pattern.substr(pattern.size() - kTail)) + " (" +
         std::to_string(pattern.size()) + " characters)";
}

[[noreturn]] void fail(std::string_view pattern, std::string cause) {
  throw Error::invalid_argument(shown(pattern), "", std::move(cause));
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_letter(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}
int alphabet_index(char c) {
  return c <= 'Z' ? c - 'A' : 26 + (c - 'a');
}
char alphabet_at(int i) {
  return static_cast<char>(i < 26 ? 'A' + i : 'a' + (i - 26));
}

// The pieces of a "<first>..<last>[..<step>]" range body; the step's sign is dropped.
struct RangeText {
  std::string_view first, last, step;
};

// Matches braceexpand's ^...$ regexes. Python's '$' also matches before one final '\n', so
// "{1..3\n}" is a range there too.
std::optional<RangeText> match_range(std::string_view t, bool letters) {
  if (!t.empty() && t.back() == '\n') t.remove_suffix(1);
  std::size_t i = 0;
  auto endpoint = [&]() -> std::string_view {
    std::size_t start = i;
    if (letters) {
      if (i < t.size() && is_letter(t[i])) ++i;
      return t.substr(start, i - start);
    }
    if (i < t.size() && t[i] == '-') ++i;
    std::size_t digits = i;
    while (i < t.size() && is_digit(t[i])) ++i;
    return i == digits ? std::string_view() : t.substr(start, i - start);
  };
  auto dots = [&] {
    if (t.substr(i, 2) != "..") return false;
    i += 2;
    return true;
  };
  RangeText r;
  r.first = endpoint();
  if (r.first.empty() || !dots()) return std::nullopt;
  r.last = endpoint();
  if (r.last.empty()) return std::nullopt;
  if (i < t.size()) {
    if (!dots()) return std::nullopt;
    if (i < t.size() && t[i] == '-') ++i;
    std::size_t digits = i;
    while (i < t.size() && is_digit(t[i])) ++i;
    if (i == digits) return std::nullopt;
    r.step = t.substr(digits, i - digits);
  }
  if (i != t.size()) return std::nullopt;
  return r;
}

// Step 0 (or none) means 1; a step too big for 64 bits behaves like any step past the end.
std::uint64_t parse_step(std::string_view digits) {
  std::uint64_t v = 0;
  for (char c : digits) {
    std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
      return std::numeric_limits<std::uint64_t>::max();
    }
    v = v * 10 + d;
  }
  return v == 0 ? 1 : v;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

class Parser {
 public:
  Parser(std::string_view pattern, bool escape) : s_(pattern), escape_(escape) {}

  Pattern parse() {
    match_braces();
    Pattern p;
    parse_pattern(0, s_.size(), p);
    return p;
  }

 private:
  // Unlike braceexpand, which accepts "}a{" as a literal because its depth counter returns to
  // zero, any '}' without an earlier '{' is an error: a half-written pattern is never guessed at.
  void match_braces() {
    close_.assign(s_.size(), 0);
    std::vector<std::size_t> open;
    for (std::size_t i = 0; i < s_.size(); ++i) {
      char c = s_[i];
      if (escape_ && c == '\\') {
        ++i;
      } else if (c == '{') {
        open.push_back(i);
        // Checked here, before any recursion, so that no depth can exhaust the stack.
        if (open.size() > kMaxBraceDepth) {
          fail(s_, "braces nest more than " + std::to_string(kMaxBraceDepth) +
                       " levels deep (at position " + std::to_string(i) + "; kMaxBraceDepth)");
        }
      } else if (c == '}') {
        if (open.empty()) fail(s_, "unbalanced '}' at position " + std::to_string(i));
        close_[open.back()] = i;
        open.pop_back();
      }
    }
    if (!open.empty()) fail(s_, "unbalanced '{' at position " + std::to_string(open.front()));
  }

  static void append_literal(Pattern& out, std::string_view text) {
    if (text.empty()) return;
    if (!out.parts.empty()) {
      if (auto* prev = std::get_if<std::string>(&out.parts.back())) {
        *prev += text;
        return;
      }
    }
    out.parts.emplace_back(std::string(text));
  }

  // Parses s_[lo, hi) as one braceexpand product level into out. Literal text stays raw here:
  // escapes are removed from each finished string of the level (see unescape()).
  void parse_pattern(std::size_t lo, std::size_t hi, Pattern& out) {
    if (escape_ && s_.substr(lo, hi - lo).find('\\') != std::string_view::npos) out.unescape = true;
    std::size_t lit = lo;  // start of the pending literal text
    std::size_t i = lo;
    while (i < hi) {
      char c = s_[i];
      if (escape_ && c == '\\') {
        i += 2;
      } else if (c == '{') {
        append_literal(out, s_.substr(lit, i - lit));
        parse_group(i, out);
        i = lit = close_[i] + 1;
      } else {
        ++i;
      }
    }
    if (lit < hi) append_literal(out, s_.substr(lit, hi - lit));
  }

  // The group whose '{' is at `open`.
  void parse_group(std::size_t open, Pattern& out) {
    std::size_t lo = open + 1, hi = close_[open];
    std::string_view body = s_.substr(lo, hi - lo);
    if (auto r = match_range(body, false)) {
      out.parts.emplace_back(int_range(*r, open));
      return;
    }
    if (auto r = match_range(body, true)) {
      out.parts.emplace_back(char_range(*r));
      return;
    }
    std::vector<std::size_t> commas;
    for (std::size_t i = lo; i < hi;) {
      char c = s_[i];
      if (escape_ && c == '\\') {
        i += 2;
      } else if (c == '{') {
        i = close_[i] + 1;
      } else {
        if (c == ',') commas.push_back(i);
        ++i;
      }
    }
    if (commas.empty()) {
      // Neither range nor list: the braces are text, but nested groups inside still expand. The
      // inside is a product level of its own, so it gets its own round of unescaping; without a
      // backslash that round changes nothing and the inside can join this level directly.
      append_literal(out, "{");
      if (escape_ && body.find('\\') != std::string_view::npos) {
        Alternatives inner;
        inner.items.resize(1);
        parse_pattern(lo, hi, inner.items[0]);
        out.parts.emplace_back(std::move(inner));
      } else {
        parse_pattern(lo, hi, out);
      }
      append_literal(out, "}");
      return;
    }
    Alternatives alt;
    alt.items.resize(commas.size() + 1);
    std::size_t start = lo;
    for (std::size_t k = 0; k <= commas.size(); ++k) {
      std::size_t end = k < commas.size() ? commas[k] : hi;
      parse_pattern(start, end, alt.items[k]);
      start = end + 1;
    }
    flatten(alt);
    out.parts.emplace_back(std::move(alt));
  }

  // An item that is nothing but a list ("{a,{b,c}}") joins its items to this list: the same
  // names in the same order, without expanding them once per level and copying them up. Not
  // when the item has its own round of unescaping.
  static void flatten(Alternatives& alt) {
    auto is_list = [](const Pattern& p) {
      return !p.unescape && p.parts.size() == 1 && std::holds_alternative<Alternatives>(p.parts[0]);
    };
    if (std::none_of(alt.items.begin(), alt.items.end(), is_list)) return;
    std::vector<Pattern> items;
    for (Pattern& item : alt.items) {
      if (!is_list(item)) {
        items.push_back(std::move(item));
        continue;
      }
      // Already flat: its own items were flattened when it was parsed.
      auto& inner = std::get<Alternatives>(item.parts[0]).items;
      items.insert(items.end(), std::make_move_iterator(inner.begin()),
                   std::make_move_iterator(inner.end()));
    }
    alt.items = std::move(items);
  }

  IntRange int_range(const RangeText& r, std::size_t open) const {
    auto first = parse_int(r.first), last = parse_int(r.last);
    if (!first || !last) {
      fail(s_, "integer range endpoint out of 64-bit range at position " + std::to_string(open));
    }
    IntRange ir;
    auto padded = [](std::string_view e) {
      if (e == "0" || e == "-0") return false;
      return e.starts_with('0') || e.starts_with("-0");
    };
    if (padded(r.first) || padded(r.last)) ir.width = std::max(r.first.size(), r.last.size());
    ir.first = *first;
    ir.step = r.step.empty() ? 1 : parse_step(r.step);
    ir.descending = *last < *first;
    // The distance as unsigned so that e.g. INT64_MIN..INT64_MAX cannot overflow.
    std::uint64_t span =
        ir.descending ? static_cast<std::uint64_t>(*first) - static_cast<std::uint64_t>(*last)
                      : static_cast<std::uint64_t>(*last) - static_cast<std::uint64_t>(*first);
    ir.count = span / ir.step + 1;
    // 2^64 wrapped to 0: saturate, so that the count check reports it as more than 2^64 - 1.
    if (ir.count == 0) ir.count = std::numeric_limits<std::uint64_t>::max();
    return ir;
  }

  static CharRange char_range(const RangeText& r) {
    int a = alphabet_index(r.first[0]), b = alphabet_index(r.last[0]);
    std::uint64_t step = r.step.empty() ? 1 : parse_step(r.step);
    CharRange cr;
    cr.first = a;
    int span = a < b ? b - a : a - b;
    cr.count = static_cast<std::uint64_t>(span) / step + 1;
    // Only one letter is produced once the step exceeds the span, so clamping it is harmless.
    int s = step > 52 ? 52 : static_cast<int>(step);
    cr.step = a < b ? s : -s;
    return cr;
  }

  std::string_view s_;
  bool escape_;
  std::vector<std::size_t> close_;  // close_[i] = position of the '}' matching the '{' at i
};

void append_int(std::string& out, const IntRange& r, std::uint64_t k) {
  // Unsigned wrap-around arithmetic: the result always lies between the two endpoints.
  std::uint64_t offset = k * r.step;
  std::uint64_t u = static_cast<std::uint64_t>(r.first);
  std::int64_t v = static_cast<std::int64_t>(r.descending ? u - offset : u + offset);
  bool negative = v < 0;
  std::uint64_t magnitude =
      negative ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, magnitude).ptr;
  std::size_t n = static_cast<std::size_t>(end - digits);
  if (negative) out += '-';
  std::size_t used = n + (negative ? 1 : 0);
  if (r.width > used) out.append(r.width - used, '0');
  out.append(digits, n);
}

// The released braceexpand 0.1.7 runs re.sub(r"\\(.)", r"\1", s) on the joined string of every
// product level, so text inside n nested groups loses n+1 rounds of escapes: {a\\b,c} (two
// backslashes) gives "ab", not "a\b". Python's '.' skips '\n', so a backslash before a newline
// stays, as does a trailing one.
std::string unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] != '\n') ++i;
    out += s[i];
  }
  return out;
}

// Saturating arithmetic for counting names: kMany stands for "2^64 - 1 or more".
constexpr std::uint64_t kMany = std::numeric_limits<std::uint64_t>::max();

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) {
  return a > kMany - b ? kMany : a + b;
}
std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  return b != 0 && a > kMany / b ? kMany : a * b;
}

// How many names p expands to, without building any. Every part yields at least one string, so
// no list built along the way is longer than the whole count.
std::uint64_t count_names(const Pattern& p) {
  std::uint64_t total = 1;
  for (const Part& part : p.parts) {
    std::uint64_t n = 1;
    if (const auto* ir = std::get_if<IntRange>(&part)) {
      n = ir->count;
    } else if (const auto* cr = std::get_if<CharRange>(&part)) {
      n = cr->count;
    } else if (const auto* alt = std::get_if<Alternatives>(&part)) {
      n = 0;
      for (const Pattern& item : alt->items) n = add_sat(n, count_names(item));
    }
    total = mul_sat(total, n);
  }
  return total;
}

void check_count(std::string_view pattern, std::uint64_t count, const ExpandOptions& options) {
  if (count <= options.max_names) return;
  std::string n = count == kMany ? "more than " + std::to_string(kMany) : std::to_string(count);
  fail(pattern, "pattern expands to " + n + " names, above the limit of " +
                    std::to_string(options.max_names) +
                    " (raise ExpandOptions::max_names, or wds expand --max-names)");
}

// One factor of a product, ready to be indexed.
struct Column {
  const Part* part = nullptr;
  std::vector<std::string> expanded;  // used for Alternatives
  std::size_t count = 0;

  void append(std::string& out, std::size_t k) const {
    if (const auto* lit = std::get_if<std::string>(part)) {
      out += *lit;
    } else if (const auto* ir = std::get_if<IntRange>(part)) {
      append_int(out, *ir, k);
    } else if (const auto* cr = std::get_if<CharRange>(part)) {
      out += alphabet_at(cr->first + cr->step * static_cast<int>(k));
    } else {
      out += expanded[k];
    }
  }
};

void expand(const Pattern& p, std::string_view pattern, std::vector<std::string>& out);

Column make_column(const Part& part, std::string_view pattern) {
  Column c;
  c.part = &part;
  std::uint64_t n = 1;
  if (const auto* ir = std::get_if<IntRange>(&part)) {
    n = ir->count;
  } else if (const auto* cr = std::get_if<CharRange>(&part)) {
    n = cr->count;
  } else if (const auto* alt = std::get_if<Alternatives>(&part)) {
    for (const Pattern& item : alt->items) expand(item, pattern, c.expanded);
    n = c.expanded.size();
  }
  if (n > std::numeric_limits<std::size_t>::max()) {
    fail(pattern, "pattern expands to too many names");
  }
  c.count = static_cast<std::size_t>(n);
  return c;
}

// Appends every string of p to out, leftmost part varying slowest.
void expand(const Pattern& p, std::string_view pattern, std::vector<std::string>& out) {
  std::vector<Column> cols;
  cols.reserve(p.parts.size());
  std::size_t total = 1;
  for (const Part& part : p.parts) {
    cols.push_back(make_column(part, pattern));
    std::size_t n = cols.back().count;
    if (n != 0 && total > (out.max_size() - out.size()) / n) {
      fail(pattern, "pattern expands to too many names");
    }
    total *= n;
  }
  if (total == 0) return;
  out.reserve(out.size() + total);

  const std::size_t k = cols.size();
  std::vector<std::size_t> index(k, 0);
  std::vector<std::size_t> prefix(k + 1, 0);  // prefix[j] = length of buf before column j
  std::string buf;
  std::size_t changed = 0;  // columns from here on must be rewritten
  for (std::size_t n = 0; n < total; ++n) {
    buf.resize(prefix[changed]);
    for (std::size_t j = changed; j < k; ++j) {
      prefix[j] = buf.size();
      cols[j].append(buf, index[j]);
    }
    if (p.unescape) {
      out.push_back(unescape(buf));
    } else {
      out.emplace_back(buf);
    }
    // Advance the odometer from the rightmost column.
    std::size_t j = k;
    while (j > 0) {
      --j;
      if (++index[j] < cols[j].count) break;
      index[j] = 0;
    }
    changed = j;
  }
}

// Replaces each ${NAME} once, left to right, like re.sub(r"\$\{(\w+)\}", ...).
std::string substitute_env(std::string_view s, std::string_view piece) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      std::size_t j = i + 2;
      while (j < s.size() && (is_digit(s[j]) || is_letter(s[j]) || s[j] == '_')) ++j;
      if (j > i + 2 && j < s.size() && s[j] == '}') {
        std::string_view name = s.substr(i + 2, j - i - 2);
        std::string var = "WDS_" + std::string(name);
        const char* value = std::getenv(var.c_str());
        if (value == nullptr) {
          fail(piece, "environment variable " + var + " is not set (needed for ${" +
                          std::string(name) + "})");
        }
        out += value;
        i = j + 1;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

}  // namespace

std::vector<std::string> brace_expand(std::string_view pattern, bool escape,
                                      const ExpandOptions& options) {
  Pattern tree = Parser(pattern, escape).parse();
  check_count(pattern, count_names(tree), options);
  std::vector<std::string> out;
  expand(tree, pattern, out);
  return out;
}

std::vector<std::string> expand_urls(std::string_view urls, const ExpandOptions& options) {
  // Every piece is parsed and counted before any is expanded, so that the limit holds for the
  // pieces together.
  struct Piece {
    std::string text;
    Pattern tree;
  };
  std::vector<Piece> pieces;
  std::uint64_t total = 0;
  std::size_t start = 0;
  for (;;) {
    std::size_t sep = urls.find("::", start);
    std::string_view piece = urls.substr(start, sep == std::string_view::npos ? sep : sep - start);
    // Values may hold further ${...}; WebDataset gives up after 10 rounds and keeps what is left.
    std::string s(piece);
    for (int round = 0; round < 10; ++round) {
      std::string next = substitute_env(s, piece);
      if (next == s) break;
      s = std::move(next);
    }
    Pattern tree = Parser(s, true).parse();
    const std::uint64_t n = count_names(tree);
    check_count(s, n, options);
    total = add_sat(total, n);
    pieces.push_back({std::move(s), std::move(tree)});
    if (sep == std::string_view::npos) break;
    start = sep + 2;
  }
  check_count(urls, total, options);
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(total));
  for (const Piece& piece : pieces) expand(piece.tree, piece.text, out);
  return out;
}

}  // namespace wds
