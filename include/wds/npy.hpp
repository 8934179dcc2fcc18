// wds/npy.hpp: NumPy .npy files (np.save / np.load) to and from wds::Tensor, and .npz archives
// of them (np.savez, np.savez_compressed) to and from a wds::Dict of tensors.
//
//   wds::Tensor t = wds::parse_npy(std::move(field.data), url, member);  // zero-copy if it can
//   std::span<const float> v = t.values<float>();
//   wds::Bytes npy = wds::write_npy(t);                                   // np.load reads it
//   wds::Dict arrays = wds::parse_npz(field.data.span());                // {"x": tensor, ...}
//   wds::Bytes npz = wds::write_npz({{"x", t}});                          // np.load reads it
//
// Formats 1.0, 2.0 (4-byte header length) and 3.0 (UTF-8 header) are read; the dtypes are the
// numeric ones of wds::DType (b1, i1 i2 i4 i8, u1 u2 u4 u8, f2 f4 f8, c8 c16) in any byte order
// ('<', '>', '|', '='), C or Fortran order. The result is always a C-order tensor in the host's
// byte order: big-endian or Fortran-order input is converted once. Bool elements are normalised
// to 0/1 (a non-zero byte reads as true, as numpy's truth value does).
//
// Errors: corrupt_data wds::Error naming `url` and `member` (either may be empty) and the cause:
// "not a .npy file (bad magic)", "unsupported .npy version 4.0", "bad .npy header: ...",
// "unsupported dtype '<U10' (only numeric dtypes)", "object arrays are not supported",
// "data is N bytes, the header's shape int16[3, 4] needs M" (short data and trailing bytes).
// Malformed input never reads out of bounds.
//
// An .npz file is a zip archive (read with libarchive, stored or deflated members) of NAME.npy
// members; parse_npz names each array as numpy.load does (NAME, without ".npy") and keeps the
// archive's order. A member that is no .npy file stays bytes, as numpy.load gives it. All
// members together may decompress to at most `max_size` bytes. Errors: corrupt_data naming
// `url` and `member` and the cause ("not an .npz file (zip): ...", "in 'x.npy': bad .npy
// header: ...", "decompresses to more than N bytes", "two members named 'x.npy'").
//
// Thread safety: pure functions; distinct calls may run concurrently.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "wds/bytes.hpp"
#include "wds/tensor.hpp"
#include "wds/value.hpp"

namespace wds {

// Parses a whole .npy file, consuming `data` (it is moved from, also when this throws). When the
// array is C-order in the host's byte order (or single-byte) and its data offset is aligned for
// the element type, the tensor adopts the buffer without a copy (its storage() owns the Bytes);
// otherwise the elements are converted into fresh storage.
Tensor parse_npy(Bytes&& data, std::string_view url = {}, std::string_view member = {});

// As above, for bytes the caller keeps: the elements are always copied into fresh storage.
Tensor parse_npy(std::span<const std::byte> data, std::string_view url = {},
                 std::string_view member = {});

// The .npy file of `t`, as np.save writes it (numpy >= 1.24): format 1.0 (2.0 if the header
// needs more than 65535 bytes), little-endian descr ('|' for single-byte types), fortran_order
// False, header padded with spaces and a '\n' so the data starts at a multiple of 64 bytes.
// Throws invalid_argument for an undefined tensor.
Bytes write_npy(const Tensor& t);

// The arrays of a whole .npz file, by name, in the archive's order (see above).
Dict parse_npz(std::span<const std::byte> data, std::size_t max_size = std::size_t{1} << 30,
               std::string_view url = {}, std::string_view member = {});

// The .npz file of `arrays` (each value a Tensor; names unique), as np.savez writes it: a zip
// archive of NAME.npy members, stored (not compressed). Throws invalid_argument for a value that
// is no tensor, an empty or repeated name, or a name with '\' and no '/' (zip readers such as
// libarchive's, and so parse_npz, take that '\' for a Windows separator and read back '/').
Bytes write_npz(const Dict& arrays);

}  // namespace wds
