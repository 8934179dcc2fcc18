"""wdscpp.gopen and wdscpp.cache: webdataset's gopen (local files, pipe:, "-", rewriting, the
security flag, a writer's close) and its cache stages (StreamingOpen, FileCache, LRUCleanup),
all reading and writing through the engine's storage."""

import io
import os
import sys
import tarfile

import pytest

import wdscpp
from wdscpp import utils
from wdscpp.cache import (
    FileCache,
    LRUCleanup,
    StreamingOpen,
    check_tar_format,
    pipe_cleaner,
    url_to_cache_name,
)
from wdscpp.gopen import gopen, gopen_schemes, reader, rewrite_url


@pytest.fixture(autouse=True)
def insecure(monkeypatch):
    """Each test starts with enforce_security off and no GOPEN_* settings."""
    monkeypatch.setattr(utils, "enforce_security", False)
    for name in ("GOPEN_REWRITE", "GOPEN_VERBOSE", "GOPEN_BUFFER"):
        monkeypatch.delenv(name, raising=False)


def tar_bytes(members):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out.getvalue()


# gopen: reading and writing


def test_local_file_round_trip(tmp_path):
    data = bytes(range(256)) * 1000
    path = str(tmp_path / "a.bin")
    with gopen(path, "wb") as stream:
        assert stream.write(data) == len(data)
    with gopen(path) as stream:
        assert isinstance(stream, io.BufferedReader)
        assert stream.name == path
        assert stream.read(10) == data[:10]
        assert stream.read() == data[10:]
        assert stream.read() == b""
    with gopen("file://" + path, "rb") as stream:
        assert stream.read() == data
    with reader(path) as stream:
        assert stream.read(3) == data[:3]


def test_bufsize_zero_gives_the_raw_stream(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"hello world")
    with gopen(str(path), bufsize=0) as stream:
        assert isinstance(stream, io.RawIOBase)
        assert stream.read(5) == b"hello"
        buf = bytearray(3)
        assert stream.readinto(buf) == 3 and buf == b" wo"
        assert stream.read() == b"rld"


def test_writer_close_puts_the_file_in_place(tmp_path):
    path = tmp_path / "out.bin"
    stream = gopen(str(path), "wb")
    stream.write(b"x" * 100000)
    stream.flush()
    # Written to a temporary name; the file appears whole at close().
    assert not path.exists()
    stream.close()
    assert path.read_bytes() == b"x" * 100000
    assert os.listdir(tmp_path) == ["out.bin"]
    with pytest.raises(ValueError):
        stream.write(b"more")


def test_pipe_round_trip(tmp_path):
    path = tmp_path / "piped"
    with gopen(f"pipe:cat > {path}", "wb") as stream:
        stream.write(b"abc")
    assert path.read_bytes() == b"abc"
    with gopen(f"pipe:cat {path}") as stream:
        assert stream.read() == b"abc"


def test_pipe_reader_closed_early_is_no_error():
    with gopen("pipe:yes") as stream:
        assert stream.read(4) == b"y\ny\n"


def test_pipe_writer_close_fails_on_exit_status():
    stream = gopen("pipe:cat > /dev/null; exit 3", "wb")
    stream.write(b"abc")
    with pytest.raises(wdscpp.UnavailableError, match="exit 3.*status 3"):
        stream.close()


def test_pipe_reader_fails_on_exit_status():
    with pytest.raises(wdscpp.UnavailableError, match="status 2"):
        with gopen("pipe:echo partial; exit 2") as stream:
            stream.read()


def test_missing_file_names_it(tmp_path):
    path = str(tmp_path / "missing.tar")
    with pytest.raises(FileNotFoundError, match="missing.tar") as info:
        gopen(path)
    assert isinstance(info.value, wdscpp.NotFoundError)
    assert path in str(info.value)


def test_unknown_scheme_is_a_value_error_naming_the_url():
    with pytest.raises(ValueError, match="gopher://host/x.tar"):
        gopen("gopher://host/x.tar")


def test_modes():
    for mode in ("r", "w", "ab", "rb+"):
        with pytest.raises(ValueError, match="unknown mode"):
            gopen("/dev/null", mode)


def test_dash_is_stdin_and_stdout():
    assert gopen("-", "rb") is sys.stdin.buffer
    assert gopen("-", "wb") is sys.stdout.buffer


def test_scheme_handlers_are_looked_up_at_call_time(monkeypatch):
    calls = []

    def handler(url, mode, bufsize, **kw):
        calls.append((url, mode, bufsize, kw))
        return io.BytesIO(b"from handler")

    monkeypatch.setitem(gopen_schemes, "http", handler)
    assert gopen("http://host/a.tar", bufsize=4, extra=1).read() == b"from handler"
    assert calls == [("http://host/a.tar", "rb", 4, {"extra": 1})]


