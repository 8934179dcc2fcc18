// Utf8Locale: makes this thread use the C.UTF-8 character type while it lives.
//
// libarchive converts member names from the process locale to UTF-8 when it writes pax headers.
// Under the "C" locale that most programs run in, a non-ASCII name cannot be converted and the
// write fails (or crashes in libarchive 3.6 when only the UTF-8 form is set). uselocale() is
// per thread, so holding this guard around the writer's libarchive calls fixes the conversion
// without touching the rest of the program.
#pragma once

#include <locale.h>
#include <clocale>

namespace wds {

class Utf8Locale {
 public:
  Utf8Locale() {
    static const locale_t utf8 = ::newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    if (utf8) previous_ = ::uselocale(utf8);
  }
  ~Utf8Locale() {
    if (previous_) ::uselocale(previous_);
  }
  Utf8Locale(const Utf8Locale&) = delete;
  Utf8Locale& operator=(const Utf8Locale&) = delete;

 private:
  locale_t previous_ = static_cast<locale_t>(0);
};

}  // namespace wds
