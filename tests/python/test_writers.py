"""wdscpp.TarWriter and wdscpp.ShardWriter: webdataset's writers. Shards written here are read
back with wdscpp.WebDataset, with Python's tarfile and, when its source is at hand, with
webdataset itself."""

import gzip
import io
import json
import os
import pickle
import sys
import tarfile

import numpy as np
import pytest

import wdscpp

WEBDATASET_SRC = "/tmp/webdataset-src"


def webdataset_or_skip():
    if os.path.isdir(WEBDATASET_SRC) and WEBDATASET_SRC not in sys.path:
        sys.path.insert(0, WEBDATASET_SRC)
    return pytest.importorskip("webdataset")


def members(path_or_bytes):
    """{member name: contents} of a tar, with tarfile."""
    if isinstance(path_or_bytes, bytes):
        tf = tarfile.open(fileobj=io.BytesIO(path_or_bytes))
    else:
        tf = tarfile.open(path_or_bytes)
    with tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}


def read_back(url, decode=None):
    ds = wdscpp.WebDataset(url)
    if decode:
        ds = ds.decode(decode)
    return [{k: s[k] for k in s.keys() if k != "__url__"} for s in ds]


def sample(i):
    return {"__key__": f"s{i:03d}", "txt": f"text {i}", "cls": i, "bin": bytes([i]) * (i + 1)}


def test_tarwriter_members_and_round_trip(tmp_path):
    path = str(tmp_path / "a.tar")
    with wdscpp.TarWriter(path) as sink:
        for i in range(3):
            size = sink.write(sample(i))
            assert size == len(f"text {i}") + len(str(i)) + i + 1  # payload bytes, as webdataset
    got = members(path)
    assert list(got) == [f"s{i:03d}.{e}" for i in range(3) for e in ("bin", "cls", "txt")]
    assert got["s002.txt"] == b"text 2" and got["s002.cls"] == b"2" and got["s002.bin"] == b"\2\2\2"
    assert read_back(path, "rgb8") == [{"__key__": f"s{i:03d}", "txt": f"text {i}", "cls": i,
                                        "bin": bytes([i]) * (i + 1)} for i in range(3)]


def test_tarwriter_header_fields(tmp_path):
    path = str(tmp_path / "a.tar")
    with wdscpp.TarWriter(path, mtime=1234567, mode=0o640) as sink:
        sink.write({"__key__": "k", "txt": "x"})
    with tarfile.open(path) as tf:
        (m,) = tf.getmembers()
        assert (m.name, m.mtime, m.mode, m.size) == ("k.txt", 1234567, 0o640, 1)
    assert os.path.getsize(path) % 10240 == 0


def test_values_by_extension(tmp_path):
    path = str(tmp_path / "a.tar")
    value = {"a": [1, 2.5, "x"], "b": None}
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "json": value, "cls": np.int64(7), "count": True,
                    "pyd": {"p": (1, 2)}, "txt.gz": "z" * 1000, "raw": bytearray(b"ab"),
                    "mv": memoryview(b"cd"), "jsn": [1, 2]})
    got = members(path)
    assert got["k.json"] == json.dumps(value).encode()  # webdataset's bytes exactly
    assert got["k.jsn"] == b"[1, 2]"
    assert got["k.cls"] == b"7" and got["k.count"] == b"True"
    assert pickle.loads(got["k.pyd"]) == {"p": (1, 2)}
    assert len(got["k.txt.gz"]) < 100 and gzip.decompress(got["k.txt.gz"]) == b"z" * 1000
    assert got["k.raw"] == b"ab" and got["k.mv"] == b"cd"
    (s,) = read_back(path, "rgb8")
    assert s["json"] == value and s["txt.gz"] == "z" * 1000


def test_metadata_fields(tmp_path):
    path = str(tmp_path / "a.tar")
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "__url__": "somewhere", "txt": "x"})
    assert list(members(path)) == ["k.txt"]
    path2 = str(tmp_path / "b.tar")
    with wdscpp.TarWriter(path2, keep_meta=True) as sink:
        sink.write({"__key__": "k", "__url__": "somewhere", "txt": "x"})
    assert members(path2) == {"k.__url__": b"somewhere", "k.txt": b"x"}
    with pytest.raises(ValueError, match="metadata must be of string type"):
        wdscpp.TarWriter(io.BytesIO()).write({"__key__": "k", "__url__": 3})
    with pytest.raises(ValueError, match="__key__"):
        wdscpp.TarWriter(io.BytesIO()).write({"txt": "x"})