# rewriting and security


def test_rewrite_url(monkeypatch, tmp_path):
    monkeypatch.setenv("GOPEN_REWRITE", f"http://old/=http://new/;/nowhere/={tmp_path}/")
    assert rewrite_url("http://old/a.tar") == "http://new/a.tar"
    assert rewrite_url("http://other/old/a.tar") == "http://other/old/a.tar"
    (tmp_path / "a.txt").write_bytes(b"rewritten")
    with gopen("/nowhere/a.txt") as stream:
        assert stream.read() == b"rewritten"


def test_rewrite_url_verbose(monkeypatch, capsys):
    monkeypatch.setenv("GOPEN_REWRITE", "s3://a/=s3://b/")
    monkeypatch.setenv("GOPEN_VERBOSE", "1")
    assert rewrite_url("s3://a/x") == "s3://b/x"
    assert "s3://a/x -> s3://b/x" in capsys.readouterr().err


def test_security_refuses_local_files_pipes_and_rewriting(monkeypatch, tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"secret")
    monkeypatch.setattr(utils, "enforce_security", True)
    for url in (str(path), f"file://{path}"):
        for mode in ("rb", "wb"):
            with pytest.raises(ValueError, match="gopen: unsafe_gopen is False, cannot open local"):
                gopen(url, mode)
    with pytest.raises(ValueError, match="gopen_pipe: unsafe_gopen is False, cannot open pipe"):
        gopen(f"pipe:cat {path}")
    assert path.read_bytes() == b"secret"
    monkeypatch.setenv("GOPEN_REWRITE", "http://a/=http://b/")
    with pytest.raises(ValueError, match="rewrite_url: unsafe_gopen is False, cannot rewrite"):
        rewrite_url("http://a/x")


def test_security_leaves_remote_urls_and_dash(monkeypatch):
    monkeypatch.setattr(utils, "enforce_security", True)
    monkeypatch.setitem(gopen_schemes, "https", lambda url, mode, bufsize: io.BytesIO(b"ok"))
    assert gopen("https://host/a.tar").read() == b"ok"
    assert gopen("-") is sys.stdin.buffer


# cache


def test_url_to_cache_name():
    assert url_to_cache_name("https://host/a/b/c.tar") == "c.tar"
    assert url_to_cache_name("s3://bucket/a/b/c.tar", ndir=1) == "b/c.tar"
    assert url_to_cache_name("file:///a/b/c.tar", ndir=5) == "a/b/c.tar"
    assert url_to_cache_name("/a/b/c.tar") == "c.tar"
    assert url_to_cache_name("pipe:cat /a/b.tar") == "pipe%3Acat%20%2Fa%2Fb.tar"
    assert len(url_to_cache_name("pipe:" + "x" * 500)) == 128
    with pytest.raises(AssertionError):
        url_to_cache_name(b"/a/b.tar")


def test_pipe_cleaner():
    assert pipe_cleaner("pipe:curl -s -L https://host/a.tar") == "https://host/a.tar"
    assert pipe_cleaner("pipe:aws s3 cp s3://b/a.tar -") == "s3://b/a.tar"
    assert pipe_cleaner("pipe:cat /a.tar") == "pipe:cat /a.tar"
    assert pipe_cleaner("/a.tar") == "/a.tar"


def test_streaming_open(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"local")
    items = list(StreamingOpen()([str(path), {"url": f"file://{path}"}, f"pipe:cat {path}"]))
    assert [item["url"] for item in items] == [str(path), f"file://{path}", f"pipe:cat {path}"]
    assert [item.get("local_path") for item in items] == [str(path), str(path), None]
    assert [item["stream"].read() for item in items] == [b"local"] * 3


def test_streaming_open_handler(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"here")
    urls = [str(tmp_path / "missing"), str(path)]
    with pytest.raises(wdscpp.NotFoundError, match="missing"):
        list(StreamingOpen()(urls))
    items = list(StreamingOpen(handler=wdscpp.ignore_and_continue)(urls))
    assert [item["url"] for item in items] == [str(path)]
    assert list(StreamingOpen(handler=wdscpp.ignore_and_stop)(urls)) == []


def test_streaming_open_respects_security(monkeypatch, tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"secret")
    monkeypatch.setattr(utils, "enforce_security", True)
    with pytest.raises(ValueError, match="cannot open local files"):
        list(StreamingOpen()([str(path)]))


