// wds/tenbin.hpp: webdataset's tenbin format (".ten" and ".tb" fields) to and from tensors.
//
//   wds::Tuple arrays = wds::parse_tenbin(std::move(field.data), url, member);  // tensors
//   const wds::Tensor& first = arrays[0].get<wds::Tensor>();
//   wds::Bytes ten = wds::write_tenbin(std::vector{x, y});  // webdataset's tenbin reads it
//
// The layout (webdataset's tenbin.py; wdscpp.tenbin reads and writes the same): a series of
// chunks, each
//     magic "~TenBin~" (8 bytes) | nbytes (int64) | nbytes of payload, zero-padded to a multiple
//     of 64 (the last chunk's padding may be cut short)
// and every array two chunks: a header of int64s [dtype code ("f4", "u1", ... as 8 ASCII bytes,
// NUL-padded), info (up to 8 ASCII bytes), ndim, dim0, dim1, ...], then the C-order elements.
// Integers and elements are little-endian. The dtype codes are f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8
// (no bool or complex); webdataset itself cannot read or write u4 (a typo in its table).
//
// Errors: corrupt_data wds::Error naming `url` and `member` and the cause, with the byte offset:
// "no tenbin magic at offset 80", "chunk of 4096 bytes at offset 16, 24 left", "unsupported
// tenbin dtype code 'c8'", "data is N bytes, the header's shape float64[3, 4] needs M", "a header
// without its data". Every length is checked against the bytes left before it is used.
//
// Thread safety: pure functions; distinct calls may run concurrently.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wds/bytes.hpp"
#include "wds/tensor.hpp"
#include "wds/value.hpp"

namespace wds {

// The arrays of a tenbin buffer, in order, as a Tuple of Tensor values (webdataset gives a list
// of arrays). Consumes `data`: the tensors share its storage, without a copy, when the
// elements are aligned for their type (they are in what write_tenbin and webdataset write).
// `infos`, if given, receives each array's info string.
Tuple parse_tenbin(Bytes&& data, std::string_view url = {}, std::string_view member = {},
                   std::vector<std::string>* infos = nullptr);
// As above, for bytes the caller keeps: the elements are copied.
Tuple parse_tenbin(std::span<const std::byte> data, std::string_view url = {},
                   std::string_view member = {}, std::vector<std::string>* infos = nullptr);

// The tenbin buffer of `tensors` (with `infos`, one ASCII string of at most 8 characters per
// tensor, or none). Throws invalid_argument for an undefined tensor, a dtype tenbin lacks (bool,
// complex), more than 9 dimensions (webdataset's limit) or a bad info.
Bytes write_tenbin(std::span<const Tensor> tensors, std::span<const std::string> infos = {});

}  // namespace wds
