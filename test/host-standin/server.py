"""The stand-in's `server` module: `PromptServer`, its aiohttp app and its WebSocket hub.

What a custom node (the authsvc plugin above all) can rely on, as inside ComfyUI 0.3.64:
* `PromptServer.instance` exists from construction on, with `.app`, `.routes` (a
  RouteTableDef that custom nodes extend), `.loop`, `.prompt_queue`, `.sockets`;
* `app.middlewares` starts as [cache_control, origin-only check, handler counter] and may
  be edited while custom nodes import;
* `add_routes()` mounts `/internal` first, then every RouteDef of `.routes` under `/api`
  and then bare (custom nodes' routes land before /settings, as on the real host), then the
  `/extensions/<pkg>` statics and the web root (fixtures/routes.txt);
* the origin check and static headers were compared request by request with the real host;
* `send_sync` may be called from any thread; every message reaches the sockets in the
  order it was sent, through one queue drained by `publish_loop()`.
"""
from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import json
import logging
import mimetypes
import os
import struct
import sys
import urllib.parse
import uuid
from collections import deque
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

import comfy.cli_args
import comfyui_version
import execution
import host_files
import host_prompts
import host_userdata
import loader

args = comfy.cli_args.args

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")

# Browsers refuse module scripts served as text/javascript on some setups; the real host
# registers this type once at import, so every static .js answers with it.
mimetypes.add_type("application/javascript; charset=utf-8", ".js")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BinaryEventTypes:
    """First 4 bytes (big-endian) of a binary WebSocket frame."""
    PREVIEW_IMAGE, UNENCODED_PREVIEW_IMAGE, TEXT, PREVIEW_IMAGE_WITH_METADATA = 1, 2, 3, 4


# --------------------------------------------------------------------------- log capture
class _LogBuffer(logging.Handler):
    """Keeps the process's recent log lines for /internal/logs (ComfyUI shows its own there)."""

    def __init__(self, keep: int = 300) -> None:
        super().__init__(logging.INFO)
        self.entries: deque[dict[str, str]] = deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stamp = datetime.datetime.fromtimestamp(record.created).isoformat()
            self.entries.append({"t": stamp, "m": record.getMessage() + "\n"})
        except Exception:  # a log line must never break the caller
            pass


LOGS = _LogBuffer()
logging.getLogger().addHandler(LOGS)


# --------------------------------------------------------------------------- middlewares
# Names matter: the control API reports each middleware's __qualname__ and a test pins them.
_NO_CACHE_SUFFIXES = (".js", ".css", "index.json")


