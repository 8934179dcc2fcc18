"""wdscpp.directory (DirectoryShardList: claims from a spool directory) and wdscpp.tenbin
(webdataset's .ten format), on tiny temporary directories and arrays."""

import io
import json
import os
import struct
import subprocess
import sys
import time
from itertools import islice

import numpy as np
import pytest

from wdscpp import tenbin
from wdscpp.directory import DirectoryShardList, check_pid_is_running, get_pid_from_filename

################################################################
# tenbin
################################################################


def test_round_trip_of_every_dtype_and_shape():
    for name in tenbin.long_to_short:
        for shape in [(), (0,), (3,), (2, 0), (2, 3), (1, 2, 3, 4)]:
            a = (np.arange(int(np.prod(shape))) % 100).astype(name).reshape(shape)
            (b,) = tenbin.decode_buffer(tenbin.encode_buffer([a]))
            assert b.dtype == a.dtype and b.shape == a.shape
            np.testing.assert_array_equal(a, b)


def test_several_arrays_with_infos_and_odd_sizes():
    arrays = [np.float32([[1.5, -2], [3, 4]]), np.int8([-1, 2, 3]), np.uint16(7)]
    buf = tenbin.encode_buffer(arrays, infos=["xs", "labels", "n"])
    decoded, infos = tenbin.decode_buffer(buf, infos=True)
    assert infos == ["xs", "labels", "n"]
    for a, b in zip(arrays, decoded):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert tenbin.decode_buffer(buf, infos=["xs", "labels", "n"])[1].tolist() == [-1, 2, 3]
    with pytest.raises(ValueError, match="do not match"):
        tenbin.decode_buffer(buf, infos=["xs", "ys", "n"])


def test_layout_of_one_small_array_byte_by_byte():
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int16)
    buf = bytes(tenbin.encode_buffer([a], infos=["ab"]))
    # header chunk: magic, length 40, [dtype "i2", info "ab", ndim 2, 2, 3], padded to 64
    header = b"i2".ljust(8, b"\0") + b"ab".ljust(8, b"\0") + struct.pack("<3q", 2, 2, 3)
    expected = b"~TenBin~" + struct.pack("<q", 40) + header + b"\0" * 24
    # data chunk: magic, length 12, the six int16s in C order, padded to 64
    expected += b"~TenBin~" + struct.pack("<q", 12) + struct.pack("<6h", 1, 2, 3, 4, 5, 6)
    expected += b"\0" * 52
    assert len(buf) == 2 * (16 + 64) == len(expected)
    assert buf == expected


def test_non_contiguous_and_big_endian_arrays_are_written_in_c_order_little_endian():
    a = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]
    (b,) = tenbin.decode_buffer(tenbin.encode_buffer([a]))
    np.testing.assert_array_equal(a, b)
    assert b.dtype == np.dtype("<i4")


def test_decoded_arrays_are_views_of_the_buffer():
    buf = tenbin.encode_buffer([np.zeros(4, np.uint8)])
    (b,) = tenbin.decode_buffer(buf)
    buf[-64] = 9  # the first data byte: the last chunk starts 64 + 16 from the end
    assert b[0] == 9


def test_unsupported_and_malformed_inputs_are_value_errors():
    with pytest.raises(ValueError, match="unsupported dtype bool"):
        tenbin.encode_buffer([np.zeros(2, bool)])
    with pytest.raises(ValueError, match="requires a list"):
        tenbin.encode_buffer(np.zeros(2))
    with pytest.raises(ValueError, match="longer than 8"):
        tenbin.encode_buffer([np.zeros(2)], infos=["123456789"])
    with pytest.raises(ValueError, match="at most 9"):
        tenbin.encode_buffer([np.zeros((1,) * 10)])
    buf = bytes(tenbin.encode_buffer([np.arange(10, dtype=np.int64)]))
    with pytest.raises(ValueError, match="chunk of 80 bytes"):
        tenbin.decode_buffer(buf[:-70])
    with pytest.raises(ValueError, match="no chunk magic at offset 0"):
        tenbin.decode_buffer(b"~TenBix~" + buf[8:])
    with pytest.raises(ValueError, match="not header and data pairs"):
        tenbin.decode_buffer(buf[:80])


def test_stream_write_read_and_files(tmp_path):
    arrays = [np.float64([[0.25, 1], [2, 3]]), np.uint32([4000000000, 1])]
    out = io.BytesIO()
    tenbin.write(out, arrays)
    assert out.getvalue() == bytes(tenbin.encode_buffer(arrays))  # one layout, two writers
    decoded = tenbin.read(io.BytesIO(out.getvalue()))
    assert [b.tolist() for b in decoded] == [a.tolist() for a in arrays]
    assert len(tenbin.read(io.BytesIO(out.getvalue()), n=1)) == 1
    with pytest.raises(ValueError, match="premature end"):
        tenbin.read(io.BytesIO(out.getvalue()[:-1]))

    fname = str(tmp_path / "pair.ten")
    tenbin.save(fname, *arrays, infos=["x", "y"])
    decoded, infos = tenbin.load(fname, infos=True)
    assert infos == ["x", "y"] and decoded[1].dtype == np.uint32
    with pytest.raises(ValueError, match="should end in .ten"):
        tenbin.save(str(tmp_path / "pair.bin"), *arrays)
    tenbin.save(str(tmp_path / "pair.bin"), *arrays, nocheck=True)
    assert tenbin.load(str(tmp_path / "pair.bin"), nocheck=True)[0][0, 0] == 0.25


