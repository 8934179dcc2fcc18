"""webdataset.cache: pipeline stages that open shard URLs as streams, one that first downloads
them into a local directory, and that directory's LRU cleanup.

    stage = wds.cache.FileCache("/tmp/shards", cache_size=10e9)
    for item in stage([{"url": "https://host/train-000000.tar"}]):
        item["stream"], item["local_path"]    # the downloaded copy, opened

WebDataset(cache_dir=..., cache_size=...) does not use these classes: it caches through the
engine's own shard cache (docs/storage.md), which fills the cache while the shard is read.
These are webdataset's names for code that builds its own pipelines from them; every URL is
opened with wdscpp.gopen, so wdscpp.utils.enforce_security applies to the local ones.
"""

import os
import re
import sys
import time
import urllib.parse
from urllib.parse import urlparse
from urllib.request import url2pathname

from .gopen import gopen
from .handlers import reraise_exception

default_cache_dir = os.environ.get("WDS_CACHE", "./_cache")
default_cache_size = float(os.environ.get("WDS_CACHE_SIZE", "1e18"))
verbose_cache = int(os.environ.get("WDS_VERBOSE_CACHE", "0"))


def islocal(url):
    """Whether url names a local file (a plain path or a file: URL)."""
    return url != "-" and urlparse(url).scheme in ("", "file")


def _local_path(url):
    return url2pathname(urlparse(url).path) if urlparse(url).scheme == "file" else url


def _read_start(fname, n=512):
    with open(fname, "rb") as f:
        return f.read(n)


def _filetype(header):
    """What a file's first 512 bytes say it is: a tar archive, gzip data or data."""
    if header[:2] == b"\x1f\x8b":
        return "gzip compressed data"
    if header[257:262] == b"ustar":
        return "POSIX tar archive"
    return "data"


def check_tar_format(fname):
    """Whether fname holds a tar archive (or gzip data, as a .tgz does)."""
    return _filetype(_read_start(fname)) != "data"


def pipe_cleaner(spec):
    """The URL inside a pipe: spec (the first http(s)/hdfs/gs/ais/s3 word), else spec.
    (webdataset 1.0 refuses to run it unless ALLOW_OBSOLETE=1; here it simply works.)"""
    if spec.startswith("pipe:"):
        for word in spec[5:].split(" "):
            if re.match(r"^(https?|hdfs|gs|ais|s3):", word):
                return word
    return spec


def url_to_cache_name(url, ndir=0):
    """The file name url is cached under: for file, http(s), ftp(s), gs, s3 and ais URLs the
    last ndir + 1 components of the path, for others the whole URL quoted (at most 128
    characters)."""
    assert isinstance(url, str)
    parsed = urlparse(url)
    if parsed.scheme in ("", "file", "http", "https", "ftp", "ftps", "gs", "s3", "ais"):
        components = parsed.path.lstrip("/").split("/")
        return "/".join(components[-1 - ndir :])
    return urllib.parse.quote(url, safe="_+{}*,-")[-128:]


class LRUCleanup:
    """Keeps the files under cache_dir at most cache_size bytes in all, deleting the oldest
    first (by keyfn, creation time by default); cleanup() runs at most once per interval
    seconds (None: every call). Files that other processes delete meanwhile are skipped."""

    def __init__(self, cache_dir=None, cache_size=int(1e12), keyfn=os.path.getctime, verbose=False,
                 interval=30):
        self.cache_dir = cache_dir
        self.cache_size = cache_size
        self.keyfn = keyfn
        self.verbose = verbose
        self.interval = interval
        self.last_run = 0

    def set_cache_dir(self, cache_dir):
        self.cache_dir = cache_dir

    def cleanup(self):
        if self.cache_dir is None or not os.path.exists(self.cache_dir):
            return
        if self.interval is not None and time.time() - self.last_run < self.interval:
            return
        files = []  # (key, size, path)
        for dirpath, _, filenames in os.walk(self.cache_dir):
            for filename in filenames:
                path = os.path.join(dirpath, filename)
                try:
                    files.append((self.keyfn(path), os.path.getsize(path), path))
                except OSError:
                    pass  # deleted since the walk saw it
        total = sum(size for _, size, _ in files)
        files.sort(key=lambda f: f[0])
        for _, size, path in files:
            if total <= self.cache_size:
                break
            if self.verbose:
                print(f"# deleting {path}", file=sys.stderr)
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            total -= size
        self.last_run = time.time()


