"""Preview frames of an sfw_check user's running prompts wait for the sidecar's word (issue 23).

ComfyUI sends a running prompt's preview images as binary WebSocket frames
(``PromptServer.send_bytes`` with ``PREVIEW_IMAGE`` = 1 or ``PREVIEW_IMAGE_WITH_METADATA`` = 4)
to the socket of the prompt's client. The sidecar marks the sockets whose previews must be
checked (``ws_preview_check`` on the /ws pass: its principal has ``sfw_check``). This module wraps
``send_bytes`` on the instance:

- a frame for any other socket is sent at once, unchanged: nobody else waits;
- a frame for a checked socket is not awaited in the host's message loop (which sends every
  socket's messages in turn): a task asks the sidecar (``preview`` with the image as payload) and
  sends the frame only when it answers ``allow: true``. Any other outcome (NSFW, a timeout, the
  sidecar away, a malformed answer) withholds it: fail safe;
- per socket at most one check runs and one frame waits; a newer frame replaces the waiting one
  (previews are a moving picture: the newest is the one worth showing).
"""
from __future__ import annotations

import asyncio
import logging
import struct
from typing import Any

from .decision_client import DecisionClient

log = logging.getLogger("authsvc")

PREVIEW_IMAGE = 1
PREVIEW_IMAGE_WITH_METADATA = 4
_PREVIEWS = (PREVIEW_IMAGE, PREVIEW_IMAGE_WITH_METADATA)


def image_of(event: int, data: Any) -> bytes | None:
    """The image bytes of a preview frame's data (after ComfyUI's own header); None for another shape."""
    raw = bytes(data)
    if len(raw) < 4:
        return None
    if event == PREVIEW_IMAGE:
        return raw[4:]  # u32 image type (1 JPEG, 2 PNG), then the image
    (length,) = struct.unpack(">I", raw[:4])  # u32 length of the metadata JSON, the JSON, then the image
    return raw[4 + length:] if 4 + length <= len(raw) else None


class _Slot:
    __slots__ = ("running", "waiting")

    def __init__(self) -> None:
        self.running = False
        self.waiting: tuple[int, Any, Any] | None = None


class PreviewCheck:
    def __init__(self, client: DecisionClient) -> None:
        self.client = client
        self._checked: dict[Any, _Slot] = {}
        # how many frames were withheld and sent after a check (tests, logs)
        self.withheld = 0
        self.allowed = 0

    def socket_opened(self, ws: Any, check: bool) -> None:
        if check:
            self._checked[ws] = _Slot()

    def socket_closed(self, ws: Any) -> None:
        self._checked.pop(ws, None)

    def install(self, prompt_server: Any) -> None:
        original = getattr(prompt_server, "send_bytes", None)
        if not callable(original):
            log.warning("authsvc: this host has no PromptServer.send_bytes; previews are not checked")
            return

        async def send_bytes(event: Any, data: Any, sid: Any = None) -> Any:
            if event not in _PREVIEWS or not self._checked:
                return await original(event, data, sid)
            sockets = getattr(prompt_server, "sockets", {})
            targets = list(sockets) if sid is None else [sid]
            for target in targets:
                ws = sockets.get(target)
                slot = self._checked.get(ws) if ws is not None else None
                if slot is None:
                    await original(event, data, target)
                else:
                    self._offer(slot, ws, (event, data, target), original)
            return None

        prompt_server.send_bytes = send_bytes

    def _offer(self, slot: _Slot, ws: Any, frame: tuple[int, Any, Any], send: Any) -> None:
        if slot.running:
            slot.waiting = frame  # the newest waits; an older waiting one is dropped
            return
        slot.running = True
        asyncio.ensure_future(self._check(slot, ws, frame, send))

    async def _check(self, slot: _Slot, ws: Any, frame: tuple[int, Any, Any] | None, send: Any) -> None:
        try:
            while frame is not None:
                event, data, target = frame
                if await self._allowed(event, data) and self._checked.get(ws) is slot:
                    self.allowed += 1
                    await send(event, data, target)
                else:
                    self.withheld += 1
                frame, slot.waiting = slot.waiting, None
        except Exception:
            log.exception("authsvc: sending a checked preview failed")
        finally:
            slot.running = False

    async def _allowed(self, event: int, data: Any) -> bool:
        image = image_of(event, data)
        if not image:
            return False
        try:
            answer = await self.client.call({"type": "preview"}, image)
        except Exception:  # the sidecar away or slow: withheld
            return False
        return isinstance(answer, dict) and answer.get("allow") is True
