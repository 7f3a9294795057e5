"""File watch: the kernel tells the loop when a path a kept /view decision was made on may name other bytes.

A kept decision made on a file (``cache.file``, kept_decisions.py) is reused only while its path
names that very file, unchanged. Checking that with a ``stat`` on every turn of the loop costs the
host's loop thread a system call that hands the GIL to the host's file threads and back: measured
in the real ComfyUI under load, 15-50 µs of the loop thread's CPU for each /view, about half of
all the gate costs there (docs/decisions.md). With Linux's inotify (through ``ctypes``, stdlib
only) the kernel reports each change instead, and a reuse costs no system call.

Guarantees:
- ``watch(path)`` returns the paths whose change can change what ``path`` names, only once every
  one of them is watched: every folder on the way to ``path`` as spelled (a link in it retargeted
  is an entry of its folder changing), every folder on the way to its real path, and the file
  itself (written through another hard link). None when that cannot be done (no inotify, no
  running loop, the watch limit, or one of them on a filesystem another machine or a daemon can
  change unheard: NFS, SMB, FUSE, 9p...): the caller checks the file the old way;
- each event names the path it is about (a folder's entry, or a watched path itself), and
  ``on_change`` is called with it; an overflowed queue or a lost watch calls ``on_change(None)``:
  anything may have changed;
- the events are read by a reader on the host's own loop. The kernel queues an event inside the
  system call that makes the change, so a request sent after a change finds the event ready in
  the same poll of the loop that reads the request's bytes; the reader runs in that turn, and
  the request's handler runs in a later one (aiohttp hands a parsed request to its connection's
  task; where it starts handlers eagerly, Python 3.12+, the gate yields once first:
  decision_client.py). A change made before a request was sent is therefore heard before that
  request is decided, as with the stat it replaces;
- each path is watched while a caller holds it (``watch`` takes it, ``release`` gives it back)
  and no longer: the watches are the user's, shared with the sidecar's own folder watching;
- bounded: at most ``_WATCHES_MAX`` watches; past it ``watch`` says None (the caller checks the
  file the old way) and watches nothing more for it.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import re
import struct
import sys
import time
from typing import Callable, Optional

log = logging.getLogger("authsvc")

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_UNMOUNT = 0x2000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
# a folder: an entry made, removed or moved, or the folder itself gone or moved (what is written
# inside its files is heard on the file's own watch, so a busy output folder wakes nothing)
_FOLDER_MASK = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR
# the file itself: its bytes, mode or links, through any name
_FILE_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_DELETE_SELF | _IN_MOVE_SELF
# the watched path itself is gone, moved or no longer watched
_SELF = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT | _IN_IGNORED
# an entry of a watched folder now names another file or folder, or none
_RENAMED = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

# Filesystems whose changes all pass through this kernel, so inotify hears them. On the others
# (NFS, SMB, FUSE, 9p, virtiofs, Ceph...) another machine or a daemon can change a file unheard:
# a path on one of them is checked the old way.
_LOCAL_FILESYSTEMS = frozenset((
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "zfs", "overlay", "bcachefs",
    "jfs", "reiserfs", "vfat", "exfat", "ntfs3", "hfsplus",
))
_MOUNTS_FILE = "/proc/self/mountinfo"
_MOUNTS_FOR = 1.0  # seconds a reading of the mount table is used
_RETRY_AFTER = 60.0  # seconds before inotify_init1 is tried again after it failed

# Read at each use, so a test may lower it. Kernels before 5.11 allow a user 8192 watches in all.
_WATCHES_MAX = 2048


def _libc() -> Optional[ctypes.CDLL]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def dependencies(path: str) -> tuple[tuple[str, ...], frozenset[str]] | None:
    """The paths whose change can change what ``path`` names: itself and every folder above it, as
    spelled and as its real path; and which of them are the file itself (the two spellings). That
    is every entry the kernel passes on the way only when the way is simple: no ``..`` in the path
    or in a link's target, and at most one symbolic link on the way, whose target has none on its
    own way (a chain of links, or ``..`` after a link, walks entries neither spelling shows). None
    for any other path: it is checked the old way."""
    spelled = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    if ".." in spelled.split(os.sep):
        return None
    links = 0
    prefix = os.sep
    for part in [p for p in spelled.split(os.sep) if p and p != "."]:
        prefix = os.path.join(prefix, part)
        if not os.path.islink(prefix):
            continue
        links += 1
        target = os.readlink(prefix)
        if links > 1 or ".." in target.split(os.sep):
            return None
        target = target if os.path.isabs(target) else os.path.join(os.path.dirname(prefix), target)
        way = os.sep
        for step in [p for p in target.split(os.sep) if p and p != "."]:
            way = os.path.join(way, step)
            if os.path.islink(way):
                return None
    files = (os.path.normpath(spelled), os.path.realpath(spelled))
    out: dict[str, None] = {}
    for current in files:
        while True:
            out[current] = None
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return tuple(out), frozenset(files)


def _mount_table() -> tuple[tuple[str, str], ...]:
    """(mount point, filesystem type) of every mount this process sees, the longest points first."""
    out = []
    with open(_MOUNTS_FILE, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            head, sep, tail = line.partition(" - ")
            fields = head.split()
            if not sep or len(fields) < 5 or not tail.split():
                continue
            # octal escapes for space, tab, newline and backslash
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            out.append((point, tail.split()[0]))
    out.reverse()  # of mounts on one point the last is the one seen: first among equals once sorted
    out.sort(key=lambda m: len(m[0]), reverse=True)
    return tuple(out)


def _filesystem(path: str, mounts: tuple[tuple[str, str], ...]) -> str:
    for point, kind in mounts:
        if path == point or path.startswith(point if point.endswith("/") else point + "/"):
            return kind
    return ""


class FileWatch:
    def __init__(self, on_change: Callable[[Optional[str]], None]) -> None:
        self._on_change = on_change
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._by_path: dict[str, int] = {}  # watched path → its watch
        self._paths: dict[int, set[str]] = {}  # watch → the paths it was added for (a link and its target share one)
        self._refs: dict[str, int] = {}  # path → how many holders
        self._mounts: tuple[float, tuple[tuple[str, str], ...]] = (float("-inf"), ())
        self._retry_at = float("-inf")  # after a failed inotify_init1 (the user's instances used up)

    @property
    def available(self) -> bool:
        return _LIBC is not None

    def watch(self, path: str) -> tuple[str, ...] | None:
        """Watches what ``path`` depends on; those paths, or None when they cannot all be watched."""
        if _LIBC is None:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None  # nothing would read the events
        try:
            way = dependencies(path)
        except (OSError, ValueError):
            return None
        if way is None or not self._local(way[0]):
            return None
        deps, files = way
        if loop is not self._loop or self._fd < 0:
            if self._fd >= 0:
                self._restart()  # another loop (a test's): what was kept on the old one's watches ends
            self._start(loop)
            if self._fd < 0:
                return None
        added: list[str] = []
        # from the root down: each folder is added while the one above it is watched already, so a
        # folder swapped while the watches go on is heard (a hard link of the same file in the new
        # tree would pass the stamp)
        for dep in sorted(deps, key=lambda d: d.count(os.sep)):
            if dep in self._by_path:
                continue
            wd = -1
            if len(self._by_path) < _WATCHES_MAX:
                wd = _LIBC.inotify_add_watch(self._fd, os.fsencode(dep), _FILE_MASK if dep in files else _FOLDER_MASK)
            if wd < 0:
                # the bound, or gone meanwhile, no permission, the kernel's limit: checked the old way
                self._drop_watches(added)
                return None
            self._by_path[dep] = wd
            self._paths.setdefault(wd, set()).add(dep)
            added.append(dep)
        try:
            # the way walked again now that all of it is watched: a link retargeted before the
            # watch above it was on leaves other folders on the way than those watched
            again = dependencies(path)
        except (OSError, ValueError):
            again = None
        if again != way:
            self._drop_watches([d for d in added if d not in self._refs])
            return None
        for dep in deps:
            self._refs[dep] = self._refs.get(dep, 0) + 1
        return deps

    def _local(self, paths: tuple[str, ...]) -> bool:
        """Whether every one of these paths is on a filesystem inotify hears all changes of."""
        read_at, mounts = self._mounts
        now = time.monotonic()
        if now - read_at >= _MOUNTS_FOR:
            try:
                mounts = _mount_table()
            except OSError:
                mounts = ()
            self._mounts = (now, mounts)
        return all(_filesystem(p, mounts) in _LOCAL_FILESYSTEMS for p in paths)

    def release(self, deps: tuple[str, ...]) -> None:
        """What ``watch`` gave is no longer needed: each path no one else holds is watched no more."""
        unheld = []
        for dep in deps:
            refs = self._refs.get(dep, 0) - 1
            if refs > 0:
                self._refs[dep] = refs
            else:
                self._refs.pop(dep, None)
                unheld.append(dep)
        self._drop_watches(unheld)

    def _drop_watches(self, paths: list[str]) -> None:
        for path in paths:
            wd = self._by_path.pop(path, None)
            if wd is None:
                continue
            others = self._paths.get(wd)
            if others is not None:
                others.discard(path)
                if not others:
                    del self._paths[wd]
                    if _LIBC is not None and self._fd >= 0:
                        _LIBC.inotify_rm_watch(self._fd, wd)  # an IN_IGNORED follows, about no path

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.close()
        assert _LIBC is not None
        if time.monotonic() < self._retry_at:
            return
        fd = _LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            if self._retry_at == float("-inf"):
                log.warning("authsvc: inotify is not available (errno %d); kept /view decisions check their file each time", ctypes.get_errno())
            self._retry_at = time.monotonic() + _RETRY_AFTER
            return
        try:
            loop.add_reader(fd, self._read)
        except Exception:
            os.close(fd)
            return
        self._fd, self._loop = fd, loop

    def _restart(self) -> None:
        loop = self._loop
        self._stop()
        self._on_change(None)
        if loop is not None and not loop.is_closed():
            self._start(loop)

    def close(self) -> None:
        """Stops watching; what was kept on the watches ends (nothing would tell it of a change)."""
        had = self._fd >= 0
        self._stop()
        if had:
            self._on_change(None)

    def _stop(self) -> None:
        if self._fd >= 0:
            try:
                if self._loop is not None and not self._loop.is_closed():
                    self._loop.remove_reader(self._fd)
            finally:
                os.close(self._fd)
        self._fd, self._loop = -1, None
        self._by_path.clear()
        self._paths.clear()
        self._refs.clear()

    def _read(self) -> None:
        """The loop's reader: every queued event, each turned into the path it is about."""
        changed: set[Optional[str]] = set()
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                break
            except OSError:
                self._restart()
                return
            if not data:
                break
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    changed.add(None)
                    continue
                paths = tuple(self._paths.get(wd, ()))
                if name:
                    targets = tuple(os.path.join(p, os.fsdecode(name)) for p in paths)
                    if mask & _RENAMED:
                        self._unwatch(targets)  # those paths now name another file or folder, or none
                else:
                    targets = paths
                if mask & _SELF:
                    self._unwatch(paths)  # the watched path itself is gone or moved: so is what is below it
                changed.update(targets)
        if None in changed:
            self._restart()
            return
        try:
            for path in changed:
                self._on_change(path)
        except Exception:
            log.exception("authsvc: a change heard on a watch could not be applied; every watched decision ends")
            self._restart()

    def _unwatch(self, paths: tuple[str, ...]) -> None:
        """Forgets the watches of these paths and of everything below them (they name something else now)."""
        if not paths:
            return
        paths = tuple(p for p in paths if p in self._by_path)
        if not paths:
            return  # every watched path has each folder above it watched: nothing below is either
        prefixes = tuple(p.rstrip(os.sep) + os.sep for p in paths)
        self._drop_watches([w for w in self._by_path if w in paths or w.startswith(prefixes)])
