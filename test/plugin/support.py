"""Test harness for the host plugin: a fake sidecar, a ComfyUI-like host app, and the plugin loader.

- ``FakeSidecar``: an asyncio Unix-socket server speaking the framing of
  shared/protocol.json (u32 big-endian length + UTF-8 JSON). It answers
  ``hello`` itself and every other message with a per-test script
  (``decide(msg) -> decision | awaitable | Raw | Drop | None``), and records
  everything it received.
- ``SidecarHttp``: a small aiohttp app on another Unix socket that plays the
  sidecar's HTTP side (the target of ``proxy`` decisions).
- ``Host``: an aiohttp Application shaped like ComfyUI's (plain, dynamic,
  WebSocket, FileResponse, static, sub-app and upload routes; every handler
  counts its calls), with the plugin loaded the way ComfyUI loads a custom node
  (a fake ``server`` module, then the repository root ``__init__.py`` by file
  path under a fresh module name), served over real TCP on 127.0.0.1.
- ``PluginCase``: an IsolatedAsyncioTestCase with ``start()`` to bring all of it
  up and tear it down after the test.

Set AUTHSVC_TEST_LOG=1 to see the plugin's log lines.
"""
from __future__ import annotations

import asyncio
import collections
import hashlib
import importlib
import importlib.util
import inspect
import itertools
import json
import logging
import os
import shutil
import struct
import sys
import tempfile
import time
import types
import unittest
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Optional, Union

import aiohttp
from aiohttp import web

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "shared", "protocol.json"), encoding="utf-8") as _f:
    SPEC = json.load(_f)
PROTOCOL_VERSION: int = int(SPEC["version"])
MAX_FRAME_BYTES: int = int(SPEC["max_frame_bytes"])
AIOHTTP_VERSION = tuple(int(p) for p in aiohttp.__version__.split(".")[:2])

PROBE_PATH = "/__probe"  # answered by the fake itself (status PROBE_STATUS), never recorded
PROBE_STATUS = 209

# --------------------------------------------------------------------------- logging


class LogCapture(logging.Handler):
    """Collects the plugin's log records (logger "authsvc") for assertions."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if os.environ.get("AUTHSVC_TEST_LOG"):
            sys.stderr.write(f"[{record.levelname}] {record.getMessage()}\n")

    def lines(self, level: int = logging.DEBUG, containing: str = "") -> list[str]:
        out = []
        for record in self.records:
            if record.levelno >= level:
                text = record.getMessage()
                if containing.lower() in text.lower():
                    out.append(text)
        return out


LOGS = LogCapture()
_plugin_logger = logging.getLogger("authsvc")
_plugin_logger.addHandler(LOGS)
_plugin_logger.setLevel(logging.DEBUG)
_plugin_logger.propagate = False
# IsolatedAsyncioTestCase runs the loop in debug mode: keep its slow-callback notes quiet.
logging.getLogger("asyncio").setLevel(logging.CRITICAL)
logging.getLogger("aiohttp").setLevel(logging.CRITICAL)

# --------------------------------------------------------------------------- framing

_HEADER = struct.Struct(">II")  # protocol v2: total length, JSON length; then JSON, then the raw payload


def encode_frame(message: Any, payload: bytes = b"") -> bytes:
    head = json.dumps(message, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(4 + len(head) + len(payload), len(head)) + head + payload


def encode_answer(answer: dict) -> bytes:
    """A scripted answer as the real sidecar frames it: a `pass` (body step) or `replace` with
    `body_text` sends that text as the payload (`body_replaced` on a pass), never as JSON."""
    if answer.get("action") in ("pass", "replace") and isinstance(answer.get("body_text"), str):
        rest = {k: v for k, v in answer.items() if k != "body_text"}
        if rest.get("action") == "pass":
            rest["body_replaced"] = True
        return encode_frame(rest, answer["body_text"].encode("utf-8"))
    return encode_frame(answer)


@dataclass
class Raw:
    """A scripted answer: send these bytes as they are (garbage tests)."""

    data: bytes


@dataclass
class Drop:
    """A scripted answer: close the connection instead of answering."""


@dataclass
class Split:
    """A scripted answer: send this decision's frame in several writes, a short pause between them."""

    answer: dict
    pieces: int = 3


