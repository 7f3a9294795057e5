"""Client for the sidecar's decision socket.

Guarantees:
- one connection, many requests in flight (answers matched by id);
- every call ends within ``timeout`` seconds: with an answer, or with
  ``Unavailable`` (timeout, connection lost, garbage, version mismatch);
- nothing here ever lets a request through: callers turn ``Unavailable``
  into a 503 (fail closed).

Latency: the socket is driven directly (``add_reader`` on a non-blocking
socket) rather than through an asyncio transport, so that when the event loop
has nothing else to do the client can wait for its answer by polling the
socket for a bounded time (``spin_us``) instead of going to sleep in epoll.
On small virtual machines waking a sleeping process costs more than the
whole decision; under load the loop always has other work and never spins.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
import time
from collections import deque
from typing import Any, Callable

from . import host_paths
from .cpu_room import CpuRoom
from .protocol import PROTOCOL_VERSION, FrameDecoder, ProtocolError, encode_frame

log = logging.getLogger("authsvc")

_RECV_SIZE = 256 * 1024
# Host events kept while the sidecar is away (a restart): ownership of what ran meanwhile is not lost.
_EVENT_BACKLOG = 10_000
# Decisions kept for reuse (DecisionClient.decide): at most this many request descriptions,
# holding at most _KEPT_SIZE_MAX characters of them together, and none longer than
# _KEPT_DESCRIPTION_MAX (a description of many repeated header lines is decided every time
# rather than held).
_KEPT_MAX = 4096
_KEPT_DESCRIPTION_MAX = 16 * 1024
_KEPT_SIZE_MAX = 8 * 1024 * 1024
_KEPT_MS_MAX = 5000
# what a decision kept for reuse may not carry: each needs the sidecar again for the same request
_NOT_REUSABLE = ("need_body", "need_form", "ws_tag", "ws_entry", "body_replaced")


class Unavailable(Exception):
    """No usable answer from the sidecar; the caller must refuse the request."""


class _Connection:
    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, owner: "DecisionClient") -> None:
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.owner = owner
        self.pending: dict[int, tuple[asyncio.Future, asyncio.TimerHandle]] = {}
        self.decoder = FrameDecoder()
        self.unsent = bytearray()
        self.outbox: list[bytes] = []
        self.closed = False
        loop.add_reader(self.fd, self._on_readable)

    def queue(self, frame: bytes) -> None:
        """Sends at the end of this loop iteration, together with the frames other requests queue."""
        if not self.outbox:
            self.loop.call_soon(self.flush)
        self.outbox.append(frame)

    def flush(self) -> None:
        if self.outbox and not self.closed:
            frames, self.outbox = self.outbox, []
            self.send(b"".join(frames) if len(frames) > 1 else frames[0])
            if self.owner.spin > 0 and not getattr(self.loop, "_ready", True) and self.owner.may_spin():
                self.spin(None, self.owner.spin)

    def send(self, frame: bytes) -> None:
        if self.unsent:
            self.unsent += frame
            return
        try:
            sent = self.sock.send(frame)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self.abort(f"connection to sidecar lost: {exc}")
            return
        if sent < len(frame):
            self.unsent += frame[sent:]
            self.loop.add_writer(self.fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self.unsent)
        except BlockingIOError:
            return
        except OSError as exc:
            self.abort(f"connection to sidecar lost: {exc}")
            return
        del self.unsent[:sent]
        if not self.unsent:
            self.loop.remove_writer(self.fd)

    def _on_readable(self) -> None:
        self._receive()

    def _receive(self) -> bool:
        """Reads what is there; False when nothing was (would block)."""
        try:
            data = self.sock.recv(_RECV_SIZE)
        except BlockingIOError:
            return False
        except OSError as exc:
            self.abort(f"connection to sidecar lost: {exc}")
            return True
        if not data:
            self.abort("sidecar closed the connection")
            return True
        try:
            messages = self.decoder.feed(data)
        except ProtocolError as exc:
            self.abort(f"sidecar sent garbage: {exc}")
            return True
        pending = self.pending
        for message, payload in messages:
            request_id = message.get("id")
            if request_id is None:
                if message.get("type") == "resolve":
                    self._resolve(message)
                else:
                    self.owner._pushed(message)
                continue
            entry = pending.pop(request_id, None)  # type: ignore[arg-type]
            if entry is None:
                continue  # the answer to a call that already timed out
            future, timer = entry
            timer.cancel()
            if not future.done():
                future.set_result((message, payload))
        return True

    def _resolve(self, message: dict[str, Any]) -> None:
        """The sidecar asks where names land on this host (host_paths.py); answered on this connection.

        A few stats and realpaths are answered at once; a message that walks a folder (``list``:
        a user's uploads, of any number) is answered from a worker thread, so the walk never holds
        the host's event loop."""
        items = message.get("items")
        if host_paths.walks(items):
            work = self.loop.run_in_executor(None, self._resolved, message.get("rid"), items)
            work.add_done_callback(lambda done: None if self.closed else self._send_resolved(message.get("rid"), done.result()))
        else:
            self._send_resolved(message.get("rid"), self._resolved(message.get("rid"), items))

    @staticmethod
    def _resolved(rid: Any, items: Any) -> dict[str, Any]:
        try:
            return {"type": "resolved", "rid": rid, **host_paths.resolve(items)}
        except Exception:  # ComfyUI's folder_paths missing or failing: the sidecar refuses what it asked about
            log.exception("authsvc: resolving host paths failed")
            return {"type": "resolved", "rid": rid, "error": "resolve failed"}

    def _send_resolved(self, rid: Any, answer: dict[str, Any]) -> None:
        try:
            self.queue(encode_frame(answer))
        except (ProtocolError, TypeError, ValueError) as exc:
            self.queue(encode_frame({"type": "resolved", "rid": rid, "error": str(exc)}))

    def spin(self, future: asyncio.Future | None, budget: float) -> None:
        """Polls for answers instead of sleeping, while the loop has nothing else to do.

        Stops at the first answer (for ``future``, or any when None), when another
        file descriptor of the loop becomes ready, or when the budget is spent.
        """
        selector = getattr(self.loop, "_selector", None)
        started = time.perf_counter()
        deadline = started + budget
        try:
            while self.pending and not self.closed:
                if self._receive():
                    if future is None or future.done():
                        return
                    continue
                if selector is not None and selector.select(0):
                    return
                if time.perf_counter() >= deadline:
                    return
        finally:
            self.owner.cpu_room.spun += time.perf_counter() - started

    def abort(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        if reason != "closed":
            log.error("authsvc: %s; dropping the decision connection", reason)
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self.sock.close()
        self.owner._lost(self)
        pending, self.pending = self.pending, {}
        for future, timer in pending.values():
            timer.cancel()
            if not future.done():
                future.set_exception(Unavailable(reason))


class DecisionClient:
    def __init__(self, socket_path: str, timeout: float, hello: dict[str, Any], spin_us: int = 250) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.spin = spin_us / 1_000_000
        self._hello = hello
        self._conn: _Connection | None = None
        self._ids = itertools.count(1)
        self._connecting: asyncio.Task | None = None
        self._mismatch_logged = False
        self._connect_lock: asyncio.Lock | None = None
        self.sidecar_info: dict[str, Any] = {}
        self._backlog: deque[bytes] = deque(maxlen=_EVENT_BACKLOG)
        # unasked messages from the sidecar (close_ws), by type
        self.push_handlers: dict[str, Callable[[dict[str, Any]], None]] = {}
        # extra hello fields computed at each (re)connect (the running prompt)
        self.hello_extra: Callable[[], dict[str, Any]] | None = None
        self.cpu_room = CpuRoom()
        self._peer_of: _Connection | None = None
        self._peer_pid = None
        # pass decisions the sidecar allowed us to reuse, by the exact description they answered
        self._kept: dict[tuple[Any, ...], tuple[dict[str, Any], float, int]] = {}
        self._kept_size = 0  # characters of the descriptions held in _kept
        self.epoch = 0
        # one more for every connection made: what a sidecar said under an earlier one is not reused
        self.generation = 0
        # A supervisor that replaces a dead sidecar at once sets `hold_while_restarting`; then a
        # decision asked while `restarting` (no connection, a replacement on its way) waits for
        # the replacement instead of being refused at once. The wait and the decision together
        # stay within `timeout`, as for any decision; steps after a decision (body, form,
        # filter) never wait, since their context came from the sidecar that died. Clients see a
        # short wait instead of errors, and do not hammer the host with retries while it
        # restarts the sidecar (issue 27). Nothing passes without a decision.
        self.hold_while_restarting = False
        self.restarting = False
        self.hold_s = timeout  # AUTHSVC_RESTART_HOLD_MS; at most the timeout
        self._hold_over: asyncio.Event | None = None  # set when a connection is made or the hold is called off
        self.push_handlers["forget"] = self._forget

    def may_spin(self) -> bool:
        """True while polling for an answer uses a core nobody else needs (see CpuRoom)."""
        return self.cpu_room.check(self._sidecar_pid)

    def _sidecar_pid(self) -> int | None:
        """The process at the other end of the decision socket (SO_PEERCRED), once per connection."""
        conn = self._conn
        if conn is None:
            return None
        if self._peer_of is not conn:
            self._peer_of = conn
            try:
                creds = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                self._peer_pid: int | None = struct.unpack("3i", creds)[0] or None
            except (OSError, AttributeError, struct.error):
                self._peer_pid = None
        return self._peer_pid

    @property
    def ready(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.closed

    @property
    def plugin_version(self) -> str:
        return str(self._hello.get("plugin_version", "?"))

    async def connect(self) -> None:
        """Open a connection and complete the hello exchange, or raise Unavailable.

        One connect at a time: a caller that finds a connection already made by
        another returns at once, so concurrent reconnects never orphan a socket.
        """
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self.ready:
                return
            await self._open()

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, self.socket_path), self.timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            sock.close()
            raise Unavailable(f"cannot connect to sidecar: {exc}") from None
        conn = _Connection(loop, sock, self)
        hello = {"type": "hello", **self._hello, **(self.hello_extra() if self.hello_extra else {})}
        try:
            answer, _ = await self._call(conn, hello, spin=False)
        except BaseException:
            conn.abort("closed")  # an unanswered hello must not leave its socket open
            raise
        if answer.get("type") != "hello" or answer.get("protocol") != PROTOCOL_VERSION:
            if not self._mismatch_logged:
                self._mismatch_logged = True
                log.error(
                    "authsvc: protocol version mismatch: plugin speaks v%s, sidecar answered v%s; "
                    "refusing every request until both are the same version (reinstall authsvc)",
                    PROTOCOL_VERSION, answer.get("protocol"),
                )
            conn.abort("closed")
            raise Unavailable("protocol version mismatch")
        self._mismatch_logged = False
        self.sidecar_info = answer
        epoch = answer.get("epoch")
        if isinstance(epoch, int) and not isinstance(epoch, bool):
            # a forget read while this hello was answered may already name a newer epoch
            self.epoch = max(self.epoch, epoch)
        self._clear_kept()
        self.generation += 1
        self._conn = conn
        self._end_hold()  # what waited for a replacement is decided now
        while self._backlog and not conn.closed:
            conn.queue(self._backlog.popleft())

    def ensure_connecting(self) -> None:
        """Start one background reconnect if none is running."""
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._reconnect_once())

    async def _reconnect_once(self) -> None:
        try:
            await self.connect()
        except Unavailable:
            pass

    def _lost(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None
            self._clear_kept()  # nothing decided by a sidecar we no longer hear is used again
            if self._hold_over is not None:
                self._hold_over.clear()
            # the supervisor will replace it (and calls the hold off once it knows it will not)
            self.restarting = self.hold_while_restarting

    async def decide(
        self,
        fields: tuple[Any, ...],
        size: int,
        message: Callable[[tuple[Any, ...]], dict[str, Any]],
        check: Callable[[dict[str, Any]], dict[str, Any]] = lambda answer: answer,
    ) -> dict[str, Any]:
        """The decision for a request: a kept one when the sidecar said this very description may
        reuse it (``cache`` of a pass) and neither its time ran out nor anything it read changed
        since (``forget``); otherwise the sidecar's answer to ``message(fields)``, once ``check``
        accepts it (a kept answer was accepted when it came).

        ``fields`` is the whole description as a tuple (method, path, query, matched route,
        headers, peer, scheme), and reuse needs an equal tuple, so a kept decision answers only
        a request the sidecar would see as the same one; ``size`` (characters) bounds what is
        held. It needs a live connection: a lost sidecar drops them all."""
        kept = self._kept.get(fields) if size <= _KEPT_DESCRIPTION_MAX else None
        if kept is not None:
            conn = self._conn
            if conn is not None and not conn.closed:
                # whatever the sidecar has sent is read first: a forget waiting behind a large
                # answer in the socket must end this decision before it is used again
                while conn._receive() and not conn.closed:
                    pass
            kept = self._kept.get(fields)
            if kept is not None and kept[1] > time.monotonic() and self._conn is not None and not self._conn.closed:
                return kept[0]
            self._drop_kept(fields)
        generation = self.generation
        answer = check(await self.call(message(fields)))
        cache = answer.get("cache")
        # kept only when answered on the connection it was asked on
        if size <= _KEPT_DESCRIPTION_MAX and cache is not None and answer.get("action") == "pass" and generation == self.generation:
            self._keep(fields, size, answer, cache)
        return answer

    def _keep(self, key: tuple[Any, ...], size: int, answer: dict[str, Any], cache: Any) -> None:
        if not isinstance(cache, dict):
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
        self._drop_kept(key)
        while self._kept and (len(self._kept) >= _KEPT_MAX or self._kept_size + size > _KEPT_SIZE_MAX):
            self._drop_kept(next(iter(self._kept)))
        self._kept[key] = (answer, time.monotonic() + ms / 1000, size)
        self._kept_size += size

    def _drop_kept(self, key: tuple[Any, ...]) -> None:
        entry = self._kept.pop(key, None)
        if entry is not None:
            self._kept_size -= entry[2]

    def _clear_kept(self) -> None:
        self._kept.clear()
        self._kept_size = 0

    def _forget(self, message: dict[str, Any]) -> None:
        """forget from the sidecar: something decisions read changed; no kept decision is used again."""
        epoch = message.get("epoch")
        if isinstance(epoch, int) and epoch > self.epoch:
            self.epoch = epoch
        self._clear_kept()

    async def call(self, message: dict[str, Any], payload: bytes = b"") -> dict[str, Any]:
        """One exchange; the answer's payload, if any, is dropped (see ``exchange``)."""
        answer, _ = await self.exchange(message, payload)
        return answer

    async def exchange(self, message: dict[str, Any], payload: bytes = b"") -> tuple[dict[str, Any], bytes]:
        """Sends ``message`` with ``payload``; returns the answer and its payload."""
        conn = self._conn
        timeout = self.timeout
        if (conn is None or conn.closed) and self.restarting and self.hold_s > 0 and message.get("type") == "decide":
            self.ensure_connecting()  # a sidecar still alive behind a dropped connection answers at once
            started = time.monotonic()
            conn = await self._replacement()
            timeout = self.timeout - (time.monotonic() - started)
        if conn is None or conn.closed or timeout <= 0:
            self.ensure_connecting()
            raise Unavailable("sidecar not connected")
        return await self._call(conn, message, spin=True, payload=payload, timeout=timeout)

    async def _replacement(self) -> _Connection | None:
        """The connection to the sidecar that replaces a dead one, if it comes within the hold."""
        if self._hold_over is None:
            self._hold_over = asyncio.Event()
        try:
            await asyncio.wait_for(self._hold_over.wait(), min(self.hold_s, self.timeout))
        except asyncio.TimeoutError:
            return None
        return self._conn

    def stop_holding(self) -> None:
        """No replacement is on its way (a crash loop, a cause a restart does not fix, a stop):
        what waits for one is refused now, and what comes next is refused at once."""
        self._end_hold()

    def _end_hold(self) -> None:
        self.restarting = False
        if self._hold_over is not None:
            self._hold_over.set()

    def send_event(self, message: dict[str, Any]) -> None:
        """A host fact for the sidecar; never answered. Kept (bounded) while the sidecar is away."""
        try:
            frame = encode_frame({"type": "event", **message})
        except (ProtocolError, TypeError, ValueError) as exc:
            log.error("authsvc: cannot encode host event %s: %s", message.get("name"), exc)
            return
        conn = self._conn
        if conn is None or conn.closed:
            self._backlog.append(frame)
            self.ensure_connecting()
            return
        conn.queue(frame)

    def _pushed(self, message: dict[str, Any]) -> None:
        handler = self.push_handlers.get(str(message.get("type")))
        if handler is None:
            log.error("authsvc: sidecar sent an unknown message %r; ignored", message.get("type"))
            return
        try:
            handler(message)
        except Exception:  # a bug here must not drop the decision connection
            log.exception("authsvc: handling the sidecar's %s message failed", message.get("type"))

    def _call(
        self, conn: _Connection, message: dict[str, Any], spin: bool, payload: bytes = b"", timeout: float | None = None,
    ) -> "asyncio.Future[tuple[dict[str, Any], bytes]]":
        loop = conn.loop
        request_id = next(self._ids)
        message["id"] = request_id
        try:
            frame = encode_frame(message, payload)
        except (ProtocolError, TypeError, ValueError) as exc:
            raise Unavailable(f"cannot encode request: {exc}") from None
        future: asyncio.Future = loop.create_future()
        timer = loop.call_later(self.timeout if timeout is None else timeout, self._expire, conn, request_id)
        conn.pending[request_id] = (future, timer)
        # Alone and idle: send now and poll for the answer. Otherwise batch the frame with
        # the other requests of this loop iteration: one write, one wake-up of the sidecar.
        if spin and self.spin > 0 and len(conn.pending) == 1 and not getattr(loop, "_ready", True) and self.may_spin():
            conn.send(frame)
            conn.spin(future, self.spin)
        else:
            conn.queue(frame)
        return future

    @staticmethod
    def _expire(conn: _Connection, request_id: int) -> None:
        entry = conn.pending.pop(request_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(Unavailable("sidecar did not answer in time"))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort("closed")
