"""Kept decisions: pass decisions the sidecar allowed the plugin to repeat, for the very same
request description, for a short time (docs/architecture.md, "Kept decisions").

Guarantees:
- only a pass with a valid ``cache`` field is kept, and none that needs the sidecar again for the
  same request (a body, a form, a WebSocket tag, a filter without a memo);
- an answer decided before a change the plugin has already heard of (its epoch is older than the
  newest ``forget``) is never kept; ``forget`` drops every kept decision at once;
- a kept decision answers only an equal description (the whole tuple of its fields), and only
  until its time (``ms``, at most 5 s) runs out; in its last quarter it is ``due``: the client asks
  the sidecar again in the background, and that answer replaces it or ends it;
- a decision made on a file (``cache.file``: ``GET /view``, decided on the file the host will
  open) answers only while that path still names the very same file in the same state
  (``file_stamp``: device, inode, size, mtime, ctime). Where the kernel can watch it (Linux's
  inotify, file_watch.py), the file and every folder on the way to it are watched before its
  stamp is read once, when the decision is kept; a change to any of them ends the decision as the
  loop hears it, before any request sent after the change is decided, and a reuse costs no
  system call. Elsewhere, at most one ``stat`` of a path per turn of the loop, taken after every
  request decided with it was read. Any failure to read the file is no reuse;
- bounded: at most ``_KEPT_MAX`` descriptions holding ``_KEPT_SIZE_MAX`` characters together, none
  longer than ``_KEPT_DESCRIPTION_MAX``; the least recently kept goes first.

What the connection must add (decision_client.py): what the sidecar has sent is read before a kept
decision is used, and a lost connection drops them all.
"""
from __future__ import annotations

import asyncio
import os
import time
import heapq
from typing import Any, Callable

from .file_watch import FileWatch
from .host_paths import file_stamp

# Read at each use, so a test may lower them.
_KEPT_MAX = 4096
_KEPT_DESCRIPTION_MAX = 16 * 1024
_KEPT_SIZE_MAX = 8 * 1024 * 1024
_KEPT_MS_MAX = 5000
# the share of a kept decision's time after which a request that reuses it has the sidecar asked
# again in the background (the last quarter: a round trip on a loaded machine is a few ms)
_RENEW_AFTER = 0.75
# what a decision kept for reuse may not carry: each needs the sidecar again for the same request
_NOT_REUSABLE = ("need_body", "need_form", "ws_tag", "ws_entry", "body_replaced")


def _file_condition(cache: dict[str, Any]) -> tuple[str, str] | None | bool:
    """``cache.file`` as (path, stamp); None when there is none; False when it is malformed."""
    spec = cache.get("file")
    if spec is None:
        return None
    if isinstance(spec, dict) and isinstance(spec.get("path"), str) and isinstance(spec.get("stamp"), str):
        return spec["path"], spec["stamp"]
    return False