def test_numpy_npy_round_trip(tmp_path):
    path = str(tmp_path / "a.tar")
    arrays = {"npy": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
              "i.npy": np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3)),
              "b.npy": np.array([True, False])}
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", **arrays})
    got = members(path)
    for ext, a in arrays.items():
        back = np.load(io.BytesIO(got["k." + ext]))
        assert back.dtype == a.dtype.newbyteorder("=") and np.array_equal(back, a), ext
    (s,) = read_back(path, "rgb8")
    assert np.array_equal(np.asarray(s["npy"]), arrays["npy"])


def test_image_round_trip(tmp_path):
    path = str(tmp_path / "a.tar")
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, size=(7, 9, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, size=(5, 4), dtype=np.uint8)
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "png": img, "f.png": img / 255.0, "g.png": grey})
    got = members(path)
    assert got["k.png"].startswith(b"\x89PNG")
    (s,) = read_back(path, "rgb8")
    assert np.array_equal(np.asarray(s["png"]), img)
    assert np.array_equal(np.asarray(s["f.png"]), img)
    assert np.array_equal(np.asarray(s["g.png"])[..., 0], grey)



def test_jpeg_quality_100(tmp_path):
    path = str(tmp_path / "a.tar")
    y, x = np.mgrid[0:32, 0:48]
    smooth = np.stack([x * 5, y * 7, x + y * 3], axis=-1).astype(np.uint8)
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "jpg": smooth, "jpeg": smooth})
    (s,) = read_back(path, "rgb8")
    for ext in ("jpg", "jpeg"):
        assert np.abs(np.asarray(s[ext]).astype(int) - smooth).max() <= 8, ext  # quality 100


def test_pil_image(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    img = np.arange(60, dtype=np.uint8).reshape(4, 5, 3)
    path = str(tmp_path / "a.tar")
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "png": Image.fromarray(img)})
    (s,) = read_back(path, "rgb8")
    assert np.array_equal(np.asarray(s["png"]), img)


def test_encoder_false_takes_bytes_only():
    buf = io.BytesIO()
    w = wdscpp.TarWriter(buf, encoder=False)
    with pytest.raises(ValueError, match="txt"):
        w.write({"__key__": "k", "txt": "a str"})
    with pytest.raises(ValueError):
        w.write({"__key__": "k", "npy": np.zeros(3)})
    w.write({"__key__": "k", "txt.gz": b"not compressed"})  # bytes go as they are
    w.close()
    assert members(buf.getvalue()) == {"k.txt.gz": b"not compressed"}


def test_custom_encoders():
    buf = io.BytesIO()
    with wdscpp.TarWriter(buf, encoder={"cls": lambda x: b"<%d>" % x}) as w:
        w.write({"__key__": "k", "cls": 5, "txt": "s"})
        with pytest.raises(ValueError, match="no handler found for npy"):
            w.write({"__key__": "k2", "npy": np.zeros(3)})
    assert members(buf.getvalue()) == {"k.cls": b"<5>", "k.txt": b"s"}
    buf = io.BytesIO()
    with wdscpp.TarWriter(buf, encoder=lambda s: {k: str(v).upper().encode() if k != "__key__"
                                                   else v for k, v in s.items()}) as w:
        w.write({"__key__": "k", "txt": "abc"})
    assert members(buf.getvalue()) == {"k.txt": b"ABC"}


def test_unsupported_encodings_name_the_field():
    w = wdscpp.TarWriter(io.BytesIO())
    with pytest.raises(ValueError, match="msgpack"):
        w.write({"__key__": "k", "msgpack": {"a": object()}})  # no document holds an object
    with pytest.raises(ValueError, match="k.weird"):
        w.write({"__key__": "k", "weird": np.zeros(2)})
    with pytest.raises(ValueError, match="no handler found for weird"):
        w.write({"__key__": "k", "weird": object()})


def test_file_object_sink():
    class Collect:
        def __init__(self):
            self.chunks = []

        def write(self, b):
            self.chunks.append(bytes(b))
            return len(b)

    out = Collect()
    with wdscpp.TarWriter(out) as sink:
        sink.write(sample(1))
    data = b"".join(out.chunks)
    assert len(data) % 10240 == 0
    assert members(data)["s001.txt"] == b"text 1"


