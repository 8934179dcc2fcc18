"""The Python binding (wdscpp) on shards written here with tarfile: the same samples as the C++
engine, decode/to_tuple/batched, zero-copy DLPack and NumPy, resume, errors, the GIL."""

import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import textwrap
import warnings
import zlib

import numpy as np
import pytest

import wdscpp

SHARDS = 3
PER_SHARD = 10


def png_bytes(pixels):
    """A PNG of an HxWx3 uint8 array (filter 0 rows, one IDAT), so that no imaging library is
    needed to make test images."""
    h, w, _ = pixels.shape

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + pixels[y].tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def sample_fields(shard, i):
    """The fields of sample i of a shard, as (ext, bytes), in archive order."""
    n = shard * PER_SHARD + i
    pixels = ((np.arange(4 * 5 * 3, dtype=np.int64).reshape(4, 5, 3) + n) % 256).astype(np.uint8)
    npy = io.BytesIO()
    np.save(npy, np.full((2, 3), n, dtype=np.float32))
    return [
        ("cls", str(n % 7).encode()),
        ("json", json.dumps({"n": n, "tags": ["a", str(n)]}).encode()),
        ("npy", npy.getvalue()),
        ("png", png_bytes(pixels)),
        ("txt", f"caption {n}".encode()),
    ]