def test_file_cache_local_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"local")
    cache_dir = tmp_path / "cache"
    (item,) = FileCache(str(cache_dir), validator=None)([{"url": str(path)}])
    assert item["url"] == str(path) and item["local_path"] == str(path)
    with item["stream"] as stream:
        assert stream.read() == b"local"
    assert not cache_dir.exists()


def test_file_cache_downloads_once(tmp_path):
    shard = tmp_path / "shard.tar"
    shard.write_bytes(tar_bytes({"0.txt": b"zero", "0.cls": b"1"}))
    runs = tmp_path / "runs"
    url = f"pipe:echo run >> {runs}; cat {shard}"
    cache_dir = tmp_path / "cache"
    cache = FileCache(str(cache_dir), url_to_name=lambda url: "shard-000.tar")
    for _ in range(2):
        (item,) = cache([url])
        assert item["url"] == url
        assert item["local_path"] == str(cache_dir / "shard-000.tar")
        with item["stream"] as stream:
            assert stream.read() == shard.read_bytes()
    assert runs.read_text() == "run\n"
    assert os.listdir(cache_dir) == ["shard-000.tar"]
    assert check_tar_format(item["local_path"])


def test_file_cache_rejects_what_is_not_a_tar(tmp_path):
    cache_dir = tmp_path / "cache"
    url = "pipe:echo not a tar"
    with pytest.raises(ValueError, match="is not a tar archive.*not a tar"):
        list(FileCache(str(cache_dir))([url]))
    assert os.listdir(cache_dir) == []
    items = list(FileCache(str(cache_dir), handler=wdscpp.ignore_and_continue)([url, url]))
    assert items == []


def test_file_cache_failed_download_leaves_nothing(tmp_path):
    cache_dir = tmp_path / "cache"
    with pytest.raises(wdscpp.UnavailableError, match="status 1"):
        list(FileCache(str(cache_dir), validator=None)(["pipe:echo partial; exit 1"]))
    assert os.listdir(cache_dir) == []


def test_file_cache_refuses_names_outside_the_cache(tmp_path):
    cache = FileCache(str(tmp_path / "cache"), url_to_name=lambda url: "../escape.tar")
    with pytest.raises(ValueError, match="bad cache name"):
        cache.get_file("pipe:echo x")
    assert not (tmp_path / "escape.tar").exists()


def fill(directory, count, size):
    """count files of size bytes, file i older than file i + 1."""
    for i in range(count):
        path = directory / f"{i:03d}"
        path.write_bytes(b"x" * size)
        os.utime(path, (1000 + i, 1000 + i))


def test_lru_cleanup_deletes_the_oldest_until_under_size(tmp_path):
    fill(tmp_path, 10, 1000)
    (tmp_path / "sub").mkdir()
    fill(tmp_path / "sub", 1, 1000)  # the oldest of all
    LRUCleanup(str(tmp_path), cache_size=4500, keyfn=os.path.getmtime, interval=None).cleanup()
    assert sorted(os.listdir(tmp_path)) == ["006", "007", "008", "009", "sub"]
    assert os.listdir(tmp_path / "sub") == []


def test_lru_cleanup_keeps_a_cache_within_size(tmp_path):
    fill(tmp_path, 5, 1000)
    LRUCleanup(str(tmp_path), cache_size=5000, interval=None).cleanup()
    assert len(os.listdir(tmp_path)) == 5


def test_lru_cleanup_runs_at_most_once_per_interval(tmp_path):
    cleaner = LRUCleanup(str(tmp_path), cache_size=2000, keyfn=os.path.getmtime, interval=3600)
    fill(tmp_path, 3, 1000)
    cleaner.cleanup()
    assert sorted(os.listdir(tmp_path)) == ["001", "002"]
    fill(tmp_path, 3, 1000)
    cleaner.cleanup()
    assert len(os.listdir(tmp_path)) == 3
    LRUCleanup(str(tmp_path / "absent"), interval=None).cleanup()


def test_file_cache_cleans_up_before_downloading(tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    fill(cache_dir, 3, 4000)
    shard = tmp_path / "shard.tar"
    shard.write_bytes(tar_bytes({"0.txt": b"zero"}))
    cache = FileCache(str(cache_dir), cache_size=9000, cache_cleanup_interval=0,
                      url_to_name=lambda url: "new.tar")
    cache.cleaner.keyfn = os.path.getmtime
    (item,) = cache([f"pipe:cat {shard}"])
    item["stream"].close()
    assert sorted(os.listdir(cache_dir)) == ["001", "002", "new.tar"]
