"""decode() of the formats webdataset reads besides text, numbers, JSON and npy: msgpack (mp),
cbor, tenbin (ten) and npz, decoded in C++ and given to Python as webdataset gives them. The
shards are made here, with the layouts of webdataset's testdata/mpdata.tar ({'x': i, 'y': ...}
msgpack maps) and tendata.tar (tenbin lists of float64 arrays)."""

import io
import os
import struct
import tarfile

import numpy as np
import pytest

import wdscpp
from wdscpp import autodecode, tenbin

N = 12


def write_tar(path, samples):
    with tarfile.open(path, "w") as tar:
        for key, fields in samples:
            for ext, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def mp_map(x, y):
    """{"x": x, "y": y} in msgpack, built by hand (fixmap, fixstr keys, int32 values)."""
    return b"\x82\xa1x\xd2" + struct.pack(">i", x) + b"\xa1y\xd2" + struct.pack(">i", y)


def decoded(path):
    return list(wdscpp.WebDataset(path, shardshuffle=False).decode())


def test_msgpack_fields_decode_to_dicts(tmp_path):
    path = str(tmp_path / "mpdata.tar")
    write_tar(path, [(f"{i:06d}", {"mp": mp_map(i, -i)}) for i in range(N)])
    samples = decoded(path)
    assert [s["mp"] for s in samples] == [{"x": i, "y": -i} for i in range(N)]
    try:
        import msgpack
    except ImportError:
        if os.environ.get("CI") == "true":
            raise  # scripts/setup-deps.sh installs python3-msgpack
        pytest.skip("no msgpack module to compare with")
    for i, s in enumerate(samples):
        assert s["mp"] == msgpack.unpackb(mp_map(i, -i))
    # Whatever msgpack.packb writes of JSON-like values (and bytes) reads back the same.
    doc = {"s": "héllo", "f": 1.5, "l": [1, None, True, -2**40], "b": b"\x00\xff", "n": {"k": []}}
    assert autodecode.msgpack_loads(msgpack.packb(doc)) == msgpack.unpackb(msgpack.packb(doc))


def test_cbor_fields_decode_to_dicts(tmp_path):
    path = str(tmp_path / "cbor.tar")
    # {"x": 1, "y": [1.5, "ab", b"xyz"]}
    doc = b"\xa2\x61x\x01\x61y\x83\xfb" + struct.pack(">d", 1.5) + b"\x62ab\x43xyz"
    write_tar(path, [("a", {"cbor": doc})])
    (s,) = decoded(path)
    assert s["cbor"] == {"x": 1, "y": [1.5, "ab", b"xyz"]}


def test_tenbin_fields_decode_to_lists_of_arrays(tmp_path):
    path = str(tmp_path / "tendata.tar")
    rng = np.random.default_rng(5)
    arrays = [[rng.normal(size=(28, 28)), rng.normal(size=(10,))] for _ in range(N)]
    write_tar(path, [(f"{i:06d}", {"ten": bytes(tenbin.encode_buffer(a))})
                     for i, a in enumerate(arrays)])
    samples = decoded(path)
    assert len(samples) == N
    for s, want in zip(samples, arrays):
        got = s["ten"]
        assert isinstance(got, list) and len(got) == 2
        for g, w in zip(got, want):
            assert isinstance(g, np.ndarray) and g.dtype == np.float64 and g.shape == w.shape
            assert np.array_equal(g, w)
    # "tenbin" fields stay bytes, as in webdataset's decoder.
    write_tar(path, [("a", {"tenbin": bytes(tenbin.encode_buffer(arrays[0]))})])
    assert isinstance(decoded(path)[0]["tenbin"], bytes)


def test_npz_fields_decode_to_dicts_of_arrays(tmp_path):
    path = str(tmp_path / "npz.tar")
    a, b = np.arange(12, dtype=np.int16).reshape(3, 4), np.linspace(0, 1, 5)
    stored, compressed = io.BytesIO(), io.BytesIO()
    np.savez(stored, a=a, b=b)
    np.savez_compressed(compressed, a=a, b=b)
    write_tar(path, [("s", {"npz": stored.getvalue()}), ("c", {"npz": compressed.getvalue()})])
    for s in decoded(path):
        want = dict(np.load(io.BytesIO(stored.getvalue())))
        assert list(s["npz"]) == ["a", "b"]
        for k in want:
            assert s["npz"][k].dtype == want[k].dtype and np.array_equal(s["npz"][k], want[k])


def test_a_corrupt_field_names_the_member(tmp_path):
    path = str(tmp_path / "bad.tar")
    write_tar(path, [("k1", {"ten": b"~TenBin~" + struct.pack("<q", 1 << 40)})])
    with pytest.raises(Exception, match=r"k1\.ten.*chunk of 1099511627776 bytes"):
        decoded(path)