def write_shard(path, shard):
    with tarfile.open(path, "w") as tar:
        for i in range(PER_SHARD):
            for ext, data in sample_fields(shard, i):
                info = tarfile.TarInfo(f"s{shard}_{i:03d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    paths = []
    for s in range(SHARDS):
        p = str(d / f"shard-{s:06d}.tar")
        write_shard(p, s)
        paths.append(p)
    return paths


def keys_of(items):
    return [s["__key__"] for s in items]


# --- samples ---


def test_raw_samples_are_the_tar_members_in_order(shards):
    got = list(wdscpp.WebDataset(shards))
    want = []
    for p in shards:
        with tarfile.open(p) as tar:
            for m in tar.getmembers():
                key, ext = m.name.split(".", 1)
                if not want or want[-1][0] != key:
                    want.append((key, p, {}))
                want[-1][2][ext] = tar.extractfile(m).read()
    assert [(s["__key__"], s["__url__"]) for s in got] == [(k, u) for k, u, _ in want]
    for s, (_, _, fields) in zip(got, want):
        assert {k: s[k] for k in fields} == fields


def test_raw_samples_equal_the_cpp_tool_output(shards):
    tool = os.environ.get("WDS_TOOL")
    if not tool or not os.path.exists(tool):
        pytest.skip("WDS_TOOL (the built wds binary) is not set")
    out = subprocess.run([tool, "ls", "--json", "--sha256", *shards], check=True,
                         capture_output=True, text=True).stdout
    cpp = [json.loads(line) for line in out.splitlines() if line.strip()]
    py = []
    for s in wdscpp.WebDataset(shards):
        row = {"__key__": s["__key__"], "__url__": s["__url__"]}
        for k in s.keys():
            if not k.startswith("__"):
                row[k] = hashlib.sha256(s[k]).hexdigest()
        py.append(row)
    assert [r["__key__"] for r in cpp] == [r["__key__"] for r in py]
    for c, p in zip(cpp, py):
        for k, digest in p.items():
            if not k.startswith("__"):
                assert digest in str(c[k]), (k, c[k])


def test_a_sample_is_dict_like(shards):
    s = next(iter(wdscpp.WebDataset(shards[:1])))
    assert s["__key__"] == "s0_000"
    assert s["__url__"] == shards[0]
    assert isinstance(s["png"], bytes)
    assert s["txt"] == b"caption 0"
    assert {"__key__", "cls", "json", "npy", "png", "txt"} <= set(s.keys())
    assert "png" in s and "jpg" not in s
    assert s.get("jpg") is None
    assert dict(s.items())["cls"] == b"0"
    with pytest.raises(KeyError):
        s["jpg"]


# --- decode, to_tuple, batched ---


def test_decode_gives_python_values_and_tensors(shards):
    s = next(iter(wdscpp.WebDataset(shards[:1]).decode("rgb8")))
    assert s["cls"] == 0 and s["txt"] == "caption 0"
    assert s["json"] == {"n": 0, "tags": ["a", "0"]}
    img = s["png"]
    assert isinstance(img, np.ndarray)  # webdataset's types
    assert img.shape == (4, 5, 3) and img.dtype == "uint8"
    np.testing.assert_array_equal(img, (np.arange(60).reshape(4, 5, 3) % 256).astype(np.uint8))
    assert s["npy"].dtype == "float32" and s["npy"].shape == (2, 3)
    # The engine form (what wdscpp.Loader runs) keeps wdscpp's tensors.
    e = next(iter(wdscpp.WebDataset(shards[:1]).decode("rgb8").engine()))
    assert isinstance(e["png"], wdscpp.Tensor) and np.array_equal(e["png"].numpy(), img)


def test_to_tuple_batched_shapes_and_dtypes(shards):
    ds = (wdscpp.WebDataset(shards).decode("rgb8")
          .to_tuple("jpg;png", "cls", "npy", "json", "txt").batched(8))
    batches = list(ds)
    assert [len(b[1]) for b in batches] == [8, 8, 8, 6]  # 30 samples, partial last batch
    images, labels, arrays, docs, texts = batches[0]
    assert images.shape == (8, 4, 5, 3) and images.dtype == "uint8"
    assert labels.shape == (8,) and labels.dtype == "int64"
    assert arrays.shape == (8, 2, 3) and arrays.dtype == "float32"
    assert docs[3] == {"n": 3, "tags": ["a", "3"]} and texts[3] == "caption 3"
    np.testing.assert_array_equal(labels, np.arange(8) % 7)
    np.testing.assert_array_equal(arrays[:, 0, 0], np.arange(8, dtype=np.float32))
    assert [len(b[0]) for b in wdscpp.WebDataset(shards).decode("rgb8").to_tuple(
        "png", "cls").batched(8, partial=False)] == [8, 8, 8]


def test_batched_decoded_samples_collate_fields_and_keys(shards):
    b = next(iter(wdscpp.WebDataset(shards[:1]).decode("rgb8").batched(4)))
    assert b["__key__"] == ["s0_000", "s0_001", "s0_002", "s0_003"]
    assert b["png"].shape == (4, 4, 5, 3)
    assert b["cls"].tolist() == [0, 1, 2, 3]


def test_a_stage_the_engine_cannot_run_runs_in_python(shards):
    # Raw samples batched: the engine batches decoded samples only; Python collates them as
    # webdataset does (a dict of columns), and the engine form says which stage it lacks.
    ds = wdscpp.WebDataset(shards).batched(4)
    first = next(iter(ds))
    assert first["__key__"] == ["s0_000", "s0_001", "s0_002", "s0_003"]
    assert first["cls"] == [b"0", b"1", b"2", b"3"]
    with pytest.raises(TypeError, match="batched"):
        ds.engine()
    with pytest.raises(TypeError, match="decode"):
        wdscpp.WebDataset(shards).to_tuple("png").decode().engine()


# --- zero copy ---


def test_dlpack_and_numpy_share_the_tensors_memory(shards):
    images, _ = next(iter(wdscpp.WebDataset(shards).decode("rgb8").to_tuple("png", "cls")
                          .batched(4).engine()))
    assert images.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(images)
    assert a.ctypes.data == images.data_ptr
    assert images.numpy().ctypes.data == images.data_ptr
    assert np.asarray(images).ctypes.data == images.data_ptr
    assert a.shape == (4, 4, 5, 3) and a.dtype == np.uint8
    del images  # the arrays keep the memory alive
    assert int(a[0, 0, 0, 2]) == 2


def test_torch_takes_tensors_without_a_copy(shards):
    torch = pytest.importorskip("torch")
    images, labels = next(iter(wdscpp.WebDataset(shards).decode("rgb8").to_tuple("png", "cls")
                                .batched(4).engine()))
    t = torch.from_dlpack(images)
    assert t.data_ptr() == images.data_ptr
    assert t.shape == (4, 4, 5, 3) and t.dtype == torch.uint8
    assert torch.from_dlpack(labels).tolist() == [0, 1, 2, 3]


# --- map and select ---


def test_map_runs_python_callables_on_the_loaders_threads(shards):
    ds = wdscpp.WebDataset(shards).decode().map(
        lambda s: None if s["cls"] == 0 else (s["__key__"], s["cls"] * 10))
    got = sorted(wdscpp.Loader(ds, workers=2))
    want = sorted((f"s{n // PER_SHARD}_{n % PER_SHARD:03d}", (n % 7) * 10)
                  for n in range(SHARDS * PER_SHARD) if n % 7 != 0)
    assert got == want
    assert [len(b) for b in wdscpp.WebDataset(shards).map(lambda s: 1).listed(16)] == [16, 14]


def test_select_keeps_items_its_predicate_accepts(shards):
    ds = wdscpp.WebDataset(shards).decode().select(lambda s: s["cls"] == 3)
    assert keys_of(ds) == ["s0_003", "s1_000", "s1_007", "s2_004"]


def test_a_map_callable_that_raises_reaches_the_loop_as_its_own_exception(shards):
    def boom(s):
        if s["__key__"] == "s1_004":
            raise ZeroDivisionError("no labels for s1_004")
        return s["__key__"]

    loader = wdscpp.Loader(wdscpp.WebDataset(shards).map(boom), workers=1)
    seen = []
    with pytest.raises(ZeroDivisionError, match="no labels") as info:
        for key in loader:
            seen.append(key)
    assert seen == [f"s{n // PER_SHARD}_{n % PER_SHARD:03d}" for n in range(14)]
    notes = " ".join(getattr(info.value, "__notes__", []))
    if sys.version_info >= (3, 11):
        assert shards[1] in notes and "s1_004" in notes
    # A continuing handler skips the sample instead.
    ds = wdscpp.WebDataset(shards).map(boom, handler=wdscpp.ignore_and_continue)
    assert len(list(wdscpp.Loader(ds))) == SHARDS * PER_SHARD - 1


# --- errors ---


def test_a_missing_shard_raises_not_found_naming_the_url(tmp_path):
    url = str(tmp_path / "absent-000000.tar")
    with pytest.raises(wdscpp.NotFoundError) as info:
        list(wdscpp.Loader(wdscpp.WebDataset([url])))
    e = info.value
    assert isinstance(e, wdscpp.Error) and isinstance(e, FileNotFoundError)
    assert e.code == "not_found" and e.url == url and url in str(e) and e.cause


def test_a_truncated_shard_raises_corrupt_data_or_skips_with_a_handler(shards, tmp_path):
    data = open(shards[0], "rb").read()
    bad = str(tmp_path / "cut-000000.tar")
    with open(bad, "wb") as f:
        f.write(data[: len(data) // 2 + 100])
    with pytest.raises(wdscpp.CorruptDataError) as info:
        list(wdscpp.WebDataset([bad]))
    assert info.value.url == bad and bad in str(info.value)
    ds = wdscpp.WebDataset([bad, shards[1]], handler=wdscpp.ignore_and_continue)
    assert keys_of(ds)[-PER_SHARD:] == [f"s1_{i:03d}" for i in range(PER_SHARD)]


def test_bad_arguments_are_invalid_argument_errors(shards):
    with pytest.raises(wdscpp.InvalidArgumentError):
        wdscpp.Loader(wdscpp.WebDataset(shards), workers=0)
    with pytest.raises(ValueError):
        wdscpp.WebDataset(shards, split_policy="sideways")
    with pytest.raises(ValueError, match="handler"):
        wdscpp.WebDataset(shards, handler="shrug")


# --- epochs and resume ---


def test_with_epoch_and_len(shards):
    ds = wdscpp.WebDataset(shards, shardshuffle=True, seed=1).with_epoch(12)
    assert len(ds) == 12
    first, second = keys_of(ds), keys_of(ds)
    assert len(first) == 12 and len(second) == 12
    assert set(first).isdisjoint(second)  # the stream continues across passes


def shuffled(shards):
    return (wdscpp.WebDataset(shards, shardshuffle=True, seed=5).shuffle(7, initial=3)
            .decode("rgb8").to_tuple("__key__", "png"))


def test_dataset_resume_gives_prefix_plus_rest(shards):
    full = [k for k, _ in shuffled(shards)]
    for k in (0, 1, 9, 17, 29, 30):
        ds = shuffled(shards)
        it = iter(ds)
        prefix = [next(it)[0] for _ in range(k)]
        state = ds.state()
        again = shuffled(shards)
        again.restore(state)
        assert prefix + [key for key, _ in again] == full, k


def test_loader_resume_gives_prefix_plus_rest(shards):
    def loader():
        return wdscpp.Loader(shuffled(shards), workers=2, ordered=True, resumable=True)

    full = [k for k, _ in loader()]
    assert sorted(full) == sorted(f"s{s}_{i:03d}" for s in range(SHARDS) for i in range(PER_SHARD))
    for k in (1, 13, 30):
        first = loader()
        it = iter(first)
        prefix = [next(it)[0] for _ in range(k)]
        state = first.state()
        del it, first
        second = loader()
        second.restore(state)
        assert prefix + [key for key, _ in second] == full, k


def test_torch_dataset_state_dict_and_set_epoch(shards):
    torch = pytest.importorskip("torch")
    from wdscpp.torch import TorchDataset

    def data():
        return TorchDataset(wdscpp.WebDataset(shards, shardshuffle=True, seed=2).shuffle(5)
                            .decode("rgb8").to_tuple("__key__", "png", "cls").batched(4),
                            workers=2, ordered=True)

    full = [(k, img.clone()) for k, img, _ in torch.utils.data.DataLoader(
        data(), batch_size=None, num_workers=0)]
    assert isinstance(full[0][1], torch.Tensor) and full[0][1].shape == (4, 4, 5, 3)
    d = data()
    it = iter(torch.utils.data.DataLoader(d, batch_size=None, num_workers=0))
    prefix = [next(it)[0] for _ in range(3)]
    state = d.state_dict()
    resumed = data()
    resumed.load_state_dict(state)
    rest = [k for k, _, _ in torch.utils.data.DataLoader(resumed, batch_size=None,
                                                         num_workers=0)]
    assert prefix + rest == [k for k, _ in full]
    d.set_epoch(1)
    assert sorted(sum((k for k, _, _ in d), [])) == sorted(sum((k for k, _ in full), []))


# --- the GIL ---


def test_gil_held_while_a_loader_waits_would_deadlock_its_map_callable(shards):
    """The consumer thread waits in C++ for an item whose map() callable (on a loader thread)
    can only finish after the main thread has run Python code: with the GIL held while waiting,
    this deadlocks, so it runs in a subprocess with a timeout."""
    script = textwrap.dedent(f"""
        import threading, wdscpp
        go = threading.Event()
        def slow(s):
            go.wait()
            return s["__key__"]
        out = []
        t = threading.Thread(target=lambda: out.extend(
            wdscpp.Loader(wdscpp.WebDataset({shards!r}).map(slow), workers=2)))
        t.start()
        total = sum(i * i for i in range(200000))  # Python code while the loader waits
        go.set()
        t.join()
        assert len(out) == {SHARDS * PER_SHARD} and total > 0
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=60, env=os.environ)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_exit_with_a_loader_mid_pass_would_kill_workers_waiting_for_the_gil(shards):
    """Workers of a loader still alive at exit ask for the GIL in their map() callable; during
    finalization Python ends such threads in the middle of C++ code (an abort). Loaders are
    closed at exit, before finalization."""
    script = textwrap.dedent(f"""
        import time, wdscpp
        def slow(s):
            time.sleep(0.0005)
            return s["__key__"]
        loaders = [wdscpp.Loader(wdscpp.WebDataset({shards!r}).map(slow), workers=2, prefetch=1)
                   for _ in range(3)]
        its = [iter(l) for l in loaders]
        print(*[next(it) for it in its])
    """)
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=60, env=os.environ)
        assert r.returncode == 0, r.stderr


def test_rank_and_world_size_come_from_torchrun_variables(shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert {k.split("_")[0] for k in keys_of(wdscpp.WebDataset(shards))} == {"s1"}
    # Explicit arguments win over the launcher's variables.
    ds = wdscpp.WebDataset(shards, rank=2, world_size=3)
    assert {k.split("_")[0] for k in keys_of(ds)} == {"s2"}
    with pytest.raises(wdscpp.InvalidArgumentError, match="split policy|divide|even"):
        list(wdscpp.WebDataset(shards, rank=0, world_size=2))
    ds = wdscpp.WebDataset(shards, rank=0, world_size=2, split_policy="drop_last")
    assert len(keys_of(ds)) == PER_SHARD


def test_streams_states_of_three_ranks_merge_and_resume_on_one(shards):
    def rank(r, world):
        return wdscpp.WebDataset(shards, shardshuffle=True, seed=3, streams=SHARDS,
                                 stream_shuffle=4, rank=r, world_size=world)

    everything = sorted(keys_of(rank(0, 1)))
    assert rank(0, 3).fingerprint() == rank(2, 3).fingerprint()
    assert rank(0, 3).fingerprint() != rank(0, 1).fingerprint()
    before, states = [], []
    for r in range(3):
        ds = rank(r, 3)
        it = iter(ds)
        before += [next(it)["__key__"] for _ in range(5)]
        states.append(ds.state())
    merged = wdscpp.merge_states(states)
    after = rank(0, 1)
    after.restore(merged)
    assert sorted(before + keys_of(after)) == everything
    with pytest.raises(Exception, match="merge_states"):
        lone = rank(0, 1)
        lone.restore(states[0])


def interleave_shards(tmp_path):
    """Shards A (a0 a1 a2), B (b0), C (c0 c1), D (d0 d1): include/wds/tar_samples.hpp's example."""
    urls = []
    for name, n in (("a", 3), ("b", 1), ("c", 2), ("d", 2)):
        urls.append(str(tmp_path / f"{name}.tar"))
        with wdscpp.TarWriter(urls[-1]) as w:
            for i in range(n):
                w.write({"__key__": f"{name}{i}", "txt": f"{name} {i}"})
    return urls


def test_interleave_shards_reads_three_at_once_round_robin(tmp_path):
    urls = interleave_shards(tmp_path)
    order = ["a0", "b0", "c0", "a1", "d0", "c1", "a2", "d1"]  # the header's order for k = 3
    assert keys_of(wdscpp._wdscpp.WebDataset(urls, interleave_shards=3)) == order
    assert keys_of(wdscpp._wdscpp.WebDataset(urls)) == sorted(order)  # 1: one after another
    for cut in range(len(order) + 1):
        ds = wdscpp._wdscpp.WebDataset(urls, interleave_shards=3)
        it = iter(ds)
        prefix = [next(it)["__key__"] for _ in range(cut)]
        again = wdscpp._wdscpp.WebDataset(urls, interleave_shards=3)
        again.restore(ds.state())
        assert prefix + keys_of(again) == order, cut
    with pytest.raises(wdscpp.InvalidArgumentError, match="interleave"):
        wdscpp._wdscpp.WebDataset(urls).restore(ds.state())  # saved with another k
    with pytest.raises(wdscpp.InvalidArgumentError, match="interleave"):
        list(wdscpp._wdscpp.WebDataset(urls, interleave_shards=0))


# --- webdataset's constructor arguments ---


def test_resampled_ignores_shardshuffle_with_a_warning_as_webdataset_does(shards):
    with pytest.warns(UserWarning, match="ignored with resampled=True"):
        ds = wdscpp.WebDataset(shards, resampled=True, shardshuffle=True, seed=3)
    keys = keys_of(ds.with_epoch(10))
    assert len(keys) == 10 and set(keys) <= set(keys_of(wdscpp.WebDataset(shards)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an off shuffle asks for nothing: no warning
        wdscpp.WebDataset(shards, resampled=True, shardshuffle=False)
        wdscpp.WebDataset(shards, resampled=True, shardshuffle=0)


def test_cache_dir_keeps_remote_shards_and_reads_them_again_from_disk(shards, tmp_path):
    import functools
    import http.server
    import threading

    directory = os.path.dirname(shards[0])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        urls = [base + os.path.basename(p) for p in shards]
        cache = tmp_path / "cache"
        cache.mkdir()
        expected = keys_of(wdscpp.WebDataset(shards))
        assert keys_of(wdscpp.WebDataset(urls, cache_dir=str(cache))) == expected
        cached = sorted(f.stat().st_size for f in cache.iterdir() if f.suffix != ".sum")
        assert cached == sorted(os.path.getsize(p) for p in shards)  # one copy of each shard
        # cache_size=0 turns the cache off, as in webdataset: nothing more is written.
        other = tmp_path / "off"
        other.mkdir()
        assert keys_of(wdscpp.WebDataset(urls, cache_dir=str(other), cache_size=0)) == expected
        assert not any(other.iterdir())
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    # The server is gone: the shards come from the cache.
    assert keys_of(wdscpp.WebDataset(urls, cache_dir=str(cache))) == expected


def test_hf_urls_are_read_through_the_engine(shards, tmp_path, monkeypatch):
    # A static stand-in for the Hub (the C++ tests have the full one): the revision answer, a
    # tree page and the files, laid out as the Hub's paths.
    import functools
    import http.server
    import shutil
    import threading

    sha = "ab" * 20
    hub = tmp_path / "hub"
    (hub / "api/datasets/org/name/revision").mkdir(parents=True)
    (hub / "api/datasets/org/name/revision/main").write_text(json.dumps({"sha": sha}))
    (hub / "api/datasets/org/name/tree").mkdir(parents=True)
    tree = [{"type": "file", "path": os.path.basename(p)} for p in shards]
    (hub / f"api/datasets/org/name/tree/{sha}").write_text(json.dumps(tree))
    files = hub / f"datasets/org/name/resolve/{sha}"
    files.mkdir(parents=True)
    for p in shards:
        shutil.copy(p, files)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(hub))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        expected = keys_of(wdscpp.WebDataset(shards))
        assert keys_of(wdscpp.WebDataset("hf://datasets/org/name/")) == expected
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_splitters_take_every_world_size_th_item_as_webdataset(monkeypatch):
    urls = [f"s{i:02d}" for i in range(12)]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "2")
    node = list(wdscpp.split_by_node(iter(urls)))
    assert node == ["s01", "s04", "s07", "s10"]
    assert list(wdscpp.split_by_worker(iter(node))) == ["s04", "s10"]
    assert wdscpp.pytorch_worker_info() == (1, 3, 1, 2)
    with pytest.raises(ValueError, match="explicit nodesplitter"):
        list(wdscpp.single_node_only(iter(urls)))
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    assert list(wdscpp.single_node_only(iter(urls))) == urls


def test_webdataset_nodesplitter_and_workersplitter(shards, monkeypatch):
    everything = keys_of(wdscpp.WebDataset(shards))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    # The default, split_by_node, is the engine's split: one shard of three for rank 1.
    mine = keys_of(wdscpp.WebDataset(shards, nodesplitter=wdscpp.split_by_node))
    assert mine == keys_of(wdscpp.WebDataset(shards)) and 0 < len(mine) < len(everything)
    # None: every rank reads every shard.
    assert keys_of(wdscpp.WebDataset(shards, nodesplitter=None)) == everything
    # A function of the user's gets {"url": ...} items and chooses this rank's shards.
    last = lambda src: (item for item in src if item["url"].endswith(os.path.basename(shards[-1])))
    assert keys_of(wdscpp.WebDataset(shards, nodesplitter=last)) == keys_of(
        wdscpp.WebDataset(shards[-1:], rank=0, world_size=1)
    )
    pattern = os.path.dirname(shards[0]) + "/shard-{000000..%06d}.tar" % (len(shards) - 1)
    assert keys_of(wdscpp.WebDataset(pattern, nodesplitter=last)) == keys_of(
        wdscpp.WebDataset(shards[-1:], rank=0, world_size=1)
    )
    with pytest.raises(ValueError, match="explicit nodesplitter"):
        list(wdscpp.WebDataset(shards, nodesplitter=wdscpp.single_node_only))
    # workersplitter=None: every DataLoader worker reads this rank's shards (webdataset's).
    assert keys_of(wdscpp.WebDataset(shards, workersplitter=None)) == mine
    # resampled=True with nodesplitter=None, as webdataset users write it: each rank draws.
    assert len(keys_of(wdscpp.WebDataset(shards, resampled=True, nodesplitter=None).with_epoch(5))) == 5


def test_rename_moves_fields_to_new_names_as_webdataset(shards):
    plain = list(wdscpp.WebDataset(shards).decode("rgb8"))
    renamed = list(wdscpp.WebDataset(shards).decode("rgb8").rename(image="jpg;png", label="cls"))
    assert len(renamed) == len(plain)
    for before, after in zip(plain, renamed):
        assert after["__key__"] == before["__key__"]
        assert "png" not in after.keys() and "cls" not in after.keys()
        assert after["label"] == before["cls"]
        assert np.array_equal(after["image"], before["png"])
        assert after["txt"] == before["txt"]  # keep=True keeps the other fields
    # Before decode() the renamed fields are raw bytes (decoding goes by extension, as webdataset).
    raw = next(iter(wdscpp.WebDataset(shards).rename(label="cls").decode()))
    assert raw["label"] == b"0" and "cls" not in raw.keys()
    only = next(iter(wdscpp.WebDataset(shards).decode().rename(label="cls", keep=False)))
    assert set(only.keys()) - {"__key__", "__url__", "__local_path__"} == {"label"}
    with pytest.raises(wdscpp.Error, match="nothing"):
        list(wdscpp.WebDataset(shards).rename(label="nothing"))
    with pytest.raises(TypeError):
        list(wdscpp.WebDataset(shards).rename(label=3))  # as webdataset's


def test_map_dict_replaces_fields_in_place(shards):
    plain = list(wdscpp.WebDataset(shards).decode("rgb8"))
    mapped = list(
        wdscpp.WebDataset(shards)
        .decode("rgb8")
        .map_dict(png=lambda t: 255 - t, cls=lambda c: c * 10, txt=str.upper)
    )
    for before, after in zip(plain, mapped):
        assert np.array_equal(after["png"], 255 - before["png"])
        assert after["cls"] == before["cls"] * 10 and after["txt"] == before["txt"].upper()
        assert after["json"] == before["json"]  # fields not named are left alone
    # to_tuple and batched after it, collated as webdataset does.
    images, labels = next(iter(
        wdscpp.WebDataset(shards).decode("rgb8").map_dict(cls=lambda c: c + 1)
        .to_tuple("png", "cls").batched(4)))
    assert images.shape == (4, 4, 5, 3)
    assert list(labels) == [int(p["cls"]) + 1 for p in plain[:4]]
    with pytest.raises(KeyError, match="nothing"):
        list(wdscpp.WebDataset(shards).decode().map_dict(nothing=str))
    # Any Python object, as in webdataset (the engine hands the samples to Python for it).
    marker = object()
    assert all(s["cls"] is marker for s in
               wdscpp.WebDataset(shards).decode().map_dict(cls=lambda c: marker))
    with pytest.raises(ZeroDivisionError):
        list(wdscpp.WebDataset(shards).decode().map_dict(cls=lambda c: 1 / 0))


def test_map_tuple_maps_by_position_as_webdataset(shards):
    plain = list(wdscpp.WebDataset(shards).decode().to_tuple("txt", "cls", "json"))
    mapped = list(
        wdscpp.WebDataset(shards).decode().to_tuple("txt", "cls", "json")
        .map_tuple(None, lambda c: -c)
    )
    assert [t[0] for t in mapped] == [t[0] for t in plain]  # None: unchanged
    assert [t[1] for t in mapped] == [-t[1] for t in plain]
    assert [t[2] for t in mapped] == [t[2] for t in plain]  # past the functions: untouched


def test_batched_collation_fn_gets_the_items_as_a_list_as_webdataset(shards):
    seen = []

    def collate(items):
        seen.append(len(items))
        return {"keys": [s["__key__"] for s in items], "labels": [s["cls"] for s in items]}

    batches = list(wdscpp.WebDataset(shards).decode().batched(4, collation_fn=collate))
    plain = list(wdscpp.WebDataset(shards).decode())
    assert [k for b in batches for k in b["keys"]] == keys_of(plain)
    assert [c for b in batches for c in b["labels"]] == [s["cls"] for s in plain]
    assert seen[:-1] == [4] * (len(seen) - 1) and sum(seen) == len(plain)
    tuples = list(wdscpp.WebDataset(shards).decode().to_tuple("txt", "cls")
                  .batched(3, collation_fn=lambda rows: list(zip(*rows)), partial=False))
    assert all(len(t[0]) == 3 for t in tuples) and len(tuples) == len(plain) // 3
    with pytest.raises(KeyError):
        list(wdscpp.WebDataset(shards).decode().batched(2, collation_fn=lambda rows: rows[0]["nope"]))


def test_webdatasets_other_constructor_arguments_are_taken(shards):
    everything = keys_of(wdscpp.WebDataset(shards))
    same = wdscpp.WebDataset(shards, detshuffle=True, empty_check=False, repeat=False,
                             verbose=True, url_to_name=os.path.basename)
    assert keys_of(same) == everything
    resampled = keys_of(wdscpp.WebDataset(shards, mode="resampled", seed=1).with_epoch(7))
    assert len(resampled) == 7 and set(resampled) <= set(everything)
    with pytest.raises(ValueError, match="mode"):
        wdscpp.WebDataset(shards, mode="sideways")


def wav_bytes(samples, rate=8000):
    """A mono 16-bit WAV (Python's wave module), so that no ffmpeg is needed."""
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, dtype="<i2").tobytes())
    return out.getvalue()


def test_audio_decodes_to_waveform_and_rate_when_asked(tmp_path):
    pcm = (np.arange(8000) * 13 % 4000 - 2000).astype(np.int16)
    path = str(tmp_path / "audio.tar")
    with tarfile.open(path, "w") as tar:
        for name, data in [("a.wav", wav_bytes(pcm)), ("a.cls", b"1"), ("b.wav", b"RIFF junk"),
                           ("b.cls", b"2")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    # Without "audio" the field stays bytes, as in webdataset without torch_audio.
    first = next(iter(wdscpp.WebDataset(path).decode()))
    assert bytes(first["wav"]) == wav_bytes(pcm)
    ds = wdscpp.WebDataset(path).decode("audio", audio_duration=0.25, audio_offset=0.5,
                                        audio_rate=16000, handler=wdscpp.ignore_and_continue)
    items = list(ds)
    assert len(items) == 1  # the bad WAV is dropped by the handler
    wave, rate = items[0]["wav"]
    assert rate == 16000
    assert isinstance(wave, np.ndarray) and wave.dtype == np.float32 and wave.shape == (1, 4000)
    # A window at the file's rate is the samples themselves, scaled to [-1, 1].
    (wave, rate), = [s["wav"] for s in wdscpp.WebDataset(path).decode(
        "audio", audio_duration=0.25, audio_offset=0.5, handler=wdscpp.ignore_and_continue)]
    assert rate == 8000
    np.testing.assert_array_equal(wave[0], pcm[4000:6000] / 32768.0)
    # Padded, a window the audio ends within has the window's length: zeros after the end.
    (wave, rate), = [s["wav"] for s in wdscpp.WebDataset(path).decode(
        "audio", audio_duration=1.5, audio_offset=0.5, audio_pad=True,
        handler=wdscpp.ignore_and_continue)]
    assert wave.shape == (1, 12000)
    np.testing.assert_array_equal(wave[0, :4000], pcm[4000:] / 32768.0)
    assert not wave[0, 4000:].any()
    with pytest.raises(ValueError):
        wdscpp.WebDataset(path).decode("audio", audio_channels=5)


def test_video_decodes_to_clips_that_batch_when_asked(tmp_path):
    import shutil

    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is missing")
    clip = tmp_path / "clip.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=96x64:rate=10", "-t", "2", "-c:v", "libx264", "-pix_fmt",
                    "yuv420p", str(clip)], check=True)
    data = clip.read_bytes()
    path = str(tmp_path / "video.tar")
    with tarfile.open(path, "w") as tar:
        for name, payload in [("a.mp4", data), ("a.cls", b"1"), ("b.mp4", b"not a video"),
                              ("b.cls", b"2"), ("c.mp4", data), ("c.cls", b"3")]:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    # Without "video" the field stays bytes, as in webdataset without torch_video.
    assert bytes(next(iter(wdscpp.WebDataset(path).decode()))["mp4"]) == data
    items = list(wdscpp.WebDataset(path).decode("video", video_frames=3, video_size=(24, 32),
                                                handler=wdscpp.ignore_and_continue))
    assert [s["__key__"] for s in items] == ["a", "c"]  # the bad one is dropped by the handler
    frames = items[0]["mp4"]
    assert isinstance(frames, np.ndarray) and frames.dtype == np.uint8
    assert frames.shape == (3, 24, 32, 3)
    assert len({frames[i].tobytes() for i in range(3)}) == 3  # testsrc2 moves: distinct frames
    clips, cls = next(iter(wdscpp.WebDataset(path).decode(
        "video", video_frames=3, video_size=16, handler=wdscpp.ignore_and_continue)
        .to_tuple("mp4", "cls").batched(2)))
    assert clips.shape == (2, 3, 16, 16, 3)
    np.testing.assert_array_equal(clips[0], clips[1])  # the same bytes, the same fixed start
    with pytest.raises(ValueError):
        wdscpp.WebDataset(path).decode("video", video_size=(16, 0))
    # Through WebLoader's threads, clips come as torch tensors by DLPack (no copy).
    torch = pytest.importorskip("torch")
    ds = wdscpp.WebDataset(path).decode("video", video_frames=3, video_size=16,
                                        handler=wdscpp.ignore_and_continue) \
        .to_tuple("mp4", "cls").batched(2)
    batch, _ = next(iter(wdscpp.WebLoader(ds, batch_size=None, num_workers=2)))
    assert isinstance(batch, torch.Tensor) and batch.dtype == torch.uint8
    assert tuple(batch.shape) == (2, 3, 16, 16, 3)
    np.testing.assert_array_equal(batch.numpy(), clips)
