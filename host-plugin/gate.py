"""The gate: the aiohttp middleware that asks the sidecar about every request.

Guarantees (DESIGN §2):
- no handler runs without a ``pass`` decision for this very request; any
  failure to get one (no connection, timeout, garbage, mismatch, an unknown
  action) answers 503 ``AUTHSVC_UNAVAILABLE``;
- the description names the route aiohttp actually matched, so the policy is
  decided on what the host will run, not on the path text;
- bodies are never read unless the decision asks (``need_body``, capped), and
  response bodies only for the named JSON filters; everything else streams.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from aiohttp import ClientError, ClientSession, DummyCookieJar, UnixConnector, web
from multidict import CIMultiDict, MultiDict
from yarl import URL

from .decision_client import DecisionClient, Unavailable
from .failsafe import unavailable_response
from .protocol import REQUEST_HEADERS

log = logging.getLogger("authsvc")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
     "transfer-encoding", "upgrade")
)
VERSION_HEADER = "X-Authsvc-Version"
_NO_AUTO_HEADERS = frozenset(("Content-Type", "User-Agent", "Accept", "Accept-Encoding"))
_CHUNK = 64 * 1024
_WANTED_HEADERS = frozenset(REQUEST_HEADERS)


def describe(request: web.Request) -> dict[str, Any]:
    """The request description of the protocol (shared/protocol.json)."""
    match_info = request.match_info
    resource = match_info.route.resource
    if resource is None:
        route = None
        http_exception = getattr(match_info, "http_exception", None)
        route_status = http_exception.status if http_exception is not None else 404
    else:
        kind = "static" if isinstance(resource, web.StaticResource) else "route"
        route = {"pattern": resource.canonical, "kind": kind}
        route_status = 200
    headers: dict[str, str] = {}
    for name, value in request.headers.items():  # one pass: a request has fewer headers than the list
        lower = name.lower()
        if lower in _WANTED_HEADERS:
            if lower not in headers:
                headers[lower] = value
            elif lower == "cookie":
                headers[lower] = f"{headers[lower]}; {value}"
    rel_url = request.rel_url
    return {
        "type": "decide",
        "method": request.method,
        "path": rel_url.raw_path,
        "query": rel_url.raw_query_string,
        "route": route,
        "route_status": route_status,
        "match_info": dict(match_info),
        "headers": headers,
        "peer": request.remote or "",
        "scheme": request.scheme,
    }


def respond(decision: dict[str, Any]) -> web.Response:
    headers = CIMultiDict()
    raw_headers = decision.get("headers") or {}
    pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    for name, value in pairs:
        headers.add(str(name), str(value))
    body = decision.get("body_text")
    return web.Response(
        status=int(decision["status"]),
        body=body.encode("utf-8") if isinstance(body, str) else None,
        headers=headers,
    )


class Gate:
    def __init__(
        self, client: DecisionClient, plugin_version: str, on_host_user: Callable[[str, str], None] | None = None,
    ) -> None:
        self.client = client
        self.version = plugin_version
        self._on_host_user = on_host_user
        self._proxy_session: ClientSession | None = None

        @web.middleware
        async def authsvc_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self.handle(request, handler)

        self.middleware = authsvc_gate

    async def handle(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            decision = await self.client.call(describe(request))
            action = decision.get("action")
            if action == "respond":
                return self._stamped(respond(decision))
            if action == "proxy":
                return await self._proxy(request)
            if action != "pass":
                log.error("authsvc: sidecar answered an unknown action %r; refusing", action)
                return self._stamped(unavailable_response())
            if decision.get("need_body") is None:
                prepared: Any = (self._edited(request, decision), decision)
            else:
                prepared = await self._prepare_pass(request, decision)
        except _DECISION_FAILURES as exc:
            return self._stamped(_refuse(request, exc))
        if isinstance(prepared, web.StreamResponse):
            return self._stamped(prepared)
        req, decision = prepared
        host_user = decision.get("host_user")
        if self._on_host_user is not None and isinstance(host_user, dict):
            user_id, name = host_user.get("id"), host_user.get("name")
            if isinstance(user_id, str) and isinstance(name, str):
                self._on_host_user(user_id, name)
        # The host handler runs outside the try above: its own errors are the host's, not ours.
        try:
            response = await handler(req)
        except web.HTTPException as exc:
            exc.headers[VERSION_HEADER] = self.version
            raise
        filter_spec = decision.get("filter")
        if filter_spec is not None:
            try:
                response = await self._filter(response, filter_spec)
            except _DECISION_FAILURES as exc:
                return self._stamped(_refuse(request, exc))
        return self._stamped(response)

    def _stamped(self, response: web.StreamResponse) -> web.StreamResponse:
        """Every answer the gate gives or passes on names the service version (SPEC §12)."""
        if not response.prepared:
            response.headers[VERSION_HEADER] = self.version
        return response

    async def _prepare_pass(
        self, request: web.Request, decision: dict[str, Any]
    ) -> tuple[web.Request, dict[str, Any]] | web.StreamResponse:
        """After a `need_body` pass: the edited request, and the decision whose filter applies (the body step may set one)."""
        req = self._edited(request, decision)
        outcome = await self._decide_on_body(req, decision["need_body"])
        if isinstance(outcome, web.StreamResponse):
            return outcome
        if "filter" not in outcome and "filter" in decision:
            outcome = {**outcome, "filter": decision["filter"]}
        return req, outcome

    @staticmethod
    def _edited(request: web.Request, decision: dict[str, Any]) -> web.Request:
        set_headers = decision.get("set_headers")
        strip_headers = decision.get("strip_headers")
        drop_query = decision.get("drop_query")
        if not (set_headers or strip_headers or drop_query):
            return request
        headers = request.headers.copy()
        for name in strip_headers or ():
            headers.popall(name, None)
        for name, value in (set_headers or {}).items():
            headers[name] = value
        if not drop_query:
            return request.clone(headers=headers)
        query = MultiDict(request.rel_url.query)
        for key in drop_query:
            query.popall(key, None)
        return request.clone(headers=headers, rel_url=request.rel_url.with_query(query))

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
        decision = await self.client.call(
            {"type": "body", "ctx": need_body.get("ctx"), "body_text": raw.decode("utf-8", "replace")}
        )
        action = decision.get("action")
        if action == "respond":
            return respond(decision)
        if action != "pass":
            return unavailable_response()
        body_text = decision.get("body_text")
        if isinstance(body_text, str):
            req._read_bytes = body_text.encode("utf-8")
        return decision

    async def _filter(self, response: web.StreamResponse, spec: dict[str, Any]) -> web.StreamResponse:
        if response.status >= 300 or not isinstance(response, web.Response) or response.prepared:
            if 200 <= response.status < 300:
                return unavailable_response()  # a 2xx we cannot read is a 2xx we cannot filter
            return response
        body = response.body
        if not isinstance(body, (bytes, bytearray)):
            return unavailable_response()
        answer = await self.client.call({
            "type": "filter", "name": spec.get("name"), "ctx": spec.get("ctx"), "status": response.status,
            "content_type": response.content_type, "body_text": bytes(body).decode("utf-8", "replace"),
        })
        action = answer.get("action")
        if action == "keep":
            return response
        if action == "replace":
            response.body = answer["body_text"].encode("utf-8")
            return response
        if action == "respond":
            return respond(answer)
        return unavailable_response()

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        session = self._proxy_session
        if session is None or session.closed:
            socket_path = self.client.sidecar_info.get("http_socket")
            if not socket_path:
                raise Unavailable("sidecar did not name its HTTP socket")
            session = self._proxy_session = ClientSession(
                connector=UnixConnector(path=socket_path), auto_decompress=False, cookie_jar=DummyCookieJar(),
            )
        headers = CIMultiDict()
        for name, value in request.headers.items():
            lower = name.lower()
            if lower not in HOP_BY_HOP and not lower.startswith("x-authsvc-"):
                headers.add(name, value)
        headers["x-authsvc-peer"] = request.remote or ""
        headers["x-authsvc-scheme"] = request.scheme
        url = URL("http://authsvc.sidecar" + request.raw_path, encoded=True)
        data = request.content if request.body_exists else None
        response: web.StreamResponse | None = None
        try:
            # skip_auto_headers: the sidecar sees the client's headers, not ones the client library would add
            async with session.request(
                request.method, url, headers=headers, data=data, allow_redirects=False, skip_auto_headers=_NO_AUTO_HEADERS,
            ) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        response.headers.add(name, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_chunked(_CHUNK):
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (OSError, ClientError) as exc:
            if response is None or not response.prepared:
                raise Unavailable(f"sidecar HTTP socket: {exc}") from None
            raise  # headers already sent: the client sees a cut connection, never a wrong answer

    async def close(self, _app: Any = None) -> None:
        if self._proxy_session is not None:
            await self._proxy_session.close()


# No answer, or an answer of the wrong shape: either way there is no decision, so refuse.
_DECISION_FAILURES = (Unavailable, KeyError, TypeError, ValueError, AttributeError)


def _refuse(request: web.Request, exc: Exception) -> web.Response:
    if isinstance(exc, Unavailable):
        log.warning("authsvc: refusing %s %s: %s", request.method, request.rel_url.raw_path, exc)
    else:
        log.error("authsvc: malformed sidecar answer (%s); refusing", type(exc).__name__)
    return unavailable_response()


def _too_large(max_bytes: int) -> web.Response:
    body = {"error": f"Request body larger than {max_bytes} bytes", "code": "PAYLOAD_TOO_LARGE", "statusCode": 413}
    return web.json_response(body, status=413)
