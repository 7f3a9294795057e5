"""Kept decisions: pass decisions the sidecar allowed the plugin to repeat, for the very same
request description, for a short time (docs/architecture.md, "Kept decisions").

Guarantees:
- only a pass with a valid ``cache`` field is kept, and none that needs the sidecar again for the
  same request (a body, a form, a WebSocket tag, a filter without a memo);
- an answer decided before a change the plugin has already heard of (its epoch is older than the
  newest ``forget``) is never kept; ``forget`` drops every kept decision at once;
- a kept decision answers only an equal description (the whole tuple of its fields), and only
  until its time (``ms``, at most 5 s) runs out;
- bounded: at most ``_KEPT_MAX`` descriptions holding ``_KEPT_SIZE_MAX`` characters together, none
  longer than ``_KEPT_DESCRIPTION_MAX``; the least recently kept goes first.

What the connection must add (decision_client.py): what the sidecar has sent is read before a kept
decision is used, and a lost connection drops them all.
"""
from __future__ import annotations

import time
from typing import Any, Callable

# Read at each use, so a test may lower them.
_KEPT_MAX = 4096
_KEPT_DESCRIPTION_MAX = 16 * 1024
_KEPT_SIZE_MAX = 8 * 1024 * 1024
_KEPT_MS_MAX = 5000
# what a decision kept for reuse may not carry: each needs the sidecar again for the same request
_NOT_REUSABLE = ("need_body", "need_form", "ws_tag", "ws_entry", "body_replaced")


class KeptDecisions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # answer, the time it ends, the characters of its description
        self._entries: dict[tuple[Any, ...], tuple[dict[str, Any], float, int]] = {}
        self._size = 0  # characters of the descriptions held
        self.epoch = 0  # the newest access epoch heard of (hello, forget)

    def holds(self, fields: tuple[Any, ...], size: int) -> bool:
        """Whether a decision is kept for this description (perhaps one whose time ran out)."""
        return size <= _KEPT_DESCRIPTION_MAX and fields in self._entries

    def fresh(self, fields: tuple[Any, ...]) -> dict[str, Any] | None:
        """The kept decision for this description while its time lasts; None otherwise."""
        entry = self._entries.get(fields)
        return entry[0] if entry is not None and entry[1] > self._clock() else None

    def keep(self, fields: tuple[Any, ...], size: int, answer: dict[str, Any]) -> None:
        """Keeps the sidecar's answer for this description when its ``cache`` field allows."""
        cache = answer.get("cache")
        if size > _KEPT_DESCRIPTION_MAX or answer.get("action") != "pass" or not isinstance(cache, dict):
            return
        ms, epoch = cache.get("ms"), cache.get("epoch")
        if not (isinstance(ms, int) and 0 < ms <= _KEPT_MS_MAX and isinstance(epoch, int)):
            return
        # decided before a change we have already been told about: not for reuse
        if epoch != self.epoch or any(k in answer for k in _NOT_REUSABLE):
            return
        # a filter is reused only with a memo: the memo names everything its result depends on
        # besides the host's answer, and every change of that moves the epoch (a forget)
        spec = answer.get("filter")
        if spec is not None and not (isinstance(spec, dict) and isinstance(spec.get("memo"), str)):
            return
        self.drop(fields)
        while self._entries and (len(self._entries) >= _KEPT_MAX or self._size + size > _KEPT_SIZE_MAX):
            self.drop(next(iter(self._entries)))
        self._entries[fields] = (answer, self._clock() + ms / 1000, size)
        self._size += size

    def drop(self, fields: tuple[Any, ...]) -> None:
        entry = self._entries.pop(fields, None)
        if entry is not None:
            self._size -= entry[2]

    def forget(self, epoch: Any = None) -> None:
        """Something decisions read changed (``forget``), or a new connection began (its hello
        names the sidecar's epoch): nothing kept is used again."""
        if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > self.epoch:
            self.epoch = epoch
        self._entries.clear()
        self._size = 0
