// A small XML reader for S3's and Azure's answers, and S3's: ListObjectsV2 pages,
// CreateMultipartUpload results and error documents.
#include "lib/storage/s3_xml.hpp"

#include <optional>

#include "lib/storage/s3.hpp"
#include "lib/storage/s3_detail.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds {
namespace xml {
namespace {

// ---- XML --------------------------------------------------------------------------------------

constexpr std::size_t kMaxXmlDepth = 64;  // S3 nests 3 deep; bounds the tree's recursion

void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool decode_entities(std::string_view text, std::string& out, std::string& error) {
  while (!text.empty()) {
    std::size_t amp = text.find('&');
    out.append(text.substr(0, amp));
    if (amp == std::string_view::npos) break;
    std::size_t semi = text.find(';', amp);
    if (semi == std::string_view::npos || semi - amp > 12) {
      error = "a '&' that starts no entity";
      return false;
    }
    std::string_view ent = text.substr(amp + 1, semi - amp - 1);
    text.remove_prefix(semi + 1);
    if (ent == "amp") {
      out += '&';
    } else if (ent == "lt") {
      out += '<';
    } else if (ent == "gt") {
      out += '>';
    } else if (ent == "quot") {
      out += '"';
    } else if (ent == "apos") {
      out += '\'';
    } else if (ent.size() >= 2 && ent[0] == '#') {
      bool hex = ent[1] == 'x';
      std::string_view digits = ent.substr(hex ? 2 : 1);
      unsigned long cp = 0;
      bool ok = !digits.empty() && digits.size() <= 8;
      for (char c : digits) {
        int d = hex ? hex_digit_value(c) : is_ascii_digit(c) ? c - '0' : -1;
        if (d < 0) ok = false;
        cp = cp * (hex ? 16 : 10) + static_cast<unsigned long>(d < 0 ? 0 : d);
      }
      if (!ok || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        error = "invalid character reference '&" + std::string(ent) + ";'";
        return false;
      }
      append_utf8(out, cp);
    } else {
      error = "unknown entity '&" + std::string(ent) + ";'";
      return false;
    }
  }
  return true;
}

bool valid_xml_name(std::string_view n) {
  if (n.empty() || is_ascii_digit(n[0]) || n[0] == '-' || n[0] == '.') return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return is_ascii_alnum(c) || c == '-' || c == '.' || c == '_' || c == ':' ||
           static_cast<unsigned char>(c) >= 0x80;
  });
}

}  // namespace

// Just enough XML for S3's and Azure's responses: elements, their character data, comments
// and declarations skipped.
bool parse(std::string_view in, Element& root, std::string& error) {
  std::vector<Element*> open;  // ancestors of the current position; their vectors do not grow
  bool have_root = false;
  std::size_t i = in.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  auto skip_past = [&](std::string_view end, std::size_t from, const char* what) {
    std::size_t e = in.find(end, from);
    if (e == std::string_view::npos) {
      error = std::string("unterminated ") + what;
      return false;
    }
    i = e + end.size();
    return true;
  };
  while (i < in.size()) {
    if (in[i] != '<') {
      std::size_t end = std::min(in.find('<', i), in.size());
      std::string_view text = in.substr(i, end - i);
      i = end;
      if (!open.empty()) {
        if (!decode_entities(text, open.back()->text, error)) return false;
      } else if (!trim(text).empty()) {
        error = "text outside the root element";
        return false;
      }
      continue;
    }
    std::string_view rest = in.substr(i);
    if (rest.starts_with("<?")) {
      if (!skip_past("?>", i + 2, "processing instruction")) return false;
      continue;
    }
    if (rest.starts_with("<!--")) {
      if (!skip_past("-->", i + 4, "comment")) return false;
      continue;
    }
    if (rest.starts_with("<![CDATA[")) {
      std::size_t start = i + 9;
      if (!skip_past("]]>", start, "CDATA section")) return false;
      if (open.empty()) {
        error = "CDATA outside the root element";
        return false;
      }
      open.back()->text.append(in.substr(start, i - 3 - start));
      continue;
    }
    if (rest.starts_with("<!")) {
      error = "unexpected DOCTYPE or declaration";
      return false;
    }
    // A tag ends at the first '>' outside a quoted attribute value.
    std::size_t j = i + 1;
    for (char quote = 0; j < in.size(); ++j) {
      char c = in[j];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '>') {
        break;
      }
    }
    if (j >= in.size()) {
      error = "unterminated tag";
      return false;
    }
    std::string_view tag = in.substr(i + 1, j - i - 1);
    i = j + 1;
    if (tag.starts_with('/')) {
      std::string_view name = trim(tag.substr(1));
      if (open.empty() || open.back()->name != name) {
        error = "unexpected </" + std::string(name) + ">";
        return false;
      }
      open.pop_back();
      continue;
    }
    bool self_closing = tag.ends_with('/');
    if (self_closing) tag.remove_suffix(1);
    std::string_view name = tag.substr(0, tag.find_first_of(" \t\r\n"));
    if (!valid_xml_name(name)) {
      error = "malformed tag <" + std::string(tag.substr(0, 40)) + ">";
      return false;
    }
    Element* e;
    if (open.empty()) {
      if (have_root) {
        error = "more than one root element";
        return false;
      }
      have_root = true;
      root = Element{std::string(name), {}, {}};
      e = &root;
    } else {
      if (open.size() >= kMaxXmlDepth) {
        error = "elements nested too deeply";
        return false;
      }
      open.back()->children.push_back(Element{std::string(name), {}, {}});
      e = &open.back()->children.back();
    }
    if (!self_closing) open.push_back(e);
  }
  if (!open.empty()) {
    error = "the document ends inside <" + open.back()->name + "> (truncated?)";
    return false;
  }
  if (!have_root) {
    error = "no XML element";
    return false;
  }
  return true;
}