def test_field_decoder_and_encoder():
    xs, ys = np.ones((28, 28)), np.zeros((28, 28))
    data = tenbin.tenbin_dumps([xs, ys])
    assert isinstance(data, bytes)
    decoded = tenbin.tenbin_loads(data)
    assert isinstance(decoded, list) and len(decoded) == 2
    assert decoded[0].dtype == np.float64 and decoded[0].shape == (28, 28)
    np.testing.assert_array_equal(decoded[0], xs)
    np.testing.assert_array_equal(decoded[1], ys)
    (one,) = tenbin.tenbin_loads(tenbin.tenbin_dumps(np.int32([5, 6])))  # one array: a list of it
    assert one.tolist() == [5, 6]
    assert tenbin.tenbin_loads(memoryview(data))[0].shape == (28, 28)


################################################################
# DirectoryShardList
################################################################


@pytest.fixture
def spool(tmp_path):
    return str(tmp_path) + "/"


def touch(spool, *names, mtime=None):
    for i, name in enumerate(names):
        with open(spool + name, "wb") as f:
            f.write(name.encode())
        if mtime is not None:
            os.utime(spool + name, (mtime + i, mtime + i))


def listing(spool):
    return sorted(os.listdir(spool))


def claim(name):
    return f"{name}._{os.getpid()}_"


def test_default_pattern_matches_tar_tgz_and_tar_gz(spool):
    touch(spool, "a.tar", "b.tgz", "c.tar.gz", "d.txt", "e.tar.bz2", "f.zip")
    urls = [s["url"] for s in DirectoryShardList(spool, mode="unlink", poll=None)]
    assert sorted(urls) == [spool + claim(n) for n in ("a.tar", "b.tgz", "c.tar.gz")]
    assert listing(spool) == ["d.txt", "e.tar.bz2", "f.zip"]


def test_a_claim_is_a_rename_and_the_url_is_the_claimed_file(spool):
    touch(spool, "a.tar")
    src = iter(DirectoryShardList(spool, pattern="*.tar", mode="keep", poll=None))
    url = next(src)["url"]
    assert url == spool + claim("a.tar")
    assert listing(spool) == [claim("a.tar")]
    with open(url, "rb") as f:
        assert f.read() == b"a.tar"
    with pytest.raises(StopIteration):
        next(src)
    assert listing(spool) == ["a.tar._done_"]


def test_oldest_selection_claims_by_modification_time(spool):
    touch(spool, "c.tar", "a.tar", "b.tar", mtime=1_000_000)
    ds = DirectoryShardList(spool, pattern="*.tar", select="oldest", mode="unlink", poll=None)
    urls = [s["url"] for s in islice(ds, 2)]
    assert urls == [spool + claim("c.tar"), spool + claim("a.tar")]
    # the second claim is held until the next one is asked for; the first is unlinked
    assert listing(spool) == [claim("a.tar"), "b.tar"]


def test_random_selection_reaches_every_file(spool):
    touch(spool, *[f"s{i}.tar" for i in range(4)])
    ds = DirectoryShardList(spool, pattern="*.tar", mode="resample", poll=None)
    urls = {s["url"] for s in islice(ds, 200)}
    assert urls == {spool + claim(f"s{i}.tar") for i in range(4)}
    assert len(listing(spool)) == 4


def test_resample_returns_the_shard_to_the_spool(spool):
    touch(spool, "a.tar")
    src = iter(DirectoryShardList(spool, pattern="*.tar", mode="resample", poll=None))
    assert next(src)["url"] == spool + claim("a.tar")
    assert listing(spool) == [claim("a.tar")]
    assert next(src)["url"] == spool + claim("a.tar")  # renamed back, claimed again


def test_unlink_deletes_used_shards_and_new_files_are_picked_up(spool):
    touch(spool, *[f"s{i}.tar" for i in range(5)])
    ds = DirectoryShardList(spool, pattern="*.tar", mode="unlink", poll=None)
    src = iter(ds)
    seen = {next(src)["url"] for _ in range(3)}
    assert len([n for n in listing(spool) if n.endswith(".tar")]) == 2
    touch(spool, "t0.tar", "t1.tar")
    seen |= {s["url"] for s in src}
    assert len(seen) == 7
    assert listing(spool) == []


def test_files_removed_while_claimed_end_the_iteration(spool):
    touch(spool, "a.tar", "b.tar")
    ds = DirectoryShardList(spool, pattern="*.tar", mode="unlink", poll=None)
    for _ in range(2):
        os.remove(next(iter(ds))["url"])  # each iterator dropped with its claim
    assert listing(spool) == []
    assert list(ds) == []


