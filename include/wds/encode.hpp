// wds/encode.hpp: turns decoded values back into the bytes of shard members, by extension, as
// WebDataset's TarWriter encoder does.
//
//   wds::DecodedSample s("img7");
//   s.set("jpg", image);                  // a uint8 HxWx3 RGB tensor (or wds::from_mat(mat))
//   s.set("cls", 7);
//   s.set("json", wds::Json{{"w", 256}});
//   writer.write(s, {.image = {.quality = 90}});   // TarWriter or ShardWriter
//
// By the field's last extension (after a trailing .gz, .xz, .bz2 or .zst, which compresses the
// encoded bytes):
//   bytes                              as they are, whatever the extension
//   string                             UTF-8, whatever the extension
//   int, float   cls cls2 class count index inx id txt text transcript: decimal text;
//                json jsn: JSON; mp msg msgpack: MessagePack; cbor: CBOR
//   JSON, list   json jsn: serialised JSON; mp msg msgpack: MessagePack; cbor: CBOR (lists of
//                strings, numbers and JSON)
//   tensor       npy: NumPy .npy; jpg jpeg png webp ppm pgm pbm pnm bmp tif tiff: an image
//                (wds/image.hpp: uint8 or [0,1] float, HxW or HxWx{1,3,4} in RGB(A) order);
//                ten tb tenbin: tenbin of the one tensor (wds/tenbin.hpp)
//   list of tensors   ten tb tenbin: tenbin (wds/tenbin.hpp)
//   dict of tensors   npz: a stored zip of NAME.npy members, as np.savez (wds/npy.hpp)
// These are the extensions of WebDataset's writer; class, count, msgpack and tenbin are written
// but not decoded by default (wds/decode.hpp: decode_as).
// Anything else is an invalid_argument Error naming the member and the value's type. Fields whose
// name starts with "_" (a batch's "__key__") are not written, as in WebDataset.
//
// Thread safety: pure functions.
#pragma once

#include <string_view>

#include "wds/image.hpp"
#include "wds/sample.hpp"
#include "wds/value.hpp"

namespace wds {

struct EncodeOptions {
  ImageEncodeOptions image;  // quality of jpg/webp
};

// The member bytes for one field; `member` names it in errors.
Bytes encode_field(std::string_view ext, const Value& value, const EncodeOptions& options = {},
                   std::string_view member = {});
// The whole sample (key, shard and fields kept, in order).
Sample encode_sample(const DecodedSample& sample, const EncodeOptions& options = {});

}  // namespace wds