@web.middleware
async def cache_control(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The frontend's scripts must be revalidated on every load."""
    resp = await handler(request)
    if request.path.endswith(_NO_CACHE_SUFFIXES):
        resp.headers.setdefault("Cache-Control", "no-cache")
    return resp


def _is_loopback_name(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _split_host_header(value: str) -> tuple[str, Optional[int]]:
    """`Host` as (lower-cased name without IPv6 brackets, port or None)."""
    parts = urllib.parse.urlsplit("//" + value.strip())
    return (parts.hostname or ""), parts.port


def create_origin_only_middleware() -> Callable[..., Any]:
    """Refuse a browser's cross-site request to a loopback server (DNS rebinding / CSRF).

    Seen on the real host: only a loopback `Host` (localhost, 127/8, ::1) is protected; an
    Origin without a host part (`null`, `file://`) passes; names compare case-insensitively,
    ports only when both sides carry one; a malformed Origin port is a 500. The check runs
    before the bare 200 for OPTIONS, so a foreign preflight is refused too.
    """

    @web.middleware
    async def origin_only_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin, host = request.headers.get("Origin"), request.headers.get("Host")
        if origin is not None and host:
            host_name, host_port = _split_host_header(host)
            seen = urllib.parse.urlsplit(origin)
            origin_name, origin_port = seen.hostname, seen.port  # .port raises on junk -> 500
            if origin_name and _is_loopback_name(host_name):
                ports_differ = None not in (host_port, origin_port) and host_port != origin_port
                if origin_name != host_name or ports_differ:
                    logging.debug("refused cross-origin request: Origin %s, Host %s", origin, host)
                    return web.Response(status=web.HTTPForbidden.status_code)
        if request.method in ("OPTIONS",):
            return web.Response()  # preflight: answered here, no CORS headers
        return await handler(request)

    return origin_only_middleware


class HandlerCounter:
    """What reached a handler (after every outer middleware): the control API reads it."""

    def __init__(self, keep: int = 200) -> None:
        self.total = 0
        self.by_route: dict[str, int] = {}
        self.last: Optional[dict[str, Any]] = None
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)

    def reset(self) -> None:
        self.total = 0
        self.by_route = {}
        self.last = None
        self.recent.clear()

    @staticmethod
    def route_key(request: web.Request) -> str:
        resource = request.match_info.route.resource
        return f"{request.method} {resource.canonical if resource is not None else '<unmatched>'}"

    async def describe(self, request: web.Request, key: str) -> dict[str, Any]:
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            name = name.lower()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        record: dict[str, Any] = {
            "method": request.method, "route": key, "path": request.path,
            "raw_path": request.raw_path, "query_string": request.query_string,
            "match_info": dict(request.match_info), "headers": headers,
        }
        if request.content_type.startswith("multipart/"):
            record["body_streamed"] = True  # reading it here would break the upload handler
        else:
            body = await request.read()  # cached: the handler gets the same bytes
            record["body_sha256"] = hashlib.sha256(body).hexdigest()
            record["body_length"] = len(body)
        return record

    def middleware(self) -> Callable[..., Any]:
        @web.middleware
        async def standin_handler_counter(request: web.Request, handler: Handler) -> web.StreamResponse:
            key = self.route_key(request)
            self.total += 1
            self.by_route[key] = self.by_route.get(key, 0) + 1
            record = await self.describe(request, key)
            self.last = record
            self.recent.append(record)
            return await handler(request)

        return standin_handler_counter


# --------------------------------------------------------------------------- the server
class PromptServer:
    instance: "PromptServer"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        PromptServer.instance = self
        self.loop = loop
        self.supports: list[str] = ["custom_nodes_from_web"]
        self.address: Optional[str] = None
        self.port: Optional[int] = None
        self.client_session = None
        self.number = 0
        self.client_id: Optional[str] = None
        self.last_node_id: Optional[str] = None
        self.last_prompt_id: Optional[str] = None
        self.sockets: dict[str, web.WebSocketResponse] = {}
        self.socket_flags: dict[str, dict[str, Any]] = {}
        self._prompt_hooks: list[Callable[[dict], dict]] = []
        self._outbox: Optional[asyncio.Queue] = None
        self._pending: list[tuple[Any, Any, Optional[str]]] = []  # sent before publish_loop ran

        self.handler_counter = HandlerCounter()
        self.app = web.Application(
            client_max_size=args.max_upload_size * 1024 * 1024,
            middlewares=[cache_control, create_origin_only_middleware(), self.handler_counter.middleware()],
        )
        self.prompt_queue: Any = execution.PromptQueue(self)
        self.routes = web.RouteTableDef()
        self.internal_routes = web.RouteTableDef()
        # Declared now (so e.g. `user_manager` exists while custom nodes import) but mounted
        # after the custom nodes' routes, where the real host has them.
        self.late_routes = web.RouteTableDef()
        self._declare_routes()

    # ------------------------------------------------------------------ routes
    def _declare_routes(self) -> None:
        """The routes that exist before custom nodes load (they append theirs after these)."""
        r, internal = self.routes, self.internal_routes

        internal.get("/logs")(self._logs_text)
        internal.get("/logs/raw")(self._logs_raw)
        internal.patch("/logs/subscribe")(self._logs_subscribe)
        host_files.register_internal(self, internal)

        r.get("/ws")(self._websocket)
        r.get("/")(self._index)
        host_files.register_models(self, r)
        r.get("/extensions")(self._extensions)
        host_files.register_files(self, r)
        r.get("/system_stats")(self._system_stats)
        r.get("/features")(self._features)
        host_prompts.register(self, r)

        late = self.late_routes
        host_userdata.register(self, late)
        host_files.register_experiment_models(self, late)
        late.get("/workflow_templates")(self._empty_object)
        late.get("/i18n")(self._empty_object)

    def add_routes(self) -> None:
        internal = web.Application()
        internal.add_routes(self.internal_routes)
        self.app.add_subapp("/internal", internal)

        # every route twice: the /api twin first (the frontend's path), then the bare one
        twins: list[web.AbstractRouteDef] = []
        defs = [*self.routes, *self.late_routes]
        for d in defs:
            if isinstance(d, web.RouteDef):
                twins.append(web.RouteDef(d.method, "/api" + d.path, d.handler, d.kwargs))
            elif isinstance(d, web.StaticDef):
                twins.append(web.StaticDef("/api" + d.prefix, d.path, d.kwargs))
        self.app.add_routes(twins)
        self.app.router.add_routes(defs)

        for pkg, web_dir in loader.EXTENSION_WEB_DIRS.items():
            self.app.add_routes([web.static("/extensions/" + pkg, web_dir)])
        self.app.add_routes([web.static("/", args.front_end_root)])

    # ------------------------------------------------------------------ handlers (A)
    async def _index(self, request: web.Request) -> web.StreamResponse:
        page = web.FileResponse(os.path.join(args.front_end_root, "index.html"))
        # the page names the current bundle: a browser must never keep a stale copy
        page.headers["Cache-Control"] = "no-cache"
        page.headers["Pragma"] = "no-cache"
        page.headers["Expires"] = "0"
        return page

    async def _extensions(self, request: web.Request) -> web.Response:
        found: list[str] = []
        front_ext = os.path.join(args.front_end_root, "extensions")
        for rel in _js_files(front_ext):
            found.append("/extensions/" + rel)
        for pkg, web_dir in loader.EXTENSION_WEB_DIRS.items():
            for rel in _js_files(web_dir):
                found.append(f"/extensions/{pkg}/{rel}")
        return web.json_response(found)

    async def _system_stats(self, request: web.Request) -> web.Response:
        with open(os.path.join(FIXTURES, "system_stats.json"), encoding="utf-8") as f:
            stats = json.load(f)
        system = stats["system"]
        system["os"] = os.name
        system["python_version"] = sys.version
        system["embedded_python"] = os.path.basename(os.path.dirname(sys.executable)) == "python_embeded"
        system["argv"] = list(sys.argv)
        system["comfyui_version"] = comfyui_version.__version__
        return web.json_response(stats)

    def feature_flags(self) -> dict[str, Any]:
        return {"supports_preview_metadata": True, "max_upload_size": args.max_upload_size * 1024 * 1024}

    async def _features(self, request: web.Request) -> web.Response:
        return web.json_response(self.feature_flags())

    async def _empty_object(self, request: web.Request) -> web.Response:
        return web.json_response({})  # no templates, no translations installed

    async def _logs_text(self, request: web.Request) -> web.Response:
        return web.json_response("".join(e["t"] + " - " + e["m"] for e in LOGS.entries))

    async def _logs_raw(self, request: web.Request) -> web.Response:
        return web.json_response({"entries": list(LOGS.entries), "size": {"cols": 80, "rows": 24}})

    async def _logs_subscribe(self, request: web.Request) -> web.Response:
        await request.json()  # accepted; the stand-in does not stream logs over the socket
        return web.Response()

    # ------------------------------------------------------------------ WebSocket
    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        sid = request.rel_url.query.get("clientId") or uuid.uuid4().hex
        # a reused id takes over; the older socket stays open but no longer addressed
        self.sockets[sid] = ws
        try:
            hello = {"status": self.get_queue_info(), "sid": sid}
            await self.send("status", hello, sid)
            async for msg in ws:
                if msg.type == web.WSMsgType.TEXT:
                    await self._on_client_text(sid, msg.data)
                elif msg.type == web.WSMsgType.ERROR:
                    logging.warning("ws %s closed with %s", sid, ws.exception())
        finally:
            # by id, as ComfyUI does: this may drop a newer socket that reused the id
            self.sockets.pop(sid, None)
            self.socket_flags.pop(sid, None)
        return ws

    async def _on_client_text(self, sid: str, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            logging.debug("ws %s: ignored non-JSON text", sid)
            return
        if isinstance(message, dict) and message.get("type") == "feature_flags":
            data = message.get("data")
            if isinstance(data, dict):  # the real host ignores any other shape silently
                self.socket_flags[sid] = data
                await self.send("feature_flags", self.feature_flags(), sid)

    # ------------------------------------------------------------------ sending
    def _targets(self, sid: Optional[str]) -> list[web.WebSocketResponse]:
        if sid is None:
            return list(self.sockets.values())
        ws = self.sockets.get(sid)
        return [ws] if ws is not None else []

    async def send_json(self, event: Any, data: Any, sid: Optional[str] = None) -> None:
        text = json.dumps({"type": event, "data": data})
        for ws in self._targets(sid):
            try:
                await ws.send_str(text)
            except (ConnectionError, RuntimeError) as exc:  # a socket closing under us
                logging.debug("ws send failed: %r", exc)

    async def send_bytes(self, event: int, data: bytes, sid: Optional[str] = None) -> None:
        frame = struct.pack(">I", event) + bytes(data)
        for ws in self._targets(sid):
            try:
                await ws.send_bytes(frame)
            except (ConnectionError, RuntimeError) as exc:
                logging.debug("ws send failed: %r", exc)

    async def send(self, event: Any, data: Any, sid: Optional[str] = None) -> None:
        if isinstance(event, int) and isinstance(data, (bytes, bytearray, memoryview)):
            await self.send_bytes(event, bytes(data), sid)
        elif isinstance(event, int):
            # image previews need PIL, which the stand-in does not have
            logging.debug("binary event %s with %s payload not sent", event, type(data).__name__)
        else:
            await self.send_json(event, data, sid=sid)

    def send_sync(self, event: Any, data: Any, sid: Optional[str] = None) -> None:
        """Queue a message from any thread; publish_loop sends it on the server loop."""
        item = (event, data, sid)
        try:
            self.loop.call_soon_threadsafe(self._enqueue, item)
        except RuntimeError:  # the loop is already closed: a late worker message, dropped
            logging.debug("server loop closed; %r not sent", event)

    def _enqueue(self, item: tuple[Any, Any, Optional[str]]) -> None:
        if self._outbox is None:
            self._pending.append(item)
        else:
            self._outbox.put_nowait(item)

    async def publish_loop(self) -> None:
        self._outbox = asyncio.Queue()
        for item in self._pending:
            self._outbox.put_nowait(item)
        self._pending.clear()
        while True:
            event, data, sid = await self._outbox.get()
            try:
                await self.send(event, data, sid)
            except Exception:
                logging.exception("could not publish %r", event)

    def send_progress_text(self, text: str, node_id: str, sid: Optional[str] = None) -> None:
        node = str(node_id).encode("utf-8")
        payload = struct.pack(">I", len(node)) + node + str(text).encode("utf-8")
        self.send_sync(BinaryEventTypes.TEXT, payload, sid)

    # ------------------------------------------------------------------ queue
    def get_queue_info(self) -> dict[str, Any]:
        return {"exec_info": {"queue_remaining": self.prompt_queue.get_tasks_remaining()}}

    def queue_updated(self) -> None:
        self.send_sync("status", {"status": self.get_queue_info()})

    def add_on_prompt_handler(self, handler: Callable[[dict], dict]) -> None:
        self._prompt_hooks.append(handler)

    def trigger_on_prompt(self, json_data: dict) -> dict:
        for handler in self._prompt_hooks:
            try:
                json_data = handler(json_data)
            except Exception as exc:
                # a broken handler must not block prompts; ComfyUI only logs it too
                logging.warning("on_prompt handler %s raised %s: %s", getattr(handler, "__name__", handler),
                                type(exc).__name__, exc)
        return json_data

    async def setup(self) -> None:
        """Nothing to open: the stand-in makes no outgoing HTTP calls (client_session stays None)."""


def _js_files(root: str) -> list[str]:
    """`.js` files below root, relative with `/`, sorted."""
    out: list[str] = []
    if not os.path.isdir(root):
        return out
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".js"):
                out.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(out)

