"""DirectoryShardList: shards claimed from a spool directory, as webdataset's.

    import wdscpp as wds
    shards = wds.DirectoryShardList("/spool/", mode="unlink", poll=None)
    dataset = wds.DataPipeline(shards, wds.tarfile_to_samples(), wds.decode("rgb8"))

A producer drops shards (*.tar, *.tgz, *.tar.gz) into the directory; each reader claims one by
renaming it to NAME._PID_, yields {"url": "/spool/NAME._PID_"}, and when asked for the next one
recycles the claim by mode: "resample" renames it back (it can be claimed again, forever),
"unlink" deletes it, "keep" renames it to NAME._done_. Then it returns to the spool the claims of
processes that are gone (crashed readers), by the mode as well.

Process and thread safety: a rename is atomic, so any number of processes (DataLoader workers,
ranks on one machine) and iterators may claim from one directory and never get the same file.
The directory itself splits the work: put no split_by_node / split_by_worker after it (they would
skip claimed shards, and mode="unlink" would delete them unread). Stale claims are recognised by
their process id on this machine: readers on several machines sharing a network directory would
take each other's claims for stale ones. A claim abandoned by an iterator dropped before asking
for its next shard stays until its process ends.

Differences from webdataset 1.0.2, on purpose:
  - The default pattern "*.{tar,tgz,tar.gz}" matches those files: its braces are expanded (as
    the engine expands shard patterns) before glob.glob (the path is taken literally); webdataset
    passes its "*.{tar,tgz,tar.tgz}" to glob.glob, which has no braces, so it never matches.
  - timeout is the time waited for a new shard (reset by every claim), as webdataset documents;
    webdataset measures it from the start of the iteration.
  - Names that are claims or done (._123_, ._done_) are never candidates, even for pattern "*".
  - A process that exists but belongs to another user counts as running (webdataset recycles
    its claims); a claim recycled or a file deleted by someone else meanwhile is skipped, not
    a FileNotFoundError; losing a claim race with poll=None retries instead of sleep(None).
  - An unknown mode or select is a ValueError at construction, a path that is not a directory a
    FileNotFoundError (webdataset asserts); the path need not end in "/".
"""

import glob
import os
import random
import re
import time

from . import _wdscpp
from .shardlists import _Dataset

__all__ = [
    "DirectoryShardList",
    "check_pid_is_running",
    "get_pid_from_filename",
    "without_last_extension",
]

_CLAIMED = re.compile(r"^(.*)\._(\d+)_$")
_CLAIMED_OR_DONE = re.compile(r"\._(\d+|done)_$")
_MODES = ("resample", "unlink", "keep")
_SELECTS = ("random", "oldest")


def check_pid_is_running(pid):
    """Whether process pid exists on this machine (signal 0; another user's counts)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def without_last_extension(fname):
    """fname without its last ".extension"."""
    return re.sub(r"\.[^.]*$", "", fname)


def get_pid_from_filename(fname):
    """The process id of a claimed name NAME._PID_, else None."""
    match = _CLAIMED.match(fname)
    return int(match.group(2)) if match else None


class DirectoryShardList(_Dataset):
    """{"url": name} for the shards claimed one at a time from the directory path (see the
    module). pattern: a glob with braces; poll: seconds between looks at an empty directory,
    None to stop when it is empty; timeout: seconds to wait for a shard before stopping; mode:
    what becomes of a shard after use, "resample", "unlink" or "keep"; select: which candidate
    to claim, "random" or "oldest" (by modification time); fate: unused, as in webdataset."""

    def __init__(
        self,
        path,
        pattern="*.{tar,tgz,tar.gz}",
        poll=1,
        timeout=1e12,
        mode="resample",
        select="random",
        fate=None,
    ):
        super().__init__()
        if not os.path.isdir(path):
            raise FileNotFoundError(f"DirectoryShardList: {path}: not a directory")
        if mode not in _MODES:
            raise ValueError(f"DirectoryShardList: unknown mode {mode!r} (one of {_MODES})")
        if select not in _SELECTS:
            raise ValueError(f"DirectoryShardList: unknown select {select!r} (one of {_SELECTS})")
        self.path = os.path.join(path, "")
        self.pattern = pattern
        self.poll = poll
        self.timeout = timeout
        self.mode = mode
        self.select = select
        self.fate = fate

    def candidates(self):
        """The unclaimed files matching the pattern, sorted."""
        names = set()
        for alternative in _wdscpp._brace_expand(self.pattern):
            names.update(glob.glob(glob.escape(self.path) + alternative))
        return sorted(name for name in names if not _CLAIMED_OR_DONE.search(name))

    def recycle(self, activename):
        """Does with the claimed file activename what mode says; nothing if it is gone."""
        try:
            if self.mode == "unlink":
                os.unlink(activename)
            elif self.mode == "keep":
                os.rename(activename, without_last_extension(activename) + "._done_")
            elif self.mode == "resample":
                os.rename(activename, without_last_extension(activename))
        except FileNotFoundError:
            pass  # deleted by its user, or recycled by another reader's cleanup

    def cleanup_files_without_processes(self):
        """Recycles the claims in the directory whose process is no longer running."""
        for entry in os.scandir(self.path):
            pid = get_pid_from_filename(entry.name)
            if pid is not None and not check_pid_is_running(pid):
                self.recycle(self.path + entry.name)

    def _choose(self, candidates):
        if self.select == "random":
            return random.choice(candidates)
        mtimes = {}
        for name in candidates:
            try:
                mtimes[name] = os.stat(name).st_mtime
            except FileNotFoundError:
                pass  # claimed meanwhile
        return min(mtimes, key=mtimes.get) if mtimes else None

    def __iter__(self):
        last = time.time()
        while time.time() - last < self.timeout:
            candidates = self.candidates()
            candidate = self._choose(candidates) if candidates else None
            if candidate is None:
                if self.poll is None:
                    return
                time.sleep(self.poll)
                continue
            activename = f"{candidate}._{os.getpid()}_"
            try:
                os.rename(candidate, activename)
            except FileNotFoundError:
                continue  # another reader claimed it first: look again
            yield {"url": activename}
            last = time.time()
            self.recycle(activename)
            self.cleanup_files_without_processes()
