// MessagePack ("mp", "msg") and CBOR ("cbor") fields, read from shards as they come.
//
// Input: a selector byte (bit 0: msgpack or cbor), then the document. Checks: no crash,
// out-of-bounds read, UB, leak or stack overflow (nesting is bounded), no allocation beyond
// -malloc_limit_mb (a declared length is never allocated up front), errors are wds::Error naming
// the member; a document read writes back (the encoder) to bytes that read as the same value.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "wds/decode.hpp"
#include "wds/encode.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string ext = (data[0] & 1) ? "cbor" : "mp";
  wds::Sample raw("k");
  raw.add(ext, wds::Bytes::copy_of(wds_fuzz::as_bytes(data + 1, size - 1)));
  wds::DecodedSample sample(std::move(raw));
  try {
    wds::decode_sample(sample, {});
  } catch (const wds::Error& e) {
    wds_fuzz::check(e.code() == wds::ErrorCode::corrupt_data, "a bad document is corrupt_data");
    wds_fuzz::check(e.member() == "k." + ext, "the error names the member");
    return 0;
  }
  const wds::Json& value = sample.get<wds::Json>(ext);
  wds::Bytes again = wds::encode_field(ext, wds::Value(value));
  wds::DecodedSample back(wds::Sample("k"));
  back.set(ext, wds::Value(std::move(again)));
  wds::decode_sample(back, {});
  // NaN != NaN: compare the encodings of both.
  wds_fuzz::check(wds::encode_field(ext, back.at(ext)) == wds::encode_field(ext, wds::Value(value)),
                  "encode then decode round-trips");
  return 0;
}
