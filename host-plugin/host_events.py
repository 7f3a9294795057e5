"""Host facts as they happen, for the sidecar: which prompt runs, what it output, when it ended.

The sidecar attributes output files to the owner of the prompt that ran when they were
written, so it needs each run's start and end with the host's own clock. ComfyUI reports
them through ``PromptServer.send_sync`` (called from the executor thread); this module
wraps that method on the instance, reads the few events it needs, and always calls the
original: the host's own messages are never changed, delayed or dropped.

Guarantees: the time of an event is taken in the thread that reports it, before the host
goes on (a file written after ``execution_start`` has a later ctime than its ``t``); the
sidecar is told from the event loop's thread; while the sidecar is away the decision
client keeps the events (bounded) and sends them after its next hello, together with the
prompt that is running then.

It also reads, at every change of the host's queue (ComfyUI announces each one with a
``status`` message) and when the gate asks after a delete, which prompt ids the host holds:
running, pending, and the diff of every id it knows (queue and history) since the last
report, as ``host_prompts`` events with a sequence number. The sidecar keeps prompt records
exactly as long as the host knows the prompt, and counts each owner's ``queue_remaining``.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger("authsvc")

_END = {"execution_success": "success", "execution_error": "error", "execution_interrupted": "interrupted"}


def _ids(items: Any) -> list[str]:
    return [item[1] for item in items if isinstance(item, (list, tuple)) and len(item) > 1 and isinstance(item[1], str)]


class HostEvents:
    def __init__(self, send_event: Callable[[dict[str, Any]], None]) -> None:
        self._send_event = send_event
        self._lock = threading.Lock()
        self.running: dict[str, float] = {}
        self._queue: Any = None
        self._known: set[str] = set()
        self._seq = 0
        self._scheduled = False
        self._loop_of: Callable[[], Any] = lambda: None
        # status messages of the host by identity -> the report made for them (the frames wait for its counts)
        self._status_seq: dict[int, tuple[Any, int]] = {}

    def install(self, prompt_server: Any) -> None:
        original = getattr(prompt_server, "send_sync", None)
        if not callable(original):
            log.warning("authsvc: this host has no PromptServer.send_sync; outputs cannot be attributed to their owners")
            return
        loop_of = lambda: getattr(prompt_server, "loop", None)  # noqa: E731 - ComfyUI sets .loop at start
        self._loop_of = loop_of
        self._queue = getattr(prompt_server, "prompt_queue", None)

        def send_sync(event: Any, data: Any, sid: Any = None) -> Any:
            try:
                if event == "status":
                    self._status_announced(data)
                message = self._observe(event, data)
                loop = loop_of()
                if message is not None and loop is not None:
                    loop.call_soon_threadsafe(self._send_event, message)
            except Exception:  # observing must never break the host's own messages
                log.exception("authsvc: reading a host event failed")
            return original(event, data, sid)

        prompt_server.send_sync = send_sync

    def _observe(self, event: Any, data: Any) -> dict[str, Any] | None:
        if not isinstance(data, dict):
            return None
        prompt_id = data.get("prompt_id")
        if not isinstance(prompt_id, str):
            return None
        now = time.time()
        if event == "execution_start":
            with self._lock:
                self.running = {prompt_id: now}
            return {"name": "execution_start", "t": now, "data": {"prompt_id": prompt_id}}
        if event == "executed":
            return {"name": "executed", "t": now, "data": {"prompt_id": prompt_id, "output": data.get("output")}}
        if event in _END:
            with self._lock:
                self.running.pop(prompt_id, None)
            return {"name": "execution_end", "t": now, "data": {"prompt_id": prompt_id, "status": _END[event]}}
        return None

    def _read_prompts(self, full: bool) -> dict[str, Any] | None:
        """What the host holds now: running, pending, and the ids it knows that were added or
        went since the last report (all of them when ``full``). None when the host cannot tell.
        Only on the loop's thread, so reports are read one after another, each newer than the last."""
        queue = self._queue
        # the volatile read copies no prompt (ComfyUI's plain one deep-copies every queued graph)
        read = getattr(queue, "get_current_queue_volatile", None) or getattr(queue, "get_current_queue", None)
        history = getattr(queue, "history", None)
        if not callable(read) or not isinstance(history, dict):
            return None
        with self._lock:
            self._scheduled = False  # a status announced from now on needs a later read
            self._seq += 1
            seq = self._seq
        running_items, pending_items = read()
        running, pending = _ids(running_items), _ids(pending_items)
        known = set(list(history))  # list() first: one C call, safe against the worker thread
        known.update(running)
        known.update(pending)
        added = known if full else known - self._known
        gone = set() if full else self._known - known
        self._known = known
        return {"seq": seq, "running": running, "pending": pending, "added": list(added), "gone": list(gone)}

    def _status_announced(self, data: Any) -> None:
        """The host announced a change of its queue (any thread): a read is due, and this status
        message's frames wait for the counts of a read that starts after now."""
        loop = self._loop_of()
        with self._lock:
            self._status_seq[id(data)] = (data, self._seq + 1)
            while len(self._status_seq) > 256:
                del self._status_seq[next(iter(self._status_seq))]
            due = not self._scheduled
            self._scheduled = True
        if due and loop is not None:
            loop.call_soon_threadsafe(self.report_prompts)

    def status_seq(self, data: Any) -> int | None:
        """The report this status message waits for; None for another one (a socket's first)."""
        with self._lock:
            entry = self._status_seq.get(id(data))
        return entry[1] if entry is not None and entry[0] is data else None

    def report_prompts(self) -> None:
        """On the loop's thread: after a queue change, or a delete the gate let through (the history
        may change without a queue event)."""
        try:
            report = self._read_prompts(False)
        except Exception:
            log.exception("authsvc: reading the host's prompts failed")
            return
        if report is not None:
            self._send_event({"name": "host_prompts", "t": time.time(), "data": report})

    def hello_fields(self) -> dict[str, Any]:
        """For the hello after a (re)connect: the run in progress, so its files still find their owner,
        and every prompt the host knows."""
        try:
            prompts = self._read_prompts(True)
        except Exception:
            log.exception("authsvc: reading the host's prompts failed")
            prompts = None
        with self._lock:
            fields: dict[str, Any] = {"running": [{"prompt_id": p, "t": t} for p, t in self.running.items()]}
        if prompts is not None:
            fields["prompts"] = prompts
        return fields