class KeptDecisions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # answer, the time it ends, the characters of its description, the file it was decided on,
        # the time from which it is asked again in the background, and the watched paths that file
        # depends on (None: not watched, its stamp is read at each use)
        self._entries: dict[tuple[Any, ...], tuple[dict[str, Any], float, int, tuple[str, str] | None, float, tuple[str, ...] | None]] = {}
        # the kept decisions on a watched file, by each path a change of which ends them
        self._by_dependency: dict[str, set[tuple[Any, ...]]] = {}
        self._watch = FileWatch(self._changed)
        # the decisions kept on a watch, by the time they end (a heap; the number breaks ties)
        self._watched_order: list[tuple[float, int, tuple[Any, ...], dict[str, Any]]] = []
        self._seq = 0
        self._size = 0  # characters of the descriptions held
        # file stamps read in this turn of the loop, by path (_stamp_now)
        self._stamps: dict[str, str] = {}
        self.epoch = 0  # the newest access epoch heard of (hello, forget)

    def lookup(self, fields: tuple[Any, ...], size: int) -> tuple[dict[str, Any] | None, bool] | None:
        """One look for a request: None when nothing is kept for this description; else the kept
        decision while it may be used (None once its time ran out or, unwatched, its file no longer
        has the stamp it was decided on: the caller drops it) and whether it is due, in the last
        part of its time, when the sidecar is asked again in the background (decision_client.py)
        so that the requests after its end do not all wait for a new one."""
        if size > _KEPT_DESCRIPTION_MAX:
            return None
        entry = self._entries.get(fields)
        if entry is None:
            return None
        now = self._clock()
        if entry[1] <= now:
            return None, False
        condition = entry[3]
        if condition is not None and entry[5] is None and self._stamp_now(condition[0]) != condition[1]:
            return None, False
        return entry[0], entry[4] <= now

    def _stamp_now(self, path: str) -> str:
        """The stamp of the file at ``path`` now; "" (no stamp) when it cannot be read.

        Within one turn of the running loop, one ``stat`` per path: a callback that runs before
        the memo's clear was queued no later than the turn the stat was taken in, so the request
        it serves was read by that turn's poll or an earlier one, before the stat. A change made
        before such a request was sent is therefore in the stat it gets (the same as a stat of
        its own); each stat is a system call that hands the GIL to the host's file threads, and
        several /view of one file are often decided in the same turn. Without a running loop,
        every call stats."""
        stamps = self._stamps
        stamp = stamps.get(path)
        if stamp is not None:
            return stamp
        stamp = self._stamp_of(path)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return stamp
        if not stamps:
            loop.call_soon(stamps.clear)
        stamps[path] = stamp
        return stamp

    @staticmethod
    def _stamp_of(path: str) -> str:
        """The stamp of the file at ``path`` now; "" (no stamp) when it cannot be read."""
        try:
            return file_stamp(os.stat(path))
        except (OSError, ValueError):
            return ""

    def keep(self, fields: tuple[Any, ...], size: int, answer: dict[str, Any]) -> bool:
        """Keeps the sidecar's answer for this description when its ``cache`` field allows; whether it did."""
        cache = answer.get("cache")
        if size > _KEPT_DESCRIPTION_MAX or answer.get("action") != "pass" or not isinstance(cache, dict):
            return False
        ms, epoch = cache.get("ms"), cache.get("epoch")
        if not (isinstance(ms, int) and 0 < ms <= _KEPT_MS_MAX and isinstance(epoch, int)):
            return False
        condition = _file_condition(cache)
        if condition is False:
            return False
        # decided before a change we have already been told about: not for reuse
        if epoch != self.epoch or any(k in answer for k in _NOT_REUSABLE):
            return False
        # a filter is reused only with a memo: the memo names everything its result depends on
        # besides the host's answer, and every change of that moves the epoch (a forget)
        spec = answer.get("filter")
        if spec is not None and not (isinstance(spec, dict) and isinstance(spec.get("memo"), str)):
            return False
        watched = None
        now = self._clock()
        if condition:
            # a watch is held while its decision is: those past their time go first
            order = self._watched_order
            while order and order[0][0] <= now:
                _, _, old, old_answer = heapq.heappop(order)
                self.drop(old, only=old_answer)
            # watched first, then read once: a change after the read is heard; one before it, seen
            watched = self._watch.watch(condition[0])
        # after the watch: the answer it replaces lets go of its own, so a renewal keeps the watches on
        self.drop(fields)
        if watched is not None and self._stamp_of(condition[0]) != condition[1]:
            self._watch.release(watched)
            return False  # the file changed since the sidecar decided on it
        while self._entries and (len(self._entries) >= _KEPT_MAX or self._size + size > _KEPT_SIZE_MAX):
            self.drop(next(iter(self._entries)))
        self._entries[fields] = (answer, now + ms / 1000, size, condition or None, now + ms * _RENEW_AFTER / 1000, watched)
        self._size += size
        if watched is not None:
            for path in watched:
                self._by_dependency.setdefault(path, set()).add(fields)
            self._seq += 1
            heapq.heappush(self._watched_order, (now + ms / 1000, self._seq, fields, answer))
        return True

    def _changed(self, path: str | None) -> None:
        """The watch heard a change to ``path`` (None: to anything): the decisions on a file that
        depends on it end."""
        if path is None:
            for fields in [f for f, entry in self._entries.items() if entry[5] is not None]:
                self.drop(fields)
            return
        for fields in list(self._by_dependency.get(path, ())):
            self.drop(fields)

    def drop(self, fields: tuple[Any, ...], only: dict[str, Any] | None = None) -> None:
        """Drops the kept decision for this description; with ``only``, only while that answer is
        the one kept (a renewal that failed must not end a newer answer kept meanwhile)."""
        entry = self._entries.get(fields)
        if entry is not None and (only is None or entry[0] is only):
            del self._entries[fields]
            self._size -= entry[2]
            if entry[5] is not None:
                for path in entry[5]:
                    held = self._by_dependency.get(path)
                    if held is not None:
                        held.discard(fields)
                        if not held:
                            del self._by_dependency[path]
                self._watch.release(entry[5])

    def forget(self, epoch: Any = None) -> None:
        """Something decisions read changed (``forget``), or a new connection began (its hello
        names the sidecar's epoch): nothing kept is used again."""
        if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > self.epoch:
            self.epoch = epoch
        for entry in self._entries.values():
            if entry[5] is not None:
                self._watch.release(entry[5])
        self._entries.clear()
        self._by_dependency.clear()
        self._watched_order.clear()
        self._size = 0