std::string error_excerpt(std::string_view body) {
  Element root;
  std::string error;
  if (parse(body, root, error) && root.name == "Error") {
    const Element* code = root.child("Code");
    const Element* message = root.child("Message");
    std::string c(code ? trim(code->text) : "");
    std::string_view m = message ? trim(message->text) : std::string_view();
    m = trim(m.substr(0, m.find('\n')));
    std::string text = one_line(m);  // text already: "<" in it is no tag
    if (!c.empty()) return text.empty() ? c : c + ": " + text;
    if (!text.empty()) return text;
  }
  std::string text = text_excerpt(body);
  if (!text.empty() || body.empty()) return text;
  // Markup and nothing else: the markup itself, bounded, rather than nothing.
  text = std::string(body.substr(0, 200));
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return text;
}

}  // namespace xml

namespace s3 {

using detail::env;
using xml::Element;
namespace {

// encoding-type=url listings: S3 form-encodes keys ('+' is a space), as botocore's decoding has it.
bool url_decode_form(std::string_view s, std::string& out) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size() || hex_digit_value(s[i + 1]) < 0 || hex_digit_value(s[i + 2]) < 0) {
        return false;
      }
      out += static_cast<char>(hex_digit_value(s[i + 1]) * 16 + hex_digit_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return true;
}

}  // namespace

ListPage parse_list_objects_v2(std::string_view xml) {
  auto corrupt = [](const std::string& why) {
    throw Error::corrupt_data("S3 ListObjectsV2 response: " + why);
  };
  Element root;
  std::string error;
  if (!wds::xml::parse(xml, root, error)) corrupt("not well-formed XML: " + error);
  if (root.name != "ListBucketResult") {
    corrupt("the root element is <" + root.name + ">, not <ListBucketResult>" +
            (root.name == "Error" ? " (" + error_summary(xml) + ")" : ""));
  }
  bool url_encoded = false;
  if (const Element* e = root.child("EncodingType")) {
    std::string_view t = trim(e->text);
    if (t != "url" && !t.empty()) corrupt("unknown EncodingType '" + std::string(t) + "'");
    url_encoded = t == "url";
  }
  ListPage page;
  for (const Element& c : root.children) {
    if (c.name != "Contents") continue;
    const Element* k = c.child("Key");
    if (!k || k->text.empty()) corrupt("a <Contents> without a <Key>");
    if (!url_encoded) {
      page.keys.push_back(k->text);
      continue;
    }
    std::string key;
    if (!url_decode_form(k->text, key)) corrupt("malformed url-encoded key '" + k->text + "'");
    page.keys.push_back(std::move(key));
  }
  bool truncated = false;
  if (const Element* t = root.child("IsTruncated")) {
    std::string_view v = trim(t->text);
    if (v != "true" && v != "false") corrupt("IsTruncated is '" + std::string(v) + "'");
    truncated = v == "true";
  }
  if (truncated) {
    const Element* t = root.child("NextContinuationToken");
    std::string_view token = t ? trim(t->text) : std::string_view();
    // Without a token the rest of the listing cannot be fetched: fail rather than stop short.
    if (token.empty()) corrupt("IsTruncated is true but there is no NextContinuationToken");
    page.next_token = std::string(token);
  }
  return page;
}

std::string parse_upload_id(std::string_view xml) {
  auto corrupt = [](const std::string& why) {
    throw Error::corrupt_data("S3 CreateMultipartUpload response: " + why);
  };
  Element root;
  std::string error;
  if (!wds::xml::parse(xml, root, error)) corrupt("not well-formed XML: " + error);
  if (root.name != "InitiateMultipartUploadResult") {
    corrupt("the root element is <" + root.name + ">, not <InitiateMultipartUploadResult>" +
            (root.name == "Error" ? " (" + error_summary(xml) + ")" : ""));
  }
  const Element* id = root.child("UploadId");
  std::string_view t = id ? trim(id->text) : std::string_view();
  if (t.empty()) corrupt("no <UploadId>");
  return std::string(t);
}

bool is_error_document(std::string_view body) {
  Element root;
  std::string error;
  return wds::xml::parse(body, root, error) && root.name == "Error";
}

std::string error_summary(std::string_view body) {
  return xml::error_excerpt(body);
}

}  // namespace s3
}  // namespace wds
