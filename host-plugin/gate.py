"""The gate: the aiohttp middleware that asks the sidecar about every request, and its steps.

Guarantees (DESIGN §2):
- no handler runs without a ``pass`` decision for this very request; any
  failure to get one (no connection, timeout, garbage, mismatch, an unknown
  action) answers 503 ``AUTHSVC_UNAVAILABLE``;
- the description names the route aiohttp actually matched (describe.py), so the
  policy is decided on what the host will run, not on the path text;
- bodies are never read unless the decision asks (``need_body``, capped), and
  response bodies only for the named JSON filters (response_filter.py);
  everything else streams;
- every answer the gate gives or passes on names the service version (SPEC §12).

The steps of one request: describe, decide (or a kept decision), then ``respond``,
``proxy`` (proxy.py), or ``pass``: the request's edits (request_edit.py), the body or
form step when asked, the handler, the filter step when asked; the decision's
``response_headers`` are added to the host's answer as it is prepared (``on_response_prepare``).
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from aiohttp import ClientError, web
from multidict import MultiDict, MultiDictProxy

from .answers import MalformedAnswer, checked, checked_decision, respond
from .connection import Unavailable
from .decision_client import DecisionClient
from .describe import described, description_fields
from .failsafe import unavailable_response
from .proxy import SidecarProxy
from .preview_check import PreviewCheck
from .queue_status import QueueStatus
from .refusal_log import RefusalLog
from .request_edit import edited
from .response_filter import ResponseFilter
from .sockets import OpenSockets

log = logging.getLogger("authsvc")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

VERSION_HEADER = "X-Authsvc-Version"
# the decision's response_headers, on the request whose answer gets them
_RESPONSE_HEADERS_KEY = "authsvc_response_headers"
_CHUNK = 64 * 1024


class Gate:
    def __init__(
        self, client: DecisionClient, plugin_version: str, on_host_user: Callable[[str, str], None] | None = None,
    ) -> None:
        self.client = client
        self.version = plugin_version
        self._on_host_user = on_host_user
        self.refusals = RefusalLog()  # per gate: "before the first ready" is this gate's start
        self.queue_status = QueueStatus()
        client.push_handlers["queue_counts"] = self.queue_status.pushed
        self.previews = PreviewCheck(client)
        self.sockets = OpenSockets(client, self.queue_status, self.previews)
        self.proxy = SidecarProxy(client)
        self.filter = ResponseFilter(client)
        # called after the handler of a pass with report_prompts (a delete in the queue or history)
        self.on_prompts_changed: Callable[[], None] = lambda: None

        @web.middleware
        async def authsvc_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self.handle(request, handler)

        self.middleware = authsvc_gate

    def attach(self, app: web.Application) -> None:
        """Hooks the gate needs beyond the middleware: seeing WebSocket responses as they open."""
        app.on_response_prepare.append(self._on_response_prepare)
        app.on_cleanup.append(self.close)

    async def close(self, _app: Any = None) -> None:
        await self.proxy.close()

    async def handle(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            fields, size = description_fields(request)
            decision = await self.client.decide(fields, size, described, checked_decision)
            refusals = self.refusals
            if refusals.cause is not None or refusals.starting:
                refusals.recovered()
            action = decision.get("action")
            if action == "respond":
                return self._stamped(respond(decision))
            if action == "proxy":
                return await self.proxy.forward(request)
            if decision.get("need_body") is None and decision.get("need_form") is None:
                prepared: Any = (edited(request, decision), decision)
            else:
                prepared = await self._prepare_pass(request, decision)
        except Unavailable as exc:
            return self._stamped(_refuse(request, exc, self.refusals))
        except web.HTTPException as exc:
            # the host's own limits while the gate read a form for it (413 over client_max_size)
            exc.headers[VERSION_HEADER] = self.version
            raise
        except (OSError, ClientError):
            raise  # a proxied answer cut after its headers: the client sees a cut connection
        except Exception:
            if request.transport is None:
                # the client left while its decision was pending (clone() needs the transport): no bug
                return self._stamped(unavailable_response(request))
            log.exception("authsvc: bug in the plugin while deciding %s %s; refusing", request.method, request.rel_url.raw_path)
            return self._stamped(unavailable_response(request))
        if isinstance(prepared, web.StreamResponse):
            return self._stamped(prepared)
        req, decision = prepared
        host_user = decision.get("host_user")
        if self._on_host_user is not None and isinstance(host_user, dict):
            user_id, name = host_user.get("id"), host_user.get("name")
            if isinstance(user_id, str) and isinstance(name, str):
                self._on_host_user(user_id, name)
        ws_tag = self.sockets.mark(req, decision)
        extra = decision.get("response_headers")
        if extra is not None:
            # added as the answer is prepared, whoever prepares it: aiohttp after the handler, the
            # handler itself (a stream), or aiohttp for an HTTPException the handler raised (on the
            # request it was given, which is this one unless the edit made a copy)
            req[_RESPONSE_HEADERS_KEY] = extra
            request[_RESPONSE_HEADERS_KEY] = extra
        # The host handler runs outside the try above: its own errors are the host's, not ours.
        try:
            response = await handler(req)
        except web.HTTPException as exc:
            exc.headers[VERSION_HEADER] = self.version
            raise
        finally:
            if ws_tag is not None:
                self.sockets.handler_returned(req, ws_tag)
            if decision.get("report_prompts") is True:
                self.on_prompts_changed()
        filter_spec = decision.get("filter")
        if filter_spec is not None:
            try:
                response = await self.filter.apply(request, response, filter_spec)
            except Unavailable as exc:
                return self._stamped(_refuse(request, exc, self.refusals))
            except Exception:
                log.exception("authsvc: bug in the plugin while filtering %s; refusing", request.rel_url.raw_path)
                return self._stamped(unavailable_response(request))
        return self._stamped(response)

    async def _on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """Every answer's last moment before its headers are sent: the decision's ``response_headers``
        (a user's file reaches the browser inert), then the WebSocket bookkeeping (sockets.py)."""
        extra = request.get(_RESPONSE_HEADERS_KEY)
        if extra is not None:
            # added, never replacing the host's own: two Content-Security-Policy headers are both enforced
            headers = response.headers
            for name, value in extra.items():
                headers.add(name, value)
        if isinstance(response, web.WebSocketResponse):  # the only answers the socket bookkeeping reads
            await self.sockets.on_response_prepare(request, response)

    def _stamped(self, response: web.StreamResponse) -> web.StreamResponse:
        """Every answer the gate gives or passes on names the service version (SPEC §12)."""
        if not response.prepared:
            response.headers[VERSION_HEADER] = self.version
        return response

    async def _prepare_pass(
        self, request: web.Request, decision: dict[str, Any]
    ) -> tuple[web.Request, dict[str, Any]] | web.StreamResponse:
        """After a `need_body`/`need_form` pass: the edited request, and the decision whose filter applies (the second step may set one)."""
        req = edited(request, decision)
        if decision.get("need_body") is not None:
            outcome = await self._decide_on_body(req, decision["need_body"])
        else:
            outcome = await self._decide_on_form(req, decision["need_form"])
        if isinstance(outcome, web.StreamResponse):
            return outcome
        for key in ("filter", "ws_tag", "ws_entry", "ws_queue_owner", "host_user", "report_prompts", "response_headers"):
            if key not in outcome and key in decision:
                outcome = {**outcome, key: decision[key]}
        return req, outcome

    async def _decide_on_body(self, req: web.Request, need_body: dict[str, Any]) -> dict[str, Any] | web.StreamResponse:
        max_bytes = int(need_body["max_bytes"])
        if req.content_length is not None and req.content_length > max_bytes:
            return _too_large(max_bytes)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await req.content.read(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                return _too_large(max_bytes)
            chunks.append(chunk)
        raw = b"".join(chunks)
        req._read_bytes = raw  # the handler's read()/json() reuse these bytes (HOST.md)
        decision, payload = await self.client.exchange({"type": "body", "ctx": need_body.get("ctx")}, raw)
        checked(decision, "body")
        action = decision.get("action")
        if action == "respond":
            return respond(decision)
        if action != "pass":
            return unavailable_response()
        if decision.get("body_replaced") is True:
            req._read_bytes = payload  # the sidecar's edit: the client's bytes with its keys set, never re-serialised
        return decision

    async def _decide_on_form(self, req: web.Request, need_form: dict[str, Any]) -> dict[str, Any] | web.StreamResponse:
        """Parses a multipart form the way the handler will (``post()``: files spooled to disk by aiohttp,
        never held in memory) on the very request the handler gets, which reuses it; the sidecar sees the
        text fields and the file names, never file contents."""
        form = await req.post()
        fields: dict[str, str] = {}
        files: dict[str, str] = {}
        for name, value in form.items():
            if isinstance(value, (bytes, bytearray)):
                # a part without a file name and of a content type other than text: the handler reads
                # it as bytes (json.loads takes them), so the sidecar must see it too, as text
                try:
                    value = bytes(value).decode("utf-8")
                except UnicodeDecodeError:
                    return _bad_form("a form field is neither text nor a file")
            if isinstance(value, str):
                fields.setdefault(name, value)
            elif hasattr(value, "filename"):
                files.setdefault(name, str(value.filename or ""))
            else:
                return _bad_form("a form field is neither text nor a file")
        decision = checked(await self.client.call({"type": "form", "ctx": need_form.get("ctx"), "fields": fields, "files": files}), "form")
        action = decision.get("action")
        if action == "respond":
            return respond(decision)
        if action != "pass":
            return unavailable_response()
        set_fields = decision.get("set_fields")
        if set_fields:
            # the sidecar's edit of text fields (an upload's subfolder: the uploader's own folder);
            # the handler's post() returns this parsed form, so it reads the edited values
            form = MultiDict(form)
            for name, value in set_fields.items():
                form[name] = value
            req._post = MultiDictProxy(form)
        return decision


def _refuse(request: web.Request, exc: Unavailable, refusals: RefusalLog) -> web.Response:
    if isinstance(exc, MalformedAnswer):
        log.error("authsvc: malformed sidecar answer (%s); refusing %s %s", exc, request.method, request.rel_url.raw_path)
    else:
        refusals.refused(str(exc))
    return unavailable_response(request)


def _too_large(max_bytes: int) -> web.Response:
    body = {"error": f"Request body larger than {max_bytes} bytes", "code": "PAYLOAD_TOO_LARGE", "statusCode": 413}
    return web.json_response(body, status=413)


def _bad_form(message: str) -> web.Response:
    """The gate's own 400 for a form it cannot describe to the sidecar (SPEC error shape)."""
    return web.json_response({"error": message, "code": "VALIDATION_FAILED", "statusCode": 400}, status=400)
