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

_HEADER = struct.Struct(">II")  # total length, then the length of the JSON part
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
encode_json = _dumps


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame or message."""


def encode_frame(message: dict[str, Any], payload: bytes = b"") -> bytes:
    """One frame: the message as JSON, then ``payload`` as raw bytes (bodies never travel as JSON strings)."""
    head = _dumps(message).encode("utf-8", "surrogatepass")
    total = 4 + len(head) + len(payload)
    if total > MAX_FRAME_BYTES:
        raise ProtocolError("frame too large")
    return _HEADER.pack(total, len(head)) + head + payload


class FrameDecoder:
    """Incremental decoder: feed bytes, get complete (message, payload) pairs."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[dict[str, Any], bytes]]:
        buf = self._buf
        buf += data
        out: list[tuple[dict[str, Any], bytes]] = []
        while len(buf) >= 8:
            total, head_length = _HEADER.unpack_from(buf, 0)
            if total > MAX_FRAME_BYTES or head_length > total - 4:
                raise ProtocolError("frame too large or malformed")
            end = 4 + total
            if len(buf) < end:
                break
            try:
                message = json.loads(bytes(buf[8:8 + head_length]))
            except ValueError as exc:
                raise ProtocolError("frame is not JSON") from exc
            payload = bytes(buf[8 + head_length:end])
            del buf[:end]
            if not isinstance(message, dict):
                raise ProtocolError("message is not an object")
            out.append((message, payload))
        return out