def test_poll_waits_for_new_files_and_timeout_ends_the_wait(spool):
    ds = DirectoryShardList(spool, pattern="*.tar", mode="unlink", poll=0.01, timeout=0.3)
    start = time.time()
    assert list(ds) == []
    assert 0.3 <= time.time() - start < 5
    src = iter(DirectoryShardList(spool, pattern="*.tar", mode="unlink", poll=0.01))
    writer = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(0.2); open({spool + 'x.tar'!r}, 'w')"]
    )
    assert next(src)["url"] == spool + claim("x.tar")
    writer.wait()


def test_claimed_and_done_names_are_never_candidates(spool):
    touch(spool, "a.tar._done_", "b.tar._12_", "c.tar")
    ds = DirectoryShardList(spool, pattern="*", mode="keep", poll=None)
    assert [s["url"] for s in ds] == [spool + claim("c.tar")]


def test_stale_claims_of_gone_processes_are_recycled(spool):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not check_pid_is_running(dead.pid) and check_pid_is_running(os.getpid())
    touch(spool, f"a.tar._{dead.pid}_", f"b.tar._{os.getpid()}_", "c.txt")
    ds = DirectoryShardList(spool, pattern="*.tar", mode="resample", poll=None)
    ds.cleanup_files_without_processes()
    assert listing(spool) == ["a.tar", f"b.tar._{os.getpid()}_", "c.txt"]  # ours stays claimed

    touch(spool, f"d.tar._{dead.pid}_")
    DirectoryShardList(spool, mode="unlink").cleanup_files_without_processes()
    DirectoryShardList(spool, mode="keep").cleanup_files_without_processes()
    assert "d.tar" not in listing(spool) and f"d.tar._{dead.pid}_" not in listing(spool)


def test_cleanup_runs_after_each_shard(spool):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    touch(spool, "a.tar", f"b.tar._{dead.pid}_")
    ds = DirectoryShardList(spool, pattern="*.tar", select="oldest", mode="keep", poll=None)
    urls = [s["url"] for s in ds]
    # a.tar is used, then the dead claim on b.tar is recycled as the mode says: kept as done
    assert urls == [spool + claim("a.tar")]
    assert listing(spool) == ["a.tar._done_", "b.tar._done_"]


def test_pid_from_filename():
    assert get_pid_from_filename("/s/a.tar._123_") == 123
    assert get_pid_from_filename("/s/a.tar._done_") is None
    assert get_pid_from_filename("/s/a.tar") is None


CLAIMER = """
import json, sys, time
from wdscpp.directory import DirectoryShardList
ds = DirectoryShardList(sys.argv[1], pattern="*.tar", mode="keep", poll=None)
urls = []
for sample in ds:
    urls.append(sample["url"])
    time.sleep(0.001)
print(json.dumps(urls))
"""


def test_processes_sharing_a_spool_never_claim_the_same_file(spool):
    names = [f"s{i:03d}.tar" for i in range(200)]
    touch(spool, *names)
    procs = [
        subprocess.Popen([sys.executable, "-c", CLAIMER, spool], stdout=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        for _ in range(4)
    ]
    claims = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        claims += [(p.pid, url) for url in json.loads(out)]
    originals = [url.rsplit("._", 1)[0] for _, url in claims]
    assert sorted(originals) == [spool + n for n in names]  # each file exactly once
    assert all(url.endswith(f"._{pid}_") for pid, url in claims)
    assert listing(spool) == [n + "._done_" for n in names]


def test_iterators_in_one_process_share_a_spool(spool):
    touch(spool, *[f"s{i}.tar" for i in range(6)])
    ds = DirectoryShardList(spool, pattern="*.tar", mode="keep", poll=None)
    a, b = iter(ds), iter(ds)
    urls = []
    for _ in range(3):
        urls += [next(a)["url"], next(b)["url"]]
    assert len(set(urls)) == 6


def test_bad_arguments():
    with pytest.raises(FileNotFoundError, match="not a directory"):
        DirectoryShardList("/nonexistent/spool/")
    with pytest.raises(ValueError, match="unknown mode"):
        DirectoryShardList("/tmp/", mode="delete")
    with pytest.raises(ValueError, match="unknown select"):
        DirectoryShardList("/tmp/", select="newest")


def test_path_without_slash(spool):
    touch(spool, "a.tar")
    ds = DirectoryShardList(spool.rstrip("/"), pattern="*.tar", mode="unlink", poll=None)
    assert [s["url"] for s in ds] == [spool + claim("a.tar")]


def test_pattern_braces_nest_and_the_path_is_literal(tmp_path):
    spool = str(tmp_path / "spool[1]{a,b}") + "/"
    os.mkdir(spool)
    touch(spool, "a.tar", "b.tgz", "c.txz", "d.tbz", "e.zip")
    ds = DirectoryShardList(spool, pattern="*.{tar,t{g,x}z}", mode="unlink", poll=None)
    assert sorted(s["url"] for s in ds) == [spool + claim(n) for n in ("a.tar", "b.tgz", "c.txz")]
    assert listing(spool) == ["d.tbz", "e.zip"]
