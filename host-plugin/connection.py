"""One connection to the sidecar's decision socket.

Guarantees:
- many requests in flight on one socket, answers matched by id; each request ends within its
  timeout, with the answer or with ``Unavailable``; a lost or garbled connection fails every
  request in flight with ``Unavailable`` at once, and nothing here ever lets a request through;
- the frames queued in one loop iteration leave in one write;
- whenever the loop sees the socket readable, everything waiting in it is read at once (not one
  read per turn): what the sidecar sent before a request's bytes came is handled before the
  request is decided;
- the sidecar's own questions (``resolve``: where names land on this host) are answered on the
  connection they came on, a folder walk from a worker thread, never on the host's loop.

Latency: the socket is driven directly (``add_reader`` on a non-blocking socket) rather than
through an asyncio transport, so that when the event loop has nothing else to do the connection
can wait for its answer by polling the socket for a bounded time (``spin_s``) instead of going to
sleep in epoll. On small virtual machines waking a sleeping process costs more than the whole
decision; under load the loop always has other work and never spins, and it never spins where
the CPU room says the sidecar needs that core (cpu_room.py).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from . import host_paths
from .cpu_room import CpuRoom
from .protocol import FrameDecoder, ProtocolError, encode_frame

log = logging.getLogger("authsvc")

# the resolver's own threads: prompt checks and folder walks, never on the host's loop or its
# default executor; two, so one long prompt check does not hold up every other
_RESOLVER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="authsvc-resolve")

_RECV_SIZE = 256 * 1024


class Unavailable(Exception):
    """No usable answer from the sidecar; the caller must refuse the request."""


def _loop_is_idle(loop: asyncio.AbstractEventLoop) -> bool:
    """No callback is ready to run: asyncio has no public way to ask this (docs/architecture.md,
    "Host plugin layout"); a loop without the attribute is taken as busy, so it never spins."""
    return not getattr(loop, "_ready", True)


class Connection:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        room: CpuRoom,
        spin_s: float,
        pushed: Callable[[dict[str, Any]], None],
        lost: Callable[["Connection"], None],
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.room = room
        self.spin_s = spin_s
        self._pushed = pushed  # an unasked message of the sidecar (close_ws, forget, ...)
        self._lost = lost  # called once, when this connection ends
        self.pending: dict[int, tuple[asyncio.Future, asyncio.TimerHandle]] = {}
        self.decoder = FrameDecoder()
        self.unsent = bytearray()
        self.outbox: list[bytes] = []
        self.closed = False
        self._peer_pid: int | None = None
        self._peer_asked = False
        loop.add_reader(self.fd, self._on_readable)

    def ask(self, request_id: int, frame: bytes, timeout: float, spin: bool) -> "asyncio.Future[tuple[dict[str, Any], bytes]]":
        """Sends one request; the future is its answer, or ``Unavailable`` after ``timeout``."""
        future: asyncio.Future = self.loop.create_future()
        timer = self.loop.call_later(timeout, self._expire, request_id)
        self.pending[request_id] = (future, timer)
        # Alone and idle: send now and poll for the answer. Otherwise batch the frame with
        # the other requests of this loop iteration: one write, one wake-up of the sidecar.
        if spin and self.spin_s > 0 and len(self.pending) == 1 and _loop_is_idle(self.loop) and self.may_spin():
            self.send(frame)
            self.spin(future, self.spin_s)
        else:
            self.queue(frame)
        return future

    def _expire(self, request_id: int) -> None:
        entry = self.pending.pop(request_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(Unavailable("sidecar did not answer in time"))

    def may_spin(self) -> bool:
        """True while polling for an answer uses a core nobody else needs (see cpu_room.py)."""
        return self.room.check(self.peer_pid)

    def peer_pid(self) -> int | None:
        """The process at the other end (SO_PEERCRED), asked once: its CPU counts as room."""
        if not self._peer_asked:
            self._peer_asked = True
            try:
                creds = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                self._peer_pid = struct.unpack("3i", creds)[0] or None
            except (OSError, AttributeError, struct.error):
                self._peer_pid = None
        return self._peer_pid

    def queue(self, frame: bytes) -> None:
        """Sends at the end of this loop iteration, together with the frames other requests queue."""
        if not self.outbox:
            self.loop.call_soon(self.flush)
        self.outbox.append(frame)

    def flush(self) -> None:
        if self.outbox and not self.closed:
            frames, self.outbox = self.outbox, []
            self.send(b"".join(frames) if len(frames) > 1 else frames[0])
            if self.spin_s > 0 and _loop_is_idle(self.loop) and self.may_spin():
                self.spin(None, self.spin_s)

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
        # Everything waiting, not one read: aiohttp decides a request in a later turn of the loop
        # than the one whose poll saw its bytes, and that poll (level-triggered) saw this socket
        # readable too if the sidecar had sent anything before them; so whatever it sent before a
        # request came (a forget behind megabytes of another answer) is read before that request
        # is decided, and a kept decision needs no read of its own (decision_client.py).
        while self.receive() and not self.closed:
            pass

    def receive(self) -> bool:
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
                    self._pushed(message)
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

        A few stats and realpaths are answered at once; a message that may take long (a folder
        walk, a prompt's strings) is answered from the resolver's own threads, so it never holds
        the host's event loop nor the loop's default executor (which serves files)."""
        items = message.get("items")
        if host_paths.slow(items):
            work = self.loop.run_in_executor(_RESOLVER, self._resolved, message.get("rid"), items)
            work.add_done_callback(lambda done: None if self.closed else self._send_resolved(message.get("rid"), done.result()))
        else:
            self._send_resolved(message.get("rid"), self._resolved(message.get("rid"), items))

    @staticmethod
    def _resolved(rid: Any, items: Any) -> dict[str, Any]:
        try:
            return {"type": "resolved", "rid": rid, **host_paths.resolve(items)}
        except host_paths.OverBudget as exc:  # the sidecar refuses what it asked about
            log.warning("authsvc: %s; the request is refused", exc)
            return {"type": "resolved", "rid": rid, "error": str(exc)}
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

        Stops at the first answer (for ``future``, or any when None), when another file
        descriptor of the loop becomes ready, or when the budget is spent. The loop's own
        selector is the only place that knows its other file descriptors (asyncio has no public
        way to ask; docs/architecture.md, "Host plugin layout"): without it, the budget bounds
        the wait alone.
        """
        selector = getattr(self.loop, "_selector", None)
        started = time.perf_counter()
        deadline = started + budget
        try:
            while self.pending and not self.closed:
                if self.receive():
                    if future is None or future.done():
                        return
                    continue
                if selector is not None and selector.select(0):
                    return
                if time.perf_counter() >= deadline:
                    return
        finally:
            self.room.spun += time.perf_counter() - started

    def abort(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        if reason != "closed":
            log.error("authsvc: %s; dropping the decision connection", reason)
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self.sock.close()
        self._lost(self)
        pending, self.pending = self.pending, {}
        for future, timer in pending.values():
            timer.cancel()
            if not future.done():
                future.set_exception(Unavailable(reason))
