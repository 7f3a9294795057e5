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
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger("authsvc")

_END = {"execution_success": "success", "execution_error": "error", "execution_interrupted": "interrupted"}


class HostEvents:
    def __init__(self, send_event: Callable[[dict[str, Any]], None]) -> None:
        self._send_event = send_event
        self._lock = threading.Lock()
        self.running: dict[str, float] = {}

    def install(self, prompt_server: Any) -> None:
        original = getattr(prompt_server, "send_sync", None)
        if not callable(original):
            log.warning("authsvc: this host has no PromptServer.send_sync; outputs cannot be attributed to their owners")
            return
        loop_of = lambda: getattr(prompt_server, "loop", None)  # noqa: E731 - ComfyUI sets .loop at start

        def send_sync(event: Any, data: Any, sid: Any = None) -> Any:
            try:
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

    def hello_fields(self) -> dict[str, Any]:
        """For the hello after a (re)connect: the run in progress, so its files still find their owner."""
        with self._lock:
            return {"running": [{"prompt_id": p, "t": t} for p, t in self.running.items()]}
