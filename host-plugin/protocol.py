"""The decision protocol, plugin side: framing and the request description.

Invariant: the version and the header list come from ``shared/protocol.json``,
the one file both the plugin and the sidecar read, so the two sides cannot
drift apart silently; a mismatch is detected at the hello exchange.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any

_SPEC_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shared", "protocol.json")

with open(_SPEC_PATH, "r", encoding="utf-8") as _f:
    _SPEC = json.load(_f)

PROTOCOL_VERSION: int = int(_SPEC["version"])
MAX_FRAME_BYTES: int = int(_SPEC["max_frame_bytes"])
REQUEST_HEADERS: tuple[str, ...] = tuple(_SPEC["request_headers"])

_HEADER = struct.Struct(">I")
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame or message."""


def encode_frame(message: dict[str, Any]) -> bytes:
    payload = _dumps(message).encode("utf-8", "surrogatepass")
    if len(payload) > MAX_FRAME_BYTES:
        raise ProtocolError("frame too large")
    return _HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Incremental decoder: feed bytes, get complete messages."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        buf = self._buf
        buf += data
        out: list[dict[str, Any]] = []
        while len(buf) >= 4:
            (length,) = _HEADER.unpack_from(buf, 0)
            if length > MAX_FRAME_BYTES:
                raise ProtocolError("frame too large")
            end = 4 + length
            if len(buf) < end:
                break
            try:
                message = json.loads(bytes(buf[4:end]))
            except ValueError as exc:
                raise ProtocolError("frame is not JSON") from exc
            del buf[:end]
            if not isinstance(message, dict):
                raise ProtocolError("message is not an object")
            out.append(message)
        return out
