"""The WebSockets the gate let through, by the tag of their pass decision (``ws_tag``), so the
sidecar can close them later (``close_ws``: the credential behind them ended or changed).

Guarantees:
- a socket is registered as it opens (``on_response_prepare``) and forgotten when its handler
  returns; the sidecar hears ``ws_closed`` for every tagged request, even one whose upgrade never
  happened, so it stops watching the tag;
- a restarted sidecar is told which sockets are open (``hello_fields``), so it still closes them
  when their credential ends;
- ``close_ws`` closes exactly the tagged sockets, with the sidecar's code (4000-4999) and reason;
  a malformed one is logged and ignored.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import aiohttp
from aiohttp import web

from .decision_client import DecisionClient
from .preview_check import PreviewCheck
from .queue_status import QueueStatus

log = logging.getLogger("authsvc")

_WS_TAG_KEY = "authsvc_ws_tag"
_WS_KEY = "authsvc_ws"
_WS_ENTRY_KEY = "authsvc_ws_entry"
_WS_QUEUE_OWNER_KEY = "authsvc_ws_queue_owner"
_WS_PREVIEW_KEY = "authsvc_ws_preview_check"

# Before 3.10.4, aiohttp's close() first wakes the handler, whose return makes aiohttp close the
# socket with 1000 before our code is sent (aio-libs/aiohttp#3448); from 3.10.4 it sends the close
# frame first, as the public close() should.
_CLOSE_WAKES_HANDLER_FIRST = tuple(int(n) for n in re.findall(r"\d+", aiohttp.__version__)[:3]) < (3, 10, 4)


class OpenSockets:
    def __init__(self, client: DecisionClient, queue_status: QueueStatus, previews: PreviewCheck | None = None) -> None:
        self.client = client
        self.queue_status = queue_status
        self.previews = previews
        # open WebSockets by the tag of their pass decision, so the sidecar can close them (close_ws)
        self._sockets: dict[str, set[web.WebSocketResponse]] = {}
        # what the sidecar said about each open socket, handed back to it after a restart
        self._entries: dict[str, dict[str, Any]] = {}
        client.push_handlers["close_ws"] = self.close_tagged

    @staticmethod
    def mark(request: web.Request, decision: dict[str, Any]) -> str | None:
        """Marks the request of a pass with ``ws_tag``, so the socket it opens is registered; its tag."""
        tag = decision.get("ws_tag")
        if not isinstance(tag, str):
            return None
        request[_WS_TAG_KEY] = tag
        entry = decision.get("ws_entry")
        if isinstance(entry, dict):
            request[_WS_ENTRY_KEY] = entry
        queue_owner = decision.get("ws_queue_owner")
        if isinstance(queue_owner, str):
            request[_WS_QUEUE_OWNER_KEY] = queue_owner
        if decision.get("ws_preview_check") is True:
            request[_WS_PREVIEW_KEY] = True
        return tag

    async def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        tag = request.get(_WS_TAG_KEY)
        if isinstance(tag, str) and isinstance(response, web.WebSocketResponse):
            self._sockets.setdefault(tag, set()).add(response)
            request[_WS_KEY] = response
            self.queue_status.socket_opened(response, request.get(_WS_QUEUE_OWNER_KEY))
            if self.previews is not None:
                self.previews.socket_opened(response, request.get(_WS_PREVIEW_KEY) is True)
            entry = request.get(_WS_ENTRY_KEY)
            if isinstance(entry, dict):
                self._entries[tag] = entry

    def handler_returned(self, request: web.Request, tag: str) -> None:
        ws = request.get(_WS_KEY)
        if ws is not None:
            self.queue_status.socket_closed(ws)
            if self.previews is not None:
                self.previews.socket_closed(ws)
        sockets = self._sockets.get(tag)
        if sockets is not None and ws is not None:
            sockets.discard(ws)
            if not sockets:
                del self._sockets[tag]
                self._entries.pop(tag, None)
        # always, even when the upgrade never happened: the sidecar then stops watching the tag
        self.client.send_event({"name": "ws_closed", "t": time.time(), "data": {"tag": tag}})

    def hello_fields(self) -> dict[str, Any]:
        """For the hello after a (re)connect: the open sockets, so a restarted sidecar still
        closes them when their credential ends."""
        return {"sockets": list(self._entries.values())}

    def close_tagged(self, message: dict[str, Any]) -> None:
        """close_ws from the sidecar: the credential behind these sockets ended or changed."""
        tags = message.get("tags")
        code = message.get("code")
        reason = message.get("reason")
        if not isinstance(tags, list) or not isinstance(code, int) or not 4000 <= code <= 4999:
            log.error("authsvc: malformed close_ws message from the sidecar; ignored")
            return
        text = (reason if isinstance(reason, str) else "")[:120].encode("utf-8")
        for tag in tags:
            for ws in list(self._sockets.get(str(tag), ())):
                asyncio.ensure_future(_close_socket(ws, code, text))


async def _close_socket(ws: web.WebSocketResponse, code: int, message: bytes) -> None:
    """Closes with our code on every aiohttp version: where close() wakes the handler first, the
    close frame goes out first through the socket's writer (present, with this signature, in
    3.8-3.10.3; docs/architecture.md, "Host plugin layout")."""
    try:
        if _CLOSE_WAKES_HANDLER_FIRST:
            writer = getattr(ws, "_writer", None)
            if writer is not None and not ws.closed:
                await writer.close(code, message)
        await ws.close(code=code, message=message)
    except (ConnectionError, RuntimeError):
        pass  # the client went away first: the socket is closed either way
