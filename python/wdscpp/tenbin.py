"""tenbin: webdataset's binary tensor format (the ".ten" and ".tb" fields), read and written.

    from wdscpp import tenbin
    data = tenbin.encode_buffer([np.zeros((28, 28)), np.arange(10, dtype="int32")])
    xs, ys = tenbin.decode_buffer(data)        # views of data, no copy
    tenbin.save("pair.ten", xs, ys); xs, ys = tenbin.load("pair.ten")

A buffer is a series of chunks, each 8-aligned so that arrays can be used where they lie:

    magic "~TenBin~" (8 bytes) | nbytes (int64) | nbytes of payload, zero-padded to a multiple of 64

and every array is two chunks: a header, int64s [dtype code ("f4", "u1", ... as 8 ASCII bytes
padded with NULs), info (up to 8 ASCII bytes), ndim, dim0, dim1, ...], then the C-order data.
Integers and array data are little-endian: the bytes webdataset writes on the (little-endian)
machines it runs on, so files go both ways between webdataset and wdscpp.

Differences from webdataset's tenbin, on purpose: uint32 ("u4") is written and read (webdataset
misspells it in its table, so it does neither; a file holding uint32 is not readable there);
non-contiguous arrays are written (copied to C order); a truncated buffer, a stray chunk or an
info longer than 8 characters is a ValueError naming the cause; decode_list(l, infos=[...])
checks the infos (webdataset's always raises); the byte order is fixed, not the host's.
zsend/zrecv (ZeroMQ) are left out.

Functions of immutable inputs, safe from any thread.
"""

import struct
import sys

import numpy as np

__all__ = [
    "encode_buffer",
    "decode_buffer",
    "encode_list",
    "decode_list",
    "encode_chunks",
    "decode_chunks",
    "encode_header",
    "decode_header",
    "write",
    "read",
    "save",
    "load",
    "write_chunk",
    "read_chunk",
    "tenbin_loads",
    "tenbin_dumps",
]

# dtype name <-> the short code stored in a header
long_to_short = {
    "float16": "f2",
    "float32": "f4",
    "float64": "f8",
    "int8": "i1",
    "int16": "i2",
    "int32": "i4",
    "int64": "i8",
    "uint8": "u1",
    "uint16": "u2",
    "uint32": "u4",
    "uint64": "u8",
}
short_to_long = {v: k for k, v in long_to_short.items()}

_INT64 = struct.Struct("<q")
MAX_NDIM = 9  # webdataset's limit, kept so that what is written here reads there


def str64(s):
    """An ASCII string of at most 8 characters as the int64 of its NUL-padded bytes."""
    b = s.encode("ascii")
    if len(b) > 8:
        raise ValueError(f"tenbin: {s!r} is longer than 8 characters")
    return _INT64.unpack(b.ljust(8, b"\0"))[0]


def unstr64(i):
    """The string str64 made i from."""
    return _INT64.pack(int(i)).decode("ascii").strip("\0")


magic_str = "~TenBin~"
magic = str64(magic_str)
magic_bytes = magic_str.encode("ascii")