def test_file_object_errors_propagate():
    class Broken:
        def write(self, b):
            raise OSError("disk on fire")

    w = wdscpp.TarWriter(Broken())
    with pytest.raises(OSError, match="disk on fire"):
        w.write({"__key__": "k", "bin": b"x" * 200000})
        w.close()


def test_compression_by_name_and_argument(tmp_path):
    path = str(tmp_path / "a.tar.gz")
    with wdscpp.TarWriter(path) as sink:
        sink.write(sample(2))
    with open(path, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    assert members(path)["s002.txt"] == b"text 2"
    plain = str(tmp_path / "b.tgz")
    with wdscpp.TarWriter(plain, compress=False) as sink:
        sink.write(sample(2))
    with open(plain, "rb") as f:
        assert f.read(4) == b"s002"
    xz = str(tmp_path / "c.tar")
    with wdscpp.TarWriter(xz, compress="xz") as sink:
        sink.write(sample(2))
    with open(xz, "rb") as f:
        assert f.read(6) == b"\xfd7zXZ\x00"


def test_formats(tmp_path):
    long_name = "d" * 120 + "/" + "n" * 80
    for fmt in ("PAX_FORMAT", tarfile.GNU_FORMAT):
        path = str(tmp_path / f"{fmt}.tar")
        with wdscpp.TarWriter(path, format=fmt) as sink:
            sink.write({"__key__": long_name + "x" * 100, "txt": "x"})
        assert list(members(path)) == [long_name + "x" * 100 + ".txt"]
    with pytest.raises(ValueError):
        wdscpp.TarWriter(str(tmp_path / "v7.tar"), format="V7_FORMAT")


def test_dropped_without_close_leaves_nothing(tmp_path):
    path = tmp_path / "a.tar"
    w = wdscpp.TarWriter(str(path))
    w.write(sample(0))
    del w
    assert os.listdir(tmp_path) == []


def test_shardwriter_maxcount(tmp_path, capsys):
    closed = []
    pattern = str(tmp_path / "out-%06d.tar")
    with wdscpp.ShardWriter(pattern, maxcount=3, post=closed.append) as sink:
        assert sink.fname == pattern % 0 and sink.shard == 1
        for i in range(7):
            sink.write(sample(i))
    names = [pattern % i for i in range(3)]
    assert closed == names
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(n) for n in names]
    assert [len(members(n)) // 3 for n in names] == [3, 3, 1]
    keys = [s["__key__"] for s in read_back(str(tmp_path / "out-{000000..000002}.tar"))]
    assert keys == [f"s{i:03d}" for i in range(7)]
    assert capsys.readouterr().err.count("# writing") == 3
    with pytest.raises(ValueError, match="after close"):
        sink.write(sample(8))  # no fourth shard
    assert len(os.listdir(tmp_path)) == 3


def test_shardwriter_maxsize_and_start(tmp_path):
    pattern = str(tmp_path / "out-%d.tar")
    big = {"bin": b"x" * 1000}
    with wdscpp.ShardWriter(pattern, maxsize=2500, start_shard=5, verbose=0) as sink:
        for i in range(6):
            sink.write({"__key__": f"k{i}", **big})
    counts = [len(members(pattern % i)) for i in (5, 6)]
    assert counts == [3, 3]  # rolled over once 3000 >= 2500 bytes were written
    assert not os.path.exists(pattern % 7)


def test_shardwriter_empty_and_opener(tmp_path):
    opened = []

    def opener(fname):
        f = open(fname, "wb")
        opened.append(f)
        return f

    pattern = str(tmp_path / "o-%02d.tar")
    with wdscpp.ShardWriter(pattern, maxcount=2, opener=opener, verbose=0) as sink:
        for i in range(3):
            sink.write(sample(i))
    for f in opened:
        f.close()
    assert [len(members(pattern % i)) for i in range(2)] == [6, 3]
    empty = str(tmp_path / "e-%d.tar")
    wdscpp.ShardWriter(empty, verbose=0).close()
    assert os.path.getsize(empty % 0) == 10240  # the first shard is opened at once


def test_webdataset_reads_our_shards(tmp_path):
    wds = webdataset_or_skip()
    pattern = str(tmp_path / "w-%06d.tar")
    img = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    with wdscpp.ShardWriter(pattern, maxcount=2, verbose=0) as sink:
        for i in range(5):
            sink.write({"__key__": f"s{i}", "cls": i, "json": {"i": i}, "txt": f"t{i}",
                        "png": img, "npy": np.full(3, i)})
    ds = wds.WebDataset(str(tmp_path / "w-{000000..000002}.tar"), shardshuffle=False).decode("rgb8")
    got = list(ds)
    assert [s["__key__"] for s in got] == [f"s{i}" for i in range(5)]
    for i, s in enumerate(got):
        assert (s["cls"], s["json"], s["txt"]) == (i, {"i": i}, f"t{i}")
        assert np.array_equal(s["png"], img) and np.array_equal(s["npy"], np.full(3, i))


def test_same_bytes_as_webdataset(tmp_path):
    wds = webdataset_or_skip()
    s = {"__key__": "k", "cls": 3, "json": {"a": [1, "b"]}, "txt": "héllo", "bin": b"\0\1",
         "npy": np.arange(5, dtype=np.int16)}
    ours, theirs = io.BytesIO(), io.BytesIO()
    with wdscpp.TarWriter(ours, mtime=0) as w:
        w.write(dict(s))
    with wds.TarWriter(theirs, mtime=0) as w:
        w.write(dict(s))
    a, b = members(ours.getvalue()), members(theirs.getvalue())
    assert list(a) == list(b)
    for name in a:
        if name.endswith(".npy"):  # npy headers may pad differently; the arrays are equal
            assert np.array_equal(np.load(io.BytesIO(a[name])), np.load(io.BytesIO(b[name])))
        else:
            assert a[name] == b[name], name


def test_pth_and_npz(tmp_path):
    torch = pytest.importorskip("torch")
    path = str(tmp_path / "a.tar")
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "pth": torch.arange(4), "npz": {"a": np.ones(2), "b": np.zeros(3)},
                    "npy": torch.arange(3, dtype=torch.int32)})
    got = members(path)
    assert torch.equal(torch.load(io.BytesIO(got["k.pth"])), torch.arange(4))
    with np.load(io.BytesIO(got["k.npz"])) as z:
        assert np.array_equal(z["a"], np.ones(2)) and np.array_equal(z["b"], np.zeros(3))
    assert np.array_equal(np.load(io.BytesIO(got["k.npy"])), np.arange(3, dtype=np.int32))