def download(url, dest, chunk_size=1024**2, verbose=False):
    """Copies url's bytes to the local file dest, which appears whole or not at all."""
    temp = f"{dest}.temp{os.getpid()}"
    try:
        with gopen(url) as stream, open(temp, "wb") as out:
            while data := stream.read(chunk_size):
                out.write(data)
        os.rename(temp, dest)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise


def _urls(items):
    for item in items:
        yield item["url"] if isinstance(item, dict) else item


class StreamingOpen:
    """A stage from URLs (or {"url": ...} dicts) to {"url", "stream"} dicts, with "local_path"
    for local files. A URL that fails to open goes to handler: True skips it, False stops."""

    def __init__(self, verbose=False, handler=reraise_exception):
        self.verbose = verbose
        self.handler = handler

    def __call__(self, urls):
        for url in _urls(urls):
            try:
                stream = gopen(url)
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            if islocal(url):
                yield dict(url=url, stream=stream, local_path=_local_path(url))
            else:
                yield dict(url=url, stream=stream)


class FileCache:
    """A stage from URLs (or {"url": ...} dicts) to {"url", "stream", "local_path"} dicts: a
    remote URL is first downloaded into cache_dir (WDS_CACHE, else ./_cache) under
    url_to_name(url), unless it is there already, and checked by validator (a file that fails
    is deleted and a ValueError); a local file is opened where it is. cache_size > 0 bounds the
    directory with LRUCleanup, run before each download at most every cache_cleanup_interval
    seconds. A URL that fails goes to handler: True skips it, False stops. (webdataset instead
    retries a URL up to 10 times while handler returns True; the engine already retries
    transient failures.)"""

    def __init__(self, cache_dir=None, *, url_to_name=url_to_cache_name, verbose=False,
                 validator=check_tar_format, handler=reraise_exception, cache_size=-1,
                 cache_cleanup_interval=30):
        self.url_to_name = url_to_name
        self.validator = validator
        self.handler = handler
        self.cache_dir = default_cache_dir if cache_dir is None else cache_dir
        self.verbose = verbose or bool(verbose_cache)
        self.cleaner = None
        if cache_size > 0:
            self.cleaner = LRUCleanup(self.cache_dir, cache_size, verbose=self.verbose,
                                      interval=cache_cleanup_interval)

    def get_file(self, url):
        """The local path of url: its own for a local file, else its copy in the cache."""
        assert isinstance(url, str)
        if islocal(url):
            return _local_path(url)
        name = self.url_to_name(url)
        if not name or os.path.isabs(name) or ".." in name.split("/"):
            raise ValueError(f"{url}: bad cache name {name!r}")
        dest = os.path.join(self.cache_dir, name)
        if not os.path.exists(dest):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if self.verbose:
                print(f"# downloading {url} to {dest}", file=sys.stderr)
            if self.cleaner is not None:
                self.cleaner.cleanup()
            download(url, dest, verbose=self.verbose)
            if self.validator and not self.validator(dest):
                start = _read_start(dest)
                os.remove(dest)
                raise ValueError(f"{dest} ({url}) is not a tar archive, but {_filetype(start)},"
                                 f" contains {start[:200]!r}")
        return dest

    def __call__(self, urls):
        for url in _urls(urls):
            try:
                dest = self.get_file(url)
                # A local URL through gopen (enforce_security applies); the cache's own copy
                # is ours to open.
                stream = gopen(url) if islocal(url) else open(dest, "rb")
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            yield dict(url=url, stream=stream, local_path=dest)

