// The small XML reader of lib/storage/s3_xml.cpp (internal), for S3's and Azure Blob Storage's answers
// alike, and the summary of their error bodies.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace wds::xml {

// An element with its own character data (entities and CDATA decoded) and child elements;
// attributes are skipped.
struct Element {
  std::string name;
  std::string text;
  std::vector<Element> children;

  const Element* child(std::string_view n) const {
    for (const Element& c : children) {
      if (c.name == n) return &c;
    }
    return nullptr;
  }
};

// Parses `in` into `root`; false with `error` set if it is not well-formed. Comments and
// declarations are skipped; a DTD is refused, so no entity is ever defined by the document.
bool parse(std::string_view in, Element& root, std::string& error);

// What an error response's body says, for a message: "Code: Message" of an <Error> document
// (S3's and Azure's, the message's first line: Azure appends RequestId and Time lines), else a
// short excerpt of the body's text (text_excerpt in lib/text.hpp: an HTML page's tags dropped).
std::string error_excerpt(std::string_view body);

}  // namespace wds::xml