def roundup(n, k=64):
    """n rounded up to a multiple of k."""
    return k * ((n + k - 1) // k)


def bytelen(a):
    """The length of a (an array or bytes-like) in bytes."""
    if isinstance(a, (bytes, bytearray)):
        return len(a)
    if hasattr(a, "nbytes"):
        return a.nbytes
    raise ValueError(f"tenbin: cannot tell the size in bytes of {type(a).__name__}")


def bytedata(a):
    """The bytes of a (an array or bytes-like) as a bytes-like object, without a copy."""
    if isinstance(a, (bytes, bytearray, memoryview)):
        return a
    if isinstance(a, np.ndarray):
        return memoryview(a.reshape(-1).view(np.uint8))  # C order; a copy if not contiguous
    raise ValueError(f"tenbin: cannot take the bytes of {type(a).__name__}")


def _little_endian(a):
    a = np.asarray(a)
    if a.dtype.name not in long_to_short:
        raise ValueError(
            f"tenbin: unsupported dtype {a.dtype.name} (supported: {' '.join(long_to_short)})"
        )
    if a.ndim > MAX_NDIM:
        raise ValueError(f"tenbin: {a.ndim} dimensions, at most {MAX_NDIM}")
    return np.asarray(a, dtype=a.dtype.newbyteorder("<"), order="C")  # keeps 0-d arrays 0-d


def encode_header(a, info=""):
    """The header chunk of array a: dtype code, info, ndim and shape as little-endian int64s."""
    a = _little_endian(a)
    header = [str64(long_to_short[a.dtype.name]), str64(info), a.ndim, *a.shape]
    return np.array(header, dtype="<i8").tobytes()


def decode_header(h):
    """(shape, dtype, info) from a header chunk."""
    h = np.frombuffer(h, dtype="<i8")
    if len(h) < 3 or len(h) < 3 + h[2] or h[2] < 0:
        raise ValueError(f"tenbin: header of {len(h) * 8} bytes is too short for its shape")
    code = unstr64(h[0])
    if code not in short_to_long:
        raise ValueError(f"tenbin: unsupported dtype code {code!r}")
    shape = tuple(int(d) for d in h[3 : 3 + int(h[2])])
    if any(d < 0 for d in shape):
        raise ValueError(f"tenbin: negative dimension in shape {shape}")
    return shape, np.dtype(short_to_long[code]).newbyteorder("<"), unstr64(h[1])


def encode_list(l, infos=None):
    """[header, data, header, data, ...] for the arrays of l; infos: one string per array
    (each at most 8 ASCII characters), or None for empty ones."""
    if infos is None:
        infos = [""] * len(l)
    elif len(l) != len(infos):
        raise ValueError(f"tenbin: {len(l)} arrays but {len(infos)} infos")
    result = []
    for a, info in zip(l, infos):
        a = _little_endian(a)
        result += [encode_header(a, info), bytedata(a)]
    return result


def check_infos(data, infos, required_infos=None):
    """data; (data, infos) if required_infos is True; a list of infos required to match."""
    if required_infos is None or required_infos is False:
        return data
    if required_infos is True:
        return data, infos
    if not isinstance(required_infos, (tuple, list)):
        raise ValueError("tenbin: required_infos must be a bool, a tuple or a list")
    if list(required_infos) != list(infos):
        raise ValueError(f"tenbin: infos {infos} do not match the required {list(required_infos)}")
    return data


def decode_list(l, infos=False):
    """The arrays of [header, data, header, data, ...], as views of the data chunks;
    infos=True returns (arrays, infos)."""
    if len(l) % 2:
        raise ValueError(f"tenbin: {len(l)} chunks, not header and data pairs")
    result, found = [], []
    for header, data in zip(l[::2], l[1::2]):
        shape, dtype, info = decode_header(header)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize != bytelen(data):
            raise ValueError(
                f"tenbin: {bytelen(data)} data bytes for shape {shape} of {dtype.name}"
            )
        result.append(np.frombuffer(data, dtype=dtype, count=count).reshape(shape))
        found.append(info)
    return check_infos(result, found, infos)


def encode_chunks(l):
    """One bytearray of the chunks of l (bytes-like), each with magic, length and padding."""
    result = bytearray(sum(16 + roundup(bytelen(b)) for b in l))
    offset = 0
    for b in l:
        n = bytelen(b)
        result[offset : offset + 8] = magic_bytes
        result[offset + 8 : offset + 16] = _INT64.pack(n)
        result[offset + 16 : offset + 16 + n] = bytedata(b)
        offset += 16 + roundup(n)
    return result


def decode_chunks(buf):
    """The chunks of buf, as views of it (memoryviews)."""
    view = memoryview(buf).cast("B")
    result = []
    offset, total = 0, len(view)
    while offset < total:
        if total - offset < 16 or view[offset : offset + 8] != magic_bytes:
            raise ValueError(f"tenbin: no chunk magic at offset {offset} of {total}")
        n = _INT64.unpack(view[offset + 8 : offset + 16])[0]
        offset += 16
        if n < 0 or offset + n > total:
            raise ValueError(
                f"tenbin: chunk of {n} bytes at offset {offset - 16}, {total - offset} left"
            )
        result.append(view[offset : offset + n])
        offset += roundup(n)
    return result


def encode_buffer(l, infos=None):
    """The tenbin bytes (a bytearray) of l, a list of arrays."""
    if not isinstance(l, list):
        raise ValueError("tenbin: encode_buffer requires a list of arrays")
    return encode_chunks(encode_list(l, infos=infos))


def decode_buffer(buf, infos=False):
    """The list of arrays in buf (bytes-like), as views of it; read-only when buf is."""
    return decode_list(decode_chunks(buf), infos=infos)


def write_chunk(stream, buf):
    """Writes one chunk (magic, length, buf, padding) to stream."""
    n = bytelen(buf)
    stream.write(magic_bytes)
    stream.write(_INT64.pack(n))
    stream.write(bytedata(buf))
    if roundup(n) > n:
        stream.write(b"\0" * (roundup(n) - n))


def _read_exactly(stream, n, what):
    data = stream.read(n)
    if len(data) != n:
        raise ValueError(f"tenbin: premature end of stream in {what} ({len(data)} of {n} bytes)")
    return data


def read_chunk(stream):
    """The payload of the next chunk of stream; None at the end of the stream."""
    head = stream.read(8)
    if head == b"":
        return None
    if head != magic_bytes:
        raise ValueError("tenbin: magic number does not match")
    n = _INT64.unpack(_read_exactly(stream, 8, "a chunk length"))[0]
    if n < 0:
        raise ValueError(f"tenbin: negative chunk length {n}")
    data = _read_exactly(stream, n, "a chunk")
    if roundup(n) > n:
        _read_exactly(stream, roundup(n) - n, "a chunk's padding")
    return data


def write(stream, l, infos=None):
    """Writes the arrays of l to stream, as encode_buffer lays them out."""
    for chunk in encode_list(l, infos=infos):
        write_chunk(stream, chunk)


def read(stream, n=sys.maxsize, infos=False):
    """Up to n arrays from stream."""
    chunks = []
    for _ in range(n):
        header = read_chunk(stream)
        if header is None:
            break
        data = read_chunk(stream)
        if data is None:
            raise ValueError("tenbin: premature end of stream after a header")
        chunks += [header, data]
    return decode_list(chunks, infos=infos)


def save(fname, *args, infos=None, nocheck=False):
    """Writes the arrays args to the file fname, which must end in .ten unless nocheck."""
    if not nocheck and not fname.endswith(".ten"):
        raise ValueError(f"tenbin: file name {fname!r} should end in .ten")
    with open(fname, "wb") as stream:
        write(stream, list(args), infos=infos)


def load(fname, infos=False, nocheck=False):
    """The list of arrays in the file fname, which must end in .ten unless nocheck."""
    if not nocheck and not fname.endswith(".ten"):
        raise ValueError(f"tenbin: file name {fname!r} should end in .ten")
    with open(fname, "rb") as stream:
        return read(stream, infos=infos)


def tenbin_loads(data):
    """The decoder of .ten/.tb fields: the list of arrays in data, as webdataset decodes "ten"."""
    return decode_buffer(data)


def tenbin_dumps(x):
    """The encoder of .ten/.tenbin/.tb fields: a list of arrays, or one array, as bytes."""
    return bytes(encode_buffer(list(x) if isinstance(x, (list, tuple)) else [x]))
