"""The plugin's client of the sidecar's decision socket: decisions, the steps after them, host
events, and the sidecar's unasked messages.

Guarantees:
- one connection at a time (connection.py), made and re-made in the background; a plugin and a
  sidecar of different protocol versions never work together (one error line, then 503s);
- every call ends within ``timeout`` seconds: with an answer, or with ``Unavailable`` (timeout,
  connection lost, garbage, version mismatch); nothing here ever lets a request through: callers
  turn ``Unavailable`` into a 503 (fail closed);
- a decision is repeated without asking only as kept_decisions.py allows, after whatever the
  sidecar sent before the request came has been read (the connection reads everything waiting
  whenever the loop sees it readable, a turn before the request is decided: a ``forget`` behind a
  large answer ends it first), and only on the connection that gave it; one in the last quarter
  of its time is asked about again in the background (one at a time for a description), and the
  new answer replaces it if it may be kept, or ends it;
- while a supervisor replaces a dead sidecar, a decision waits for the replacement (within its
  timeout) instead of being refused at once; the steps after a decision never wait;
- host events are kept (bounded) while the sidecar is away, and sent in order once it is back.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import sys
import time
from collections import deque
from typing import Any, Callable

from .answers import MalformedAnswer
from .connection import Connection, Unavailable
from .cpu_room import CpuRoom
from .kept_decisions import KeptDecisions
from .protocol import PROTOCOL_VERSION, ProtocolError, encode_frame

# Whether the host's handlers may run in the turn that read their request's last bytes (aiohttp
# 3.10+ creates the handler's task with eager_start on Python 3.12+; aiohttp 3.8 does not, and
# then the yield it calls for only costs a turn). Read at each use, so a test may set it.
EAGER_HANDLERS = sys.version_info >= (3, 12)

log = logging.getLogger("authsvc")

# Host events kept while the sidecar is away (a restart): ownership of what ran meanwhile is not lost.
_EVENT_BACKLOG = 10_000

class DecisionClient:
    def __init__(self, socket_path: str, timeout: float, hello: dict[str, Any], spin_us: int = 250) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.spin = spin_us / 1_000_000
        self._hello = hello
        self._conn: Connection | None = None
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
        # pass decisions the sidecar allowed us to reuse, by the exact description they answered
        self.kept = KeptDecisions()
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
        self.push_handlers["forget"] = lambda message: self.kept.forget(message.get("epoch"))
        # descriptions whose kept decision is being asked again in the background (one at a time)
        self._renewing: set[tuple[Any, ...]] = set()
        self._renewals: set[asyncio.Task] = set()

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
        conn = Connection(loop, sock, self.cpu_room, self.spin, self._pushed, self._lost)
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
        # a forget read while this hello was answered may already name a newer epoch
        self.kept.forget(answer.get("epoch"))
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

    def _lost(self, conn: Connection) -> None:
        if self._conn is conn:
            self._conn = None
            self.kept.forget()  # nothing decided by a sidecar we no longer hear is used again
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
        kept = self.kept
        found = kept.lookup(fields, size)
        if found is not None and EAGER_HANDLERS:
            # aiohttp 3.10+ on Python 3.12+ starts the handler's task eagerly, inside the step of
            # the connection's task that the request woke, so this can run before the readers of
            # the poll that began this turn: a forget or a file change that arrived before the
            # request's last bytes would not be heard yet. One yield lets them run first.
            await asyncio.sleep(0)
            found = kept.lookup(fields, size)
        if found is not None:
            # No read of the socket here (it cost a system call per request, and a turn of the
            # GIL to the host's file threads): the loop's poll that saw this request's bytes saw
            # anything the sidecar had sent before them, and the connection read all of it then,
            # in that turn (connection.py), so a forget that came before this request has ended
            # the kept decision already (the watch of a kept /view's file likewise, file_watch.py).
            answer, due = found
            if answer is not None and self._conn is not None and not self._conn.closed:
                if due and fields not in self._renewing:
                    self._renew(fields, size, message, check, answer)
                return answer
            kept.drop(fields)
        generation = self.generation
        answer = check(await self.call(message(fields)))
        if generation == self.generation:  # kept only when answered on the connection it was asked on
            kept.keep(fields, size, answer)
        return answer

    def _renew(
        self,
        fields: tuple[Any, ...],
        size: int,
        message: Callable[[tuple[Any, ...]], dict[str, Any]],
        check: Callable[[dict[str, Any]], dict[str, Any]],
        kept_answer: dict[str, Any],
    ) -> None:
        """Asks the sidecar again about a kept decision in the last part of its time, while the
        requests go on using it: otherwise, when its time ends, every request then in flight for
        it waits for a round trip of its own (a stall of all of them once a second under load).
        The answer replaces the kept one as any answer is kept; an answer that may not be kept
        (a refusal, one decided across a change), no answer, or a lost connection ends it at once.
        Nothing is ever reused past its own time, and the sidecar still decides every answer."""
        self._renewing.add(fields)
        task = asyncio.ensure_future(self._renewal(fields, size, message, check, kept_answer))
        self._renewals.add(task)
        task.add_done_callback(self._renewals.discard)

    async def _renewal(
        self,
        fields: tuple[Any, ...],
        size: int,
        message: Callable[[tuple[Any, ...]], dict[str, Any]],
        check: Callable[[dict[str, Any]], dict[str, Any]],
        kept_answer: dict[str, Any],
    ) -> None:
        kept = self.kept
        try:
            conn, generation = self._conn, self.generation
            if conn is None or conn.closed:
                kept.drop(fields, kept_answer)
                return
            try:
                answer, _ = await self._call(conn, message(fields), spin=False)
                answer = check(answer)
            except Unavailable as exc:
                kept.drop(fields, kept_answer)
                if isinstance(exc, MalformedAnswer):
                    log.error("authsvc: malformed sidecar answer (%s) when asked again about a kept decision; it ends", exc)
                return
            if generation != self.generation or not kept.keep(fields, size, answer):
                # the answer renewed ends; one kept meanwhile (after a forget) stays
                kept.drop(fields, kept_answer)
        except Exception:  # a bug here must not outlive the kept decision it was about
            kept.drop(fields, kept_answer)
            log.exception("authsvc: asking the sidecar again about a kept decision failed")
        finally:
            self._renewing.discard(fields)

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

    async def _replacement(self) -> Connection | None:
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
        self, conn: Connection, message: dict[str, Any], spin: bool, payload: bytes = b"", timeout: float | None = None,
    ) -> "asyncio.Future[tuple[dict[str, Any], bytes]]":
        request_id = next(self._ids)
        message["id"] = request_id
        try:
            frame = encode_frame(message, payload)
        except (ProtocolError, TypeError, ValueError) as exc:
            raise Unavailable(f"cannot encode request: {exc}") from None
        return conn.ask(request_id, frame, self.timeout if timeout is None else timeout, spin)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort("closed")
