"""Client for the sidecar's decision socket.

Guarantees:
- one connection, many requests in flight (answers matched by id);
- every call ends within ``timeout`` seconds: with an answer, or with
  ``Unavailable`` (timeout, connection lost, garbage, version mismatch);
- nothing here ever lets a request through: callers turn ``Unavailable``
  into a 503 (fail closed).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Callable

from .protocol import PROTOCOL_VERSION, FrameDecoder, ProtocolError, encode_frame

log = logging.getLogger("authsvc")


class Unavailable(Exception):
    """No usable answer from the sidecar; the caller must refuse the request."""


class _DecisionProtocol(asyncio.Protocol):
    def __init__(self, on_lost: Callable[["_DecisionProtocol"], None]) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, tuple[asyncio.Future, asyncio.TimerHandle]] = {}
        self.decoder = FrameDecoder()
        self.closed = False
        self._on_lost = on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            messages = self.decoder.feed(data)
        except ProtocolError as exc:
            self.abort(f"sidecar sent garbage: {exc}")
            return
        pending = self.pending
        for message in messages:
            entry = pending.pop(message.get("id"), None)  # type: ignore[arg-type]
            if entry is None:
                continue  # answer to a request that already timed out
            future, timer = entry
            timer.cancel()
            if not future.done():
                future.set_result(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all("connection to sidecar lost")

    def abort(self, reason: str) -> None:
        log.error("authsvc: %s; dropping the decision connection", reason)
        self._fail_all(reason)
        if self.transport is not None:
            self.transport.abort()

    def _fail_all(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self._on_lost(self)
        pending, self.pending = self.pending, {}
        for future, timer in pending.values():
            timer.cancel()
            if not future.done():
                future.set_exception(Unavailable(reason))


class DecisionClient:
    def __init__(self, socket_path: str, timeout: float, hello: dict[str, Any]) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._hello = hello
        self._proto: _DecisionProtocol | None = None
        self._ids = itertools.count(1)
        self._connecting: asyncio.Task | None = None
        self._mismatch_logged = False
        self.sidecar_info: dict[str, Any] = {}

    @property
    def ready(self) -> bool:
        proto = self._proto
        return proto is not None and not proto.closed

    async def connect(self) -> None:
        """Open a connection and complete the hello exchange, or raise Unavailable."""
        loop = asyncio.get_running_loop()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_unix_connection(lambda: _DecisionProtocol(self._lost), self.socket_path),
                self.timeout,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise Unavailable(f"cannot connect to sidecar: {exc}") from None
        answer = await self._call(proto, {"type": "hello", **self._hello})
        if answer.get("type") != "hello" or answer.get("protocol") != PROTOCOL_VERSION:
            if not self._mismatch_logged:
                self._mismatch_logged = True
                log.error(
                    "authsvc: protocol version mismatch: plugin speaks v%s, sidecar answered v%s; "
                    "refusing every request until both are the same version (reinstall authsvc)",
                    PROTOCOL_VERSION, answer.get("protocol"),
                )
            proto.abort("protocol version mismatch")
            raise Unavailable("protocol version mismatch")
        self._mismatch_logged = False
        self.sidecar_info = answer
        self._proto = proto

    def ensure_connecting(self) -> None:
        """Start one background reconnect if none is running."""
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._reconnect_once())

    async def _reconnect_once(self) -> None:
        try:
            await self.connect()
        except Unavailable:
            pass

    def _lost(self, proto: _DecisionProtocol) -> None:
        if self._proto is proto:
            self._proto = None

    async def call(self, message: dict[str, Any]) -> dict[str, Any]:
        proto = self._proto
        if proto is None or proto.closed:
            self.ensure_connecting()
            raise Unavailable("sidecar not connected")
        return await self._call(proto, message)

    def _call(self, proto: _DecisionProtocol, message: dict[str, Any]) -> "asyncio.Future[dict[str, Any]]":
        loop = asyncio.get_running_loop()
        request_id = next(self._ids)
        message["id"] = request_id
        try:
            frame = encode_frame(message)
        except (ProtocolError, TypeError, ValueError) as exc:
            raise Unavailable(f"cannot encode request: {exc}") from None
        future: asyncio.Future = loop.create_future()
        timer = loop.call_later(self.timeout, self._expire, proto, request_id)
        proto.pending[request_id] = (future, timer)
        assert proto.transport is not None
        proto.transport.write(frame)
        return future

    @staticmethod
    def _expire(proto: _DecisionProtocol, request_id: int) -> None:
        entry = proto.pending.pop(request_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(Unavailable("sidecar did not answer in time"))

    def close(self) -> None:
        proto, self._proto = self._proto, None
        if proto is not None and proto.transport is not None:
            proto.transport.close()