def field_bytes(path):
    """{field: bytes} of the one sample in a tar."""
    return {name.split(".", 1)[1]: data for name, data in members(path).items()}


def test_msgpack_and_cbor_documents(tmp_path):
    path = str(tmp_path / "a.tar")
    doc = {"x": 0, "y": [1, -2, 2.5, None, True, "s", b"\0raw"], "big": 2**64 - 1, "t": (1, 2)}
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "mp": doc, "msg": 7, "msgpack": [1.5, "a"], "cbor": doc,
                    "mp.gz": {"z": "z" * 500}, "cbor.str": "as text"})
    got = field_bytes(path)
    want = dict(doc, t=[1, 2])  # tuples come back as lists, as msgpack.unpackb gives them
    assert got["msg"] == b"\x07" and got["msgpack"][:1] == b"\x92"  # a fixint, a 2-array
    assert got["mp"][:1] == b"\x84" and got["cbor"][:1] == b"\xa4"  # maps of 4
    (s,) = read_back(path)
    decoded = wdscpp.WebDataset(path).decode()
    (d,) = list(decoded)
    # mp, msg and cbor decode by default; msgpack stays bytes, as webdataset's decoder leaves it.
    assert d["mp"] == want and d["cbor"] == want and d["msg"] == 7
    assert d["mp.gz"] == {"z": "z" * 500} and d["msgpack"] == got["msgpack"]
    assert s["cbor.str"] == b"as text"  # str is UTF-8 whatever the extension, as webdataset
    msgpack = pytest.importorskip("msgpack")
    assert msgpack.unpackb(got["mp"]) == want
    assert msgpack.unpackb(got["msgpack"]) == [1.5, "a"]
    assert msgpack.unpackb(gzip.decompress(got["mp.gz"])) == {"z": "z" * 500}


