"""Waking a file's owner when the file may have changed: inotify where Linux gives it, a clock where not.

The owner of a configuration file or folder (the models service, the policy service) compares its
stamps (mtime, size, inode) after each wake, as it always did: a wake is a hint, never the truth. So
a watch may wake too often, never too rarely, and an idle process wakes for nothing else.

It watches folders, not files: the folder of each file, so that an editor's write-and-rename and a
Kubernetes ConfigMap's swap of its `..data` symlink are seen too, waking only for those names (a
catalogue in a busy folder is not looked at for every other file written there); and every folder
of a tree, for any name (an agents folder with prompt files in subfolders; folders made later are
added on the next wake).
Where inotify is missing (not Linux, the per-user watch limit reached, a folder that does not exist
yet) the owner looks every `poll_s`, as before; with inotify it still looks every `recheck_s`, for
filesystems that change without telling (NFS and other network mounts).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import struct
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from services.kit.logging import log

# <sys/inotify.h>
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED = 0x4000, 0x8000
_ABOUT_THE_FOLDER = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_Q_OVERFLOW | _IN_IGNORED  # always a wake
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
CONFIGMAP_DATA = "..data"  # the symlink a Kubernetes ConfigMap volume swaps on each update
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)
SETTLE_S = 0.05  # a burst of events (an editor's save, a ConfigMap swap) is one wake
RECHECK_S = 60.0


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch  # noqa: B018 - both exist, or no inotify
    except (OSError, AttributeError):
        return None
    return libc


class FolderWatch:
    """`await watch.wait()` returns when something in the folders changed, or after `recheck_s` (inotify)
    or `poll_s` (no inotify): then look at the files. The first wait that starts inotify returns at once."""

    def __init__(
        self,
        folders: Mapping[Path, frozenset[str] | None],
        *,
        trees: Iterable[Path] = (),
        poll_s: float,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self.folders = dict(folders)  # each folder and the names in it that matter (None: any)
        self.trees = list(dict.fromkeys(Path(t) for t in trees))  # watched with every folder under them
        self._names: dict[int, frozenset[bytes] | None] = {}  # by watch descriptor
        self.poll_s, self.recheck_s = poll_s, recheck_s
        self._fd = -1
        self._libc = _libc()
        self._changed = asyncio.Event()
        self._watching = False  # the reader is on the loop: inotify tells of changes
        self.why_polling = "" if self._libc is not None else "inotify is Linux's"

    @classmethod
    def of_files(
        cls, files: Iterable[Path], *, trees: Iterable[Path] = (), poll_s: float, recheck_s: float = RECHECK_S
    ) -> FolderWatch:
        """A watch over the folders holding `files` (and, for a symlink, the folder of what it points at),
        waking for those files' names (and a ConfigMap's `..data`)."""
        folders: dict[Path, frozenset[str] | None] = {}

        def add(path: Path, *names: str) -> None:
            folders[path.parent] = frozenset(names) | (folders.get(path.parent) or frozenset())

        for file in files:
            add(Path(file).absolute(), Path(file).name, CONFIGMAP_DATA)
            with contextlib.suppress(OSError):
                add(Path(file).resolve(), Path(file).resolve().name)
        return cls(folders, trees=trees, poll_s=poll_s, recheck_s=recheck_s)

    @property
    def notified(self) -> bool:
        """inotify tells this watch of changes (otherwise it wakes on `poll_s`)."""
        return self._watching

    async def wait(self) -> None:
        if not self._watching:
            self._start()
            if self._watching:
                return  # look now: that covers whatever changed before the watch began
            await asyncio.sleep(self.poll_s)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), self.recheck_s)
        if self._changed.is_set():
            await asyncio.sleep(SETTLE_S)  # let the rest of the burst land; its events are read meanwhile
            self._changed.clear()
            self._add_watches()  # folders made since, or a watched folder put back

    def _start(self) -> None:
        if self._libc is None:
            return
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            self._polling(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
            return
        self._fd = fd
        if not self._add_watches():
            os.close(fd)
            self._fd = -1
            return
        asyncio.get_running_loop().add_reader(fd, self._read)
        self._watching = True

    def _add_watches(self) -> bool:
        """Watch every folder (and, recursive, every folder under them); False, and polling, if one can't be."""
        assert self._libc is not None
        for folder, names in self._folders():
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _MASK)
            if wd < 0:
                self._polling(f"{folder}: {os.strerror(ctypes.get_errno())}")
                return False
            had = self._names.get(wd, frozenset())
            wanted = None if names is None else frozenset(os.fsencode(n) for n in names)
            self._names[wd] = None if had is None or wanted is None else had | wanted
        return True

    def _folders(self) -> list[tuple[Path, frozenset[str] | None]]:
        found = list(self.folders.items())
        for root in self.trees:
            found += [(Path(d), None) for d, _, _ in os.walk(root)] if root.is_dir() else [(root, None)]
        return found

    def _matters(self, data: bytes) -> bool:
        """Whether these events touch a name that matters, or the watched folder itself."""
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            names = self._names.get(wd)
            if mask & _ABOUT_THE_FOLDER or wd not in self._names or names is None or name in names:
                return True
        return False

    def _polling(self, why: str) -> None:
        if self._watching:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd, self._watching = -1, False
        self._names.clear()
        if why != self.why_polling:
            log.info("looking at files on a clock, not told of changes", why=why, every_s=self.poll_s)
        self.why_polling = why

    def _read(self) -> None:
        matters = False
        try:
            while data := os.read(self._fd, 64 * 1024):
                matters = matters or self._matters(data)
        except BlockingIOError:
            pass
        except OSError as exc:
            self._polling(f"reading inotify: {exc}")
            matters = True
        if matters:
            self._changed.set()

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd, self._watching = -1, False