def plugin_module(name: str) -> types.ModuleType:
    """A host-plugin submodule, without running the package's install-into-ComfyUI side effect."""
    package = "authsvc_plugin_modules"
    if package not in sys.modules:
        module = types.ModuleType(package)
        module.__path__ = [os.path.join(ROOT, "host-plugin")]  # type: ignore[attr-defined]
        sys.modules[package] = module
    return importlib.import_module(f"{package}.{name}")


def plugin_bug(reason: str) -> Callable[[Any], Any]:
    """Marks a test that fails because of a known bug in host-plugin/ (see the reason).

    The test still runs; it is an expected failure until the plugin is fixed, and then an
    "unexpected success" fails the run: remove the marker at that point.
    """

    def mark(fn: Any) -> Any:
        fn.__doc__ = f"{fn.__doc__ or ''}\nKNOWN PLUGIN BUG: {reason}"
        return unittest.expectedFailure(fn)

    return mark


Answer = Union[dict, Raw, Drop, None]
Decide = Callable[[dict], Union[Answer, Awaitable[Answer]]]


def pass_all(msg: dict) -> dict:
    return {"action": "pass"}


# --------------------------------------------------------------------------- fake sidecar


class FakeSidecar:
    """The decision socket side of the sidecar, scripted per test."""

    def __init__(self, path: str, http_socket: str, decide: Decide = pass_all) -> None:
        self.path = path
        self.http_socket = http_socket
        self.decide: Decide = decide
        self.hello: Optional[Callable[[dict], Answer]] = None  # None: the correct answer
        self.messages: list[dict] = []  # every non-hello, non-probe message, in arrival order
        self.hellos: list[dict] = []
        self.events: list[dict] = []  # host events (never answered)
        self.connects = 0
        self.open_connections: set[asyncio.StreamWriter] = set()
        self._server: Optional[asyncio.AbstractServer] = None
        self._tasks: set[asyncio.Task] = set()
        self._lives = 0  # each start and stop begins another: a connection is served only in the life it came in

    # -- lifecycle
    async def start(self) -> None:
        self._lives += 1
        life = self._lives
        self._server = await asyncio.start_unix_server(lambda r, w: self._serve(r, w, life), path=self.path)

    async def stop(self) -> None:
        """Stop listening and drop every connection (the sidecar is down), those accepted whose
        serving has not begun yet too (on Python 3.12+ one may begin after this)."""
        self._lives += 1
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self.open_connections):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    @property
    def listening(self) -> bool:
        return self._server is not None

    def push(self, message: dict) -> None:
        """An unasked message (close_ws) on every open connection, as the sidecar sends it."""
        for writer in list(self.open_connections):
            writer.write(encode_frame(message))

    # -- views of what was received
    def of_type(self, kind: str) -> list[dict]:
        return [m for m in self.messages if m.get("type") == kind]

    def decides(self) -> list[dict]:
        return self.of_type("decide")

    def clear(self) -> None:
        self.messages.clear()

    # -- the server
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, life: int) -> None:
        if life != self._lives:  # accepted before a stop, served after it: the sidecar it came to is gone
            writer.close()
            return
        self.connects += 1
        self.open_connections.add(writer)
        try:
            while True:
                try:
                    header = await reader.readexactly(8)
                    total, head_length = _HEADER.unpack(header)
                    frame = await reader.readexactly(total - 4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                # lenient like the real sidecar (Node's Buffer.toString('utf8'))
                message = json.loads(frame[:head_length].decode("utf-8", "replace"))
                if message.get("type") == "event":
                    self.events.append(message)
                    continue
                if message.get("type") in ("body", "filter"):
                    # the raw payload, seen as the text the tests compare (bytes kept in body_bytes)
                    message["body_bytes"] = frame[head_length:]
                    message["body_text"] = frame[head_length:].decode("utf-8", "replace")
                if message.get("type") == "hello":
                    self.hellos.append(message)
                    answer: Any = self.hello(message) if self.hello is not None else self.good_hello(message)
                elif message.get("type") == "decide" and str(message.get("path", "")).startswith(PROBE_PATH):
                    answer = {"action": "respond", "status": PROBE_STATUS, "body_text": "probe"}
                else:
                    self.messages.append(message)
                    answer = self.decide(message)
                task = asyncio.ensure_future(self._answer(writer, message, answer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            self.open_connections.discard(writer)
            writer.close()

    def good_hello(self, message: dict) -> dict:
        return {"type": "hello", "protocol": PROTOCOL_VERSION, "sidecar_version": "test",
                "http_socket": self.http_socket}

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, message: dict, answer: Any) -> None:
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is None or writer.is_closing():
            return
        if isinstance(answer, Raw):
            writer.write(answer.data)
        elif isinstance(answer, Drop):
            writer.close()
        elif isinstance(answer, Split):
            frame = encode_answer({**answer.answer, "id": message["id"]})
            step = max(1, len(frame) // answer.pieces)
            for start in range(0, len(frame), step):
                writer.write(frame[start:start + step])
                await writer.drain()
                await asyncio.sleep(0.01)
        else:
            writer.write(encode_answer({**answer, "id": message["id"]}))


# --------------------------------------------------------------------------- sidecar HTTP side

BIG_BODY_SIZE = 5 * 1024 * 1024


def pattern_block(seed: int, size: int = 1 << 20) -> bytes:
    """A deterministic, non-repeating-looking block of bytes."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest() * 64
        counter += 1
    return bytes(out[:size])


def big_body(size: int, seed: int = 7) -> Iterable[bytes]:
    block = pattern_block(seed)
    sent = 0
    index = 0
    while sent < size:
        piece = block[: min(len(block), size - sent)]
        # make every block different without recomputing it
        piece = index.to_bytes(4, "big") + piece[4:] if len(piece) >= 4 else piece
        yield piece
        sent += len(piece)
        index += 1


def big_body_sha256(size: int, seed: int = 7) -> str:
    digest = hashlib.sha256()
    for piece in big_body(size, seed):
        digest.update(piece)
    return digest.hexdigest()


class SidecarHttp:
    """The sidecar's HTTP socket: records what arrives, answers owned routes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.requests: list[dict] = []
        self._runner: Optional[web.AppRunner] = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.UnixSite(self._runner, self.path).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        digest = hashlib.sha256()
        size = 0
        while True:
            chunk = await request.content.read(1 << 16)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
        self.requests.append({
            "method": request.method,
            "raw_path": request.raw_path,
            "headers": [(k.lower(), v) for k, v in request.headers.items()],
            "sha256": digest.hexdigest(),
            "size": size,
        })
        if request.path == "/authsvc/big":
            response = web.StreamResponse(status=200)
            response.content_type = "application/octet-stream"
            response.headers.add("Set-Cookie", "big1=1; Path=/")
            response.headers.add("Set-Cookie", "big2=2; Path=/")
            await response.prepare(request)
            for piece in big_body(BIG_BODY_SIZE):
                await response.write(piece)
            await response.write_eof()
            return response
        response = web.json_response(
            {"owned": True, "path": request.raw_path, "size": size, "sha256": digest.hexdigest()}, status=201,
        )
        response.headers.add("Set-Cookie", "sid=abc; Path=/; HttpOnly")
        response.headers.add("Set-Cookie", "csrf=xyz; Path=/")
        response.headers["X-Owned-By"] = "sidecar"
        return response


# --------------------------------------------------------------------------- plugin loading

_load_counter = itertools.count(1)


class EnvPatch:
    def __init__(self, values: dict[str, Optional[str]]) -> None:
        self.values = values
        self.saved: dict[str, Optional[str]] = {}

    def __enter__(self) -> "EnvPatch":
        for key, value in self.values.items():
            self.saved[key] = os.environ.get(key)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        return self

    def __exit__(self, *exc: Any) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_plugin(app: web.Application, env: dict[str, Optional[str]]) -> tuple[str, types.ModuleType]:
    """Load a fresh copy of the plugin into ``app`` like ComfyUI loads a custom node.

    Returns (module name, the host-plugin package module).
    """
    fake_server = types.ModuleType("server")

    class PromptServer:  # noqa: D401 - mimics ComfyUI's singleton
        instance = types.SimpleNamespace(app=app, routes=web.RouteTableDef())

    fake_server.PromptServer = PromptServer  # type: ignore[attr-defined]
    name = f"authsvc_under_test_{os.getpid()}_{next(_load_counter)}"
    previous_server = sys.modules.get("server")
    sys.modules["server"] = fake_server
    try:
        with EnvPatch(env):
            spec = importlib.util.spec_from_file_location(
                name, os.path.join(ROOT, "__init__.py"), submodule_search_locations=[ROOT],
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    finally:
        if previous_server is None:
            sys.modules.pop("server", None)
        else:
            sys.modules["server"] = previous_server
    assert isinstance(module.NODE_CLASS_MAPPINGS, dict)
    return name, sys.modules[f"{name}.host_plugin"]


def unload_plugin(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


# --------------------------------------------------------------------------- the host


class Host:
    """A ComfyUI-shaped aiohttp app; ``calls`` counts handler invocations by route name."""

    def __init__(self, tmp: str) -> None:
        self.tmp = tmp
        self.calls: collections.Counter[str] = collections.Counter()
        self.seen: dict[str, dict] = {}  # route name -> what the last call saw
        self.static_dir = os.path.join(tmp, "static")
        os.makedirs(self.static_dir, exist_ok=True)
        with open(os.path.join(self.static_dir, "app.js"), "w") as f:
            f.write("console.log('static');\n")
        self.view_file = os.path.join(tmp, "image.png")
        with open(self.view_file, "wb") as f:
            f.write(b"\x89PNG" + bytes(range(256)) * 40)
        self.upload_dir = os.path.join(tmp, "uploads")
        os.makedirs(self.upload_dir, exist_ok=True)
        self.queue_body = {"queue_running": [[1, "p1", {}, {"client_id": "alice"}, []]],
                           "queue_pending": [[2, "p2", {}, {"client_id": "bob"}, []]]}

    def _saw(self, name: str, request: web.Request, **extra: Any) -> None:
        self.calls[name] += 1
        self.seen[name] = {
            "method": request.method,
            "path_qs": request.raw_path,
            "query": [(k, v) for k, v in request.query.items()],
            "headers": {k.lower(): v for k, v in request.headers.items()},
            # the raw lines too: an edit must show in both views a handler may read
            "raw_headers": [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in request.raw_headers],
            "match_info": dict(request.match_info),
            **extra,
        }

    def build_app(self) -> web.Application:
        app = web.Application()

        @web.middleware
        async def comfy_cache_control(request: web.Request, handler: Any) -> web.StreamResponse:
            return await handler(request)

        app.middlewares.append(comfy_cache_control)  # ComfyUI's own middlewares come first
        return app

    def add_routes(self, app: web.Application) -> None:
        """Routes are added after the custom nodes were imported, as ComfyUI does."""
        r = app.router

        async def prompt_get(request: web.Request) -> web.Response:
            self._saw("prompt_get", request)
            return web.json_response({"exec_info": {"queue_remaining": 0}})

        async def prompt_post(request: web.Request) -> web.Response:
            body = await request.json()
            self._saw("prompt_post", request, body=body)
            return web.json_response({"prompt_id": "p1", "number": 1, "node_errors": {}, "received": body})

        async def userdata_get(request: web.Request) -> web.Response:
            self._saw("userdata_get", request)
            return web.json_response({"file": request.match_info["file"]})

        async def userdata_post(request: web.Request) -> web.Response:
            body = await request.read()
            self._saw("userdata_post", request, body=body)
            return web.json_response(request.match_info["file"])

        async def ws(request: web.Request) -> web.WebSocketResponse:
            self._saw("ws", request)
            socket = web.WebSocketResponse()
            await socket.prepare(request)
            await socket.send_json({"type": "status", "data": {"sid": "s1"}})
            async for msg in socket:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    await socket.send_str("echo:" + msg.data)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    await socket.send_bytes(b"echo:" + msg.data)
            return socket

        async def view(request: web.Request) -> web.StreamResponse:
            self._saw("view", request)
            return web.FileResponse(self.view_file)

        async def queue(request: web.Request) -> web.Response:
            self._saw("queue", request)
            return web.json_response(self.queue_body)

        async def forbidden_json(request: web.Request) -> web.Response:
            self._saw("forbidden", request)
            return web.json_response({"error": "host says no"}, status=403)

        async def raises_404(request: web.Request) -> web.Response:
            self._saw("raises", request)
            raise web.HTTPNotFound(text="host raised")

        async def echo(request: web.Request) -> web.Response:
            self._saw("echo", request)
            return web.json_response({"n": request.match_info["n"],
                                      "decided_for": request.headers.get("x-decided-for")})

        async def upload(request: web.Request) -> web.Response:
            reader = await request.multipart()
            part = await reader.next()
            digest = hashlib.sha256()
            size = 0
            dest = os.path.join(self.upload_dir, "upload.bin")
            with open(dest, "wb") as f:
                while True:
                    chunk = await part.read_chunk(1 << 20)
                    if not chunk:
                        break
                    digest.update(chunk)
                    size += len(chunk)
                    f.write(chunk)
            self._saw("upload", request, size=size)
            return web.json_response({"name": part.filename, "size": size, "sha256": digest.hexdigest()})

        r.add_get("/prompt", prompt_get)
        r.add_post("/prompt", prompt_post)
        r.add_get("/userdata/{file}", userdata_get)
        r.add_post("/userdata/{file}", userdata_post)
        r.add_get("/ws", ws)
        r.add_get("/view", view)
        r.add_get("/queue", queue)
        r.add_get("/forbidden", forbidden_json)
        r.add_get("/raises", raises_404)
        r.add_get("/echo/{n}", echo)
        async def upload_form(request: web.Request) -> web.Response:
            # ComfyUI's way: request.post() (the gate may have parsed the form already: aiohttp reuses it)
            post = await request.post()
            image = post.get("image")
            data = image.file.read() if image is not None and hasattr(image, "file") else b""
            self._saw("upload_form", request, size=len(data))
            return web.json_response({"name": getattr(image, "filename", None), "type": post.get("type"),
                                      "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)})

        r.add_post("/upload/image", upload)
        r.add_post("/upload/mask", upload_form)
        r.add_static("/extensions/demo", self.static_dir)

        internal = web.Application()

        async def logs(request: web.Request) -> web.Response:
            self._saw("internal_logs", request)
            return web.json_response(["log line"])

        async def internal_file(request: web.Request) -> web.Response:
            self._saw("internal_file", request)
            return web.json_response({"name": request.match_info["name"]})

        internal.router.add_get("/logs", logs)
        internal.router.add_get("/files/{name}", internal_file)
        app.add_subapp("/internal", internal)


# --------------------------------------------------------------------------- raw HTTP


@dataclass
class RawResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> Optional[str]:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


async def raw_http(port: int, request: bytes, timeout: float = 10.0) -> RawResponse:
    """Send exact bytes (must ask for Connection: close) and parse the answer."""

    async def run() -> RawResponse:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = []
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
        chunked = any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers)
        if chunked:
            body = bytearray()
            while rest:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    break
                body += rest[:size]
                rest = rest[size + 2:]
            rest = bytes(body)
        return RawResponse(status, headers, rest)

    return await asyncio.wait_for(run(), timeout)


# --------------------------------------------------------------------------- the test case


@dataclass
class Stack:
    tmp: str
    host: Host
    fake: FakeSidecar
    http: SidecarHttp
    app: web.Application
    plugin: types.ModuleType
    port: int
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def plugin_version(self) -> str:
        return self.plugin.PLUGIN_VERSION

    async def get(self, path: str, **kw: Any) -> tuple[int, dict, bytes]:
        async with self.session.get(self.url + path, allow_redirects=False, **kw) as resp:
            return resp.status, resp.headers, await resp.read()  # type: ignore[return-value]

    async def request(self, method: str, path: str, **kw: Any) -> tuple[int, Any, bytes]:
        async with self.session.request(method, self.url + path, allow_redirects=False, **kw) as resp:
            return resp.status, resp.headers, await resp.read()

    async def wait_ready(self, timeout: float = 5.0) -> None:
        """Bounded polling: until a probe request gets the fake's own answer."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            async with self.session.get(self.url + PROBE_PATH) as resp:
                last = resp.status
                await resp.read()
            if last == PROBE_STATUS:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"plugin did not get ready within {timeout}s (last status {last})")

    async def wait_status(self, path: str, status: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last, _, _ = await self.get(path)
            if last == status:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{path} never answered {status} within {timeout}s (last {last})")


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0,
                   what: Union[str, Callable[[], str]] = "condition") -> None:
    """Bounded polling; ``what`` (or what it returns, evaluated at the deadline) names the condition."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        await asyncio.sleep(0.01)


def assert_unavailable(case: unittest.TestCase, status: int, body: bytes) -> None:
    case.assertEqual(status, 503, body[:300])
    payload = json.loads(body.decode("utf-8"))
    case.assertEqual(payload.get("code"), "AUTHSVC_UNAVAILABLE")


class PluginCase(unittest.IsolatedAsyncioTestCase):
    """Base: ``await self.start(decide)`` gives a running Stack, torn down after the test."""

    async def asyncSetUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="asp-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        LOGS.records.clear()

    async def start(
        self,
        decide: Decide = pass_all,
        *,
        env: Optional[dict[str, Optional[str]]] = None,
        sidecar: bool = True,
        sidecar_http: bool = True,
        hello: Optional[Callable[[dict], Answer]] = None,
        wait: bool = True,
        timeout_ms: Optional[int] = None,
        before_start: Optional[Callable[[web.Application], None]] = None,
    ) -> Stack:
        n = self._starts = getattr(self, "_starts", 0) + 1
        socket_path = os.path.join(self.tmp, f"d{n}.sock")
        http_path = os.path.join(self.tmp, f"h{n}.sock")
        data_dir = os.path.join(self.tmp, f"data{n}")
        fake = FakeSidecar(socket_path, http_path, decide)
        fake.hello = hello
        http = SidecarHttp(http_path)
        if sidecar:
            await fake.start()
            self.addAsyncCleanup(fake.stop)
        if sidecar_http:
            await http.start()
            self.addAsyncCleanup(http.stop)
        full_env: dict[str, Optional[str]] = {
            "AUTHSVC_SOCKET": socket_path,
            "AUTHSVC_DATA_DIR": data_dir,
            "AUTHSVC_DECISION_TIMEOUT_MS": str(timeout_ms) if timeout_ms is not None else "2000",
        }
        full_env.update(env or {})
        host = Host(self.tmp)
        app = host.build_app()
        name, plugin = load_plugin(app, full_env)
        self.addCleanup(unload_plugin, name)
        host.add_routes(app)
        if before_start is not None:
            before_start(app)  # a package imported after this one, changing the app before it starts
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self.addAsyncCleanup(runner.cleanup)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)
        self.addAsyncCleanup(session.close)
        stack = Stack(self.tmp, host, fake, http, app, plugin, port, session)
        if wait and sidecar:
            await stack.wait_ready()
        return stack