def test_tenbin_lists_of_arrays(tmp_path):
    path = str(tmp_path / "a.tar")
    arrays = [np.arange(12.0).reshape(3, 4), np.array([1, -1], np.int8),
              np.arange(6, dtype=np.uint32)[::2]]  # not contiguous: written in C order
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "ten": arrays, "tb": np.float16([0.5, 2]),
                    "tenbin": tuple(arrays[:1]), "e.ten": []})
    got = field_bytes(path)
    assert got["e.ten"] == b""  # no arrays: no chunks, as webdataset writes it
    for field, want in (("ten", arrays), ("tb", [np.float16([0.5, 2])]), ("tenbin", arrays[:1])):
        back = wdscpp.tenbin.decode_buffer(got[field])  # the pure-Python reader
        assert [a.dtype for a in back] == [a.dtype for a in want], field
        assert all(np.array_equal(a, b) for a, b in zip(back, want)), field
    (d,) = list(wdscpp.WebDataset(path).decode())
    assert len(d["ten"]) == 3 and all(np.array_equal(a, b) for a, b in zip(d["ten"], arrays))
    assert np.array_equal(d["tb"][0], np.float16([0.5, 2]))


def test_npz_dicts_of_arrays(tmp_path):
    path = str(tmp_path / "a.tar")
    arrays = {"a": np.arange(5), "b": np.zeros((2, 3), np.float32), "c": np.array(True)}
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "npz": arrays, "e.npz": {}})
    got = field_bytes(path)
    with np.load(io.BytesIO(got["npz"])) as z:
        assert list(z.keys()) == ["a", "b", "c"]
        for name, a in arrays.items():
            assert z[name].dtype == a.dtype and np.array_equal(z[name], a), name
    with np.load(io.BytesIO(got["e.npz"])) as z:
        assert list(z.keys()) == []
    (d,) = list(wdscpp.WebDataset(path).decode())
    assert sorted(d["npz"]) == ["a", "b", "c"]
    assert all(np.array_equal(d["npz"][n], a) for n, a in arrays.items())


def test_img_and_image_are_jpeg_and_class_count_decimal(tmp_path):
    path = str(tmp_path / "a.tar")
    img = np.full((8, 8, 3), 200, np.uint8)
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "img": img, "x.image.gz": img, "class": 12, "count": -3})
    got = field_bytes(path)
    assert got["img"][:3] == b"\xff\xd8\xff"  # JPEG, as webdataset writes img and image
    assert gzip.decompress(got["x.image.gz"])[:3] == b"\xff\xd8\xff"
    assert got["class"] == b"12" and got["count"] == b"-3"


def test_values_a_format_cannot_hold_are_errors_naming_the_field():
    w = wdscpp.TarWriter(io.BytesIO())
    cases = [
        ({"cbor": {1: "int key"}}, r"k\.cbor.*type int"),
        ({"mp": 2**64}, r"k\.mp.*18446744073709551616"),
        ({"mp": [np.zeros(2)]}, r"k\.mp.*ndarray"),
        ({"ten": [np.zeros(2), "x"]}, r"k\.ten.*not a str"),
        ({"tb": {"a": np.zeros(2)}}, r"k\.tb.*not a dict"),
        ({"ten": [np.zeros(2, bool)]}, r"k\.ten.*bool"),
        ({"npz": [np.zeros(2)]}, r"k\.npz.*not a list"),
        ({"npz": {"a": "text"}}, r"k\.npz.*not a str"),
        ({"npz": {3: np.zeros(2)}}, r"k\.npz.*no str"),
    ]
    for fields, match in cases:
        with pytest.raises(ValueError, match=match):
            w.write({"__key__": "k", **fields})
    w.close()


def test_webdataset_decodes_our_mp_ten_and_npz(tmp_path):
    wds = webdataset_or_skip()
    pytest.importorskip("msgpack")
    path = str(tmp_path / "a.tar")
    arrays = [np.arange(6.0).reshape(2, 3), np.array([3, 4], np.int16)]
    with wdscpp.TarWriter(path) as sink:
        sink.write({"__key__": "k", "mp": {"x": [1, "a", None]}, "ten": arrays,
                    "npz": {"a": np.arange(3)}})
    (s,) = list(wds.WebDataset(path, shardshuffle=False).decode())
    assert s["mp"] == {"x": [1, "a", None]}
    assert all(np.array_equal(a, b) for a, b in zip(s["ten"], arrays))
    assert np.array_equal(s["npz"]["a"], np.arange(3))
