"""Per-owner ``queue_remaining`` in the host's WebSocket ``status`` frames.

ComfyUI sends ``{"type": "status", "data": {"status": {"exec_info": {"queue_remaining": n}}}}``
to a socket when it connects and to every socket whenever its queue changes; ``n`` counts
everyone's prompts, which tells a user whether (and how many of) other users' prompts are
there. The sidecar decides which sockets see only their owner's number (``ws_queue_owner`` on
the /ws pass) and pushes each owner's count after every report of the host's prompts
(``queue_counts``, numbered like the report). This module wraps the host's ``send_json`` on the
instance: a ``status`` frame goes unchanged to sockets that see everything, and with the
owner's count to the others, once the counts of the report made for that very message have
come (at most WAIT_S; then the newest counts, never the host's number). A socket the gate
does not know gets 0.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

log = logging.getLogger("authsvc")

WAIT_S = 0.5

# an owner key, or None for a socket that sees the host's own number
_SEES_ALL = None


class QueueStatus:
    def __init__(self) -> None:
        # every open socket the gate let through (forgotten when its handler returns)
        self._owners: dict[Any, str | None] = {}
        self._scoped = 0
        self._seq = 0
        self._counts: dict[str, int] = {}
        self._changed: asyncio.Event | None = None

    def socket_opened(self, ws: Any, owner: str | None) -> None:
        self._owners[ws] = owner
        if owner is not None:
            self._scoped += 1

    def socket_closed(self, ws: Any) -> None:
        if self._owners.pop(ws, _SEES_ALL) is not None:
            self._scoped -= 1

    def pushed(self, message: dict[str, Any]) -> None:
        """queue_counts from the sidecar."""
        seq, counts = message.get("seq"), message.get("counts")
        if not isinstance(seq, int) or not isinstance(counts, dict):
            log.error("authsvc: malformed queue_counts message from the sidecar; ignored")
            return
        self._seq = max(self._seq, seq)
        self._counts = {str(k): v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _counts_for(self, seq: int | None) -> dict[str, int]:
        if seq is None or self._seq >= seq:
            return self._counts
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while self._seq < seq:
            left = deadline - loop.time()
            if left <= 0:
                break
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                break
        return self._counts

    def install(self, prompt_server: Any, seq_of: Callable[[Any], int | None]) -> None:
        original = getattr(prompt_server, "send_json", None)
        if not callable(original):
            log.warning("authsvc: this host has no PromptServer.send_json; queue_remaining is not scoped on WebSockets")
            return

        async def send_json(event: Any, data: Any, sid: Any = None) -> Any:
            if event != "status" or self._scoped <= 0:
                return await original(event, data, sid)
            counts = await self._counts_for(seq_of(data))
            sockets = getattr(prompt_server, "sockets", {})
            targets = [sid] if sid is not None else list(sockets)
            for target in targets:
                ws = sockets.get(target)
                if ws is None:
                    continue
                owner = self._owners.get(ws, "")  # "": a socket the gate does not know, counted as nobody's
                if owner is _SEES_ALL:
                    await original(event, data, target)
                else:
                    edited = _with_remaining(data, counts.get(owner, 0))
                    if edited is not None:  # a status of another shape is not sent to a scoped socket
                        await original(event, edited, target)
            return None

        prompt_server.send_json = send_json


def _with_remaining(data: Any, remaining: int) -> Any:
    """The status data with exec_info.queue_remaining replaced (a copy: other sockets get the host's);
    None when it has another shape."""
    status = data.get("status") if isinstance(data, dict) else None
    exec_info = status.get("exec_info") if isinstance(status, dict) else None
    if not isinstance(exec_info, dict) or "queue_remaining" not in exec_info:
        return None
    return {**data, "status": {**status, "exec_info": {**exec_info, "queue_remaining": remaining}}}
