"""webdataset.gopen: open a URL as a binary file object, through the engine's storage.

    with wds.gopen("s3://bucket/train-000000.tar") as stream:
        header = stream.read(512)
    with wds.gopen("pipe:gzip > /tmp/out.gz", "wb") as stream:
        stream.write(b"abc")      # close() waits for gzip and raises if it fails

Every URL the engine reads or writes works here, with the engine's retries and credentials:
local paths, file:, "-" (stdin/stdout), pipe:CMD, http(s)://, s3://, az://, ... (docs/storage.md).
Reading gives an io.BufferedReader, writing an io.BufferedWriter whose close() finishes the write:
a local file is renamed into place (it appears whole or not at all), an upload completes, a
pipe's command is waited for and a non-zero exit raises. Streams are sequential (not seekable).
Errors are wdscpp's (NotFoundError is a FileNotFoundError, ...) and name the URL.

As in webdataset: GOPEN_REWRITE="prefix=replacement;..." rewrites URLs, GOPEN_VERBOSE=1 reports
each open, GOPEN_BUFFER sets the buffer size; with wdscpp.utils.enforce_security (WDS_SECURE=1)
local files, pipe: URLs and rewriting are refused. gopen_schemes maps a scheme to the function
that opens it; put your own there to take over a scheme. webdataset's subprocess helpers (Pipe,
gopen_curl, gopen_gsutil, gopen_ais, ...) have no counterpart: the engine reads those URLs.
"""

import io
import os
import re
import sys
from urllib.parse import urlparse

from . import _wdscpp, utils

# Printed with each open when GOPEN_VERBOSE is set (webdataset's global of the same name).
info = {}


def _verbose():
    return int(os.environ.get("GOPEN_VERBOSE", 0))


class _EngineReader(io.RawIOBase):
    """A URL's bytes through _wdscpp._Reader."""

    def __init__(self, url, allow_pipe):
        self._reader = _wdscpp._Reader(url, allow_pipe)
        self.name = url
        self.mode = "rb"

    def readable(self):
        return True

    def read(self, n=-1):
        self._checkClosed()
        return self._reader.read(-1 if n is None else n)

    def readall(self):
        return self.read(-1)

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        if not self.closed:
            try:
                self._reader.close()
            finally:
                super().close()


class _EngineWriter(io.RawIOBase):
    """Bytes to a URL through _wdscpp._Writer; close() finishes them."""

    def __init__(self, url, allow_pipe):
        self._writer = _wdscpp._Writer(url, allow_pipe)
        self.name = url
        self.mode = "wb"

    def writable(self):
        return True

    def write(self, data):
        self._checkClosed()
        data = bytes(data)
        self._writer.write(data)
        return len(data)

    def close(self):
        if not self.closed:
            try:
                self._writer.close()
            finally:
                super().close()


def _open_engine(url, mode, bufsize, allow_pipe):
    if mode == "rb":
        raw = _EngineReader(url, allow_pipe)
        buffered = io.BufferedReader
    elif mode == "wb":
        raw = _EngineWriter(url, allow_pipe)
        buffered = io.BufferedWriter
    else:
        raise ValueError(f"{mode}: unknown mode")
    if bufsize == 0:
        return raw
    return buffered(raw, buffer_size=bufsize if bufsize > 0 else io.DEFAULT_BUFFER_SIZE)


def gopen_engine(url, mode="rb", bufsize=8192):
    """Opens url through the engine's storage (every scheme it knows; an unknown one is a
    wdscpp.InvalidArgumentError, a ValueError, listing those it knows)."""
    return _open_engine(url, mode, bufsize, allow_pipe=False)


def gopen_file(url, mode="rb", bufsize=8192):
    """Opens a local path or file: URL."""
    if utils.enforce_security:
        raise ValueError("gopen: unsafe_gopen is False, cannot open local files")
    bufsize = int(os.environ.get("GOPEN_BUFFER", bufsize))
    return _open_engine(url, mode, bufsize, allow_pipe=False)


def gopen_pipe(url, mode="rb", bufsize=8192):
    """Opens pipe:CMD: reads the stdout of, or writes to the stdin of, `/bin/sh -c CMD`. It runs
    any command, so only for trusted URLs; refused under enforce_security."""
    assert url.startswith("pipe:"), url
    if utils.enforce_security:
        raise ValueError("gopen_pipe: unsafe_gopen is False, cannot open pipe URLs")
    return _open_engine(url, mode, bufsize, allow_pipe=True)


def gopen_error(url, *args, **kw):
    """A handler for schemes that must not be opened."""
    raise ValueError(f"{url}: no gopen handler defined")


# Scheme -> handler(url, mode, bufsize, **kw). Local paths and file: go to gopen_file first.
gopen_schemes = dict(
    __default__=gopen_engine,
    pipe=gopen_pipe,
    http=gopen_engine,
    https=gopen_engine,
    s3=gopen_engine,
    az=gopen_engine,
)


def rewrite_url(url):
    """url after the first GOPEN_REWRITE rule ("prefix=replacement;...", prefixes are regular
    expressions anchored at the start) that changes it; refused under enforce_security."""
    rules = os.environ.get("GOPEN_REWRITE")
    if rules is None:
        return url
    if utils.enforce_security:
        raise ValueError(
            "rewrite_url: unsafe_gopen is False, cannot rewrite URLs using environment variables"
        )
    for rule in rules.split(";"):
        prefix, replacement = rule.split("=", 1)
        rewritten = re.sub("^" + prefix, replacement, url)
        if rewritten != url:
            if _verbose():
                print(f"GOPEN REWRITE {url} -> {rewritten}", file=sys.stderr)
            return rewritten
    return url


def gopen(url, mode="rb", bufsize=8192, **kw):
    """Opens url for reading ("rb") or writing ("wb") as a binary file object; "-" is stdin or
    stdout. Keywords beyond bufsize go to the scheme's handler."""
    if _verbose():
        print("GOPEN", url, info, file=sys.stderr)
    if mode not in ("rb", "wb"):
        raise ValueError(f"{mode}: unknown mode (gopen opens 'rb' or 'wb')")
    if url == "-":
        # Python's own streams, so that bytes already buffered there keep their order.
        return sys.stdin.buffer if mode == "rb" else sys.stdout.buffer
    url = rewrite_url(url)
    scheme = urlparse(url).scheme
    if scheme in ("", "file"):
        return gopen_file(url, mode, bufsize, **kw)
    handler = gopen_schemes.get(scheme, gopen_schemes["__default__"])
    return handler(url, mode, bufsize, **kw)


def reader(url, **kw):
    """gopen(url, "rb", **kw)."""
    return gopen(url, "rb", **kw)
