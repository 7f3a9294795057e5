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

import asyncio
import json
import logging
import time
from typing import Any, Awaitable, Callable

from aiohttp import ClientError, ClientSession, DummyCookieJar, UnixConnector, web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy
from yarl import URL

from .connection import Unavailable
from .decision_client import DecisionClient
from .failsafe import unavailable_response
from .protocol import MAX_FRAME_BYTES, REQUEST_HEADERS
from .queue_status import QueueStatus

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
_WS_TAG_KEY = "authsvc_ws_tag"
_WS_KEY = "authsvc_ws"
_WS_ENTRY_KEY = "authsvc_ws_entry"
_WS_QUEUE_OWNER_KEY = "authsvc_ws_queue_owner"


# description_fields results by what they are computed from (see there); at most this many,
# none from more than _RAW_MEMO_CHARS characters of header lines
_RAW_MEMO: dict[tuple[Any, ...], tuple[tuple[Any, ...], int]] = {}
_RAW_MEMO_MAX = 512
_RAW_MEMO_CHARS = 16 * 1024


def description_fields(request: web.Request) -> tuple[tuple[Any, ...], int]:
    """The request description (shared/protocol.json) as a tuple of its fields, in the order of
    ``described``, and the number of characters of its text fields. The tuple is what a kept
    decision is found by: two requests with equal tuples have equal descriptions, so building
    and encoding the description waits until the sidecar is really asked.

    The fields are a function of the method, the raw path and query, the matched route, the
    header lines as received, the peer and the scheme; a client on a keep-alive connection
    sends the very same lines again and again, so the result is remembered by those (the
    header loop below was a third of the gate's own Python per request)."""
    match_info = request.match_info
    resource = match_info.route.resource
    rel_url = request.rel_url
    raw_headers = request.raw_headers
    raw_key = None
    if resource is not None:  # an unmatched path has a new route object every time
        raw_key = (request.method, rel_url.raw_path, rel_url.raw_query_string, match_info.route, raw_headers,
                   request.remote, request.scheme)
        found = _RAW_MEMO.get(raw_key)
        if found is not None:
            return found
    result = _description_fields(request, match_info, resource)
    if raw_key is not None and sum(len(k) + len(v) for k, v in raw_headers) <= _RAW_MEMO_CHARS:
        if len(_RAW_MEMO) >= _RAW_MEMO_MAX:
            _RAW_MEMO.clear()
        _RAW_MEMO[raw_key] = result
    return result


def _description_fields(request: web.Request, match_info: Any, resource: Any) -> tuple[tuple[Any, ...], int]:
    if resource is None:
        route = None
        http_exception = getattr(match_info, "http_exception", None)
        route_status = http_exception.status if http_exception is not None else 404
    else:
        route = (resource.canonical, "static" if isinstance(resource, web.StaticResource) else "route")
        route_status = 200
    headers: dict[str, str] = {}
    size = 0
    for name, value in request.headers.items():  # one pass: a request has fewer headers than the list
        lower = name.lower()
        if lower in _WANTED_HEADERS:
            size += len(lower) + len(value)
            if lower not in headers:
                headers[lower] = value
            else:
                # every line of a repeated header, in order, joined as RFC 9110 combines them: a proxy's
                # appended X-Forwarded-For line must never hide behind the client's first one
                headers[lower] = f"{headers[lower]}{'; ' if lower == 'cookie' else ', '}{value}"
    rel_url = request.rel_url
    path, query = rel_url.raw_path, rel_url.raw_query_string
    fields = (request.method, path, query, route, route_status, tuple(match_info.items()), tuple(headers.items()),
              request.remote or "", request.scheme)
    return fields, size + len(path) + len(query)


def described(fields: tuple[Any, ...]) -> dict[str, Any]:
    """The description message of ``description_fields``."""
    method, path, query, route, route_status, match_info, headers, peer, scheme = fields
    return {
        "type": "decide",
        "method": method,
        "path": path,
        "query": query,
        "route": None if route is None else {"pattern": route[0], "kind": route[1]},
        "route_status": route_status,
        "match_info": dict(match_info),
        "headers": dict(headers),
        "peer": peer,
        "scheme": scheme,
    }


def describe(request: web.Request) -> dict[str, Any]:
    """The request description of the protocol (shared/protocol.json)."""
    return described(description_fields(request)[0])


def _replace_headers(request: web.Request, headers: CIMultiDict) -> bool:
    """Gives ``request`` these headers in place: what ``clone(headers=)`` does to the headers, without
    building a second Request (a third of the gate's own Python per request). aiohttp 3.8 to 3.13 keep
    them in ``_headers`` and ``_message`` and cache ``headers``/``raw_headers`` in ``_cache``; before
    the gate runs nothing else derived from the headers is cached (the description reads ``headers``
    only). Where this aiohttp looks otherwise: False, and the caller clones."""
    cache = getattr(request, "_cache", None)
    message = getattr(request, "_message", None)
    if not isinstance(cache, dict) or not hasattr(message, "_replace") or not hasattr(request, "_headers"):
        return False
    proxy = CIMultiDictProxy(headers)
    request._message = message._replace(headers=proxy, raw_headers=tuple((k.encode("utf-8"), v.encode("utf-8")) for k, v in headers.items()))
    request._headers = proxy
    cache.pop("headers", None)
    cache.pop("raw_headers", None)
    return True


# the headers the gate edits in place: nothing aiohttp caches is derived from them (host, url,
# cookies, forwarded and scheme come from others); an edit of any other header clones the request
_IN_PLACE_SAFE = frozenset(("comfy-user", "authorization"))


# what a filter message's JSON may take of a frame besides the host's answer
_FRAME_ROOM = 64 * 1024


def _bad_form(message: str) -> web.Response:
    """The gate's own 400 for a form it cannot describe to the sidecar (SPEC error shape)."""
    return web.json_response({"error": message, "code": "VALIDATION_FAILED", "statusCode": 400}, status=400)


def narrow_prompts(body: bytes, keep: set[str]) -> bytes | None:
    """A /queue or /history answer of the host with only the prompts in ``keep``, serialised as the
    host serialises it (``json.dumps``, as aiohttp's ``json_response``); None for another shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("queue_running"), list) and isinstance(data.get("queue_pending"), list):
        for name in ("queue_running", "queue_pending"):
            data[name] = [item for item in data[name] if isinstance(item, list) and len(item) > 1 and item[1] in keep]
    else:
        data = {k: v for k, v in data.items() if k in keep}
    return json.dumps(data).encode("utf-8")


class MalformedAnswer(Unavailable):
    """The sidecar answered something of the wrong shape: no decision, so the request is refused."""


_STEP_ACTIONS = {
    "decide": ("pass", "respond", "proxy"),
    "body": ("pass", "respond"),
    "form": ("pass", "respond"),
    "filter": ("keep", "replace", "respond", "narrow"),
}


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_pair_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in value)


def checked(answer: dict[str, Any], step: str) -> dict[str, Any]:
    """The sidecar's answer to one step, once its shape is right; MalformedAnswer otherwise.

    Everything the gate later reads from an answer is checked here, at the boundary, so an
    exception after this point is a bug of the plugin's own, and is logged as one."""
    action = answer.get("action")
    if action not in _STEP_ACTIONS[step]:
        raise MalformedAnswer(f"{step}: unknown action {action!r}")
    if action == "respond":
        status = answer.get("status")
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
            raise MalformedAnswer(f"{step}: respond without a valid status")
        headers = answer.get("headers")
        if headers is not None and not _is_str_map(headers) and not _is_pair_list(headers):
            raise MalformedAnswer(f"{step}: respond headers must be [name, value] pairs")
        if "body_text" in answer and not isinstance(answer["body_text"], str):
            raise MalformedAnswer(f"{step}: body_text must be a string")
    elif action == "pass":
        for key, ok in (("set_headers", _is_str_map), ("strip_headers", _is_str_list), ("drop_query", _is_str_list), ("set_fields", _is_str_map)):
            if key in answer and not ok(answer[key]):
                raise MalformedAnswer(f"{step}: {key} has the wrong shape")
        need_body = answer.get("need_body")
        if need_body is not None and not (isinstance(need_body, dict) and isinstance(need_body.get("max_bytes"), int)):
            raise MalformedAnswer(f"{step}: need_body needs max_bytes")
        for key in ("need_form", "filter", "host_user"):
            if answer.get(key) is not None and not isinstance(answer[key], dict):
                raise MalformedAnswer(f"{step}: {key} must be an object")
        if "ws_tag" in answer and not isinstance(answer["ws_tag"], str):
            raise MalformedAnswer(f"{step}: ws_tag must be a string")
        if "ws_entry" in answer and not isinstance(answer["ws_entry"], dict):
            raise MalformedAnswer(f"{step}: ws_entry must be an object")
        if "ws_queue_owner" in answer and not isinstance(answer["ws_queue_owner"], str):
            raise MalformedAnswer(f"{step}: ws_queue_owner must be a string")
        if "report_prompts" in answer and answer["report_prompts"] is not True:
            raise MalformedAnswer(f"{step}: report_prompts must be true")
    elif action == "narrow" and not _is_str_list(answer.get("keep_prompt_ids")):
        raise MalformedAnswer(f"{step}: narrow needs keep_prompt_ids")
    return answer


def _checked_decide(answer: dict[str, Any]) -> dict[str, Any]:
    return checked(answer, "decide")


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
        # open WebSockets by the tag of their pass decision, so the sidecar can close them (close_ws)
        self._sockets: dict[str, set[web.WebSocketResponse]] = {}
        # what the sidecar said about each open socket, handed back to it after a restart
        self._socket_entries: dict[str, dict[str, Any]] = {}
        self._memos = FilterMemo()
        self.refusals = RefusalLog()  # per gate: "before the first ready" is this gate's start
        client.push_handlers["close_ws"] = self._close_sockets
        self.queue_status = QueueStatus()
        client.push_handlers["queue_counts"] = self.queue_status.pushed
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

    async def handle(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            fields, size = description_fields(request)
            decision = await self.client.decide(fields, size, described, _checked_decide)
            refusals = self.refusals
            if refusals.cause is not None or refusals.starting:
                refusals.recovered()
            action = decision.get("action")
            if action == "respond":
                return self._stamped(respond(decision))
            if action == "proxy":
                return await self._proxy(request)
            if decision.get("need_body") is None and decision.get("need_form") is None:
                prepared: Any = (self._edited(request, decision), decision)
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
        ws_tag = decision.get("ws_tag")
        if isinstance(ws_tag, str):
            req[_WS_TAG_KEY] = ws_tag
            entry = decision.get("ws_entry")
            if isinstance(entry, dict):
                req[_WS_ENTRY_KEY] = entry
            queue_owner = decision.get("ws_queue_owner")
            if isinstance(queue_owner, str):
                req[_WS_QUEUE_OWNER_KEY] = queue_owner
        # The host handler runs outside the try above: its own errors are the host's, not ours.
        try:
            response = await handler(req)
        except web.HTTPException as exc:
            exc.headers[VERSION_HEADER] = self.version
            raise
        finally:
            if isinstance(ws_tag, str):
                self._forget_socket(req, ws_tag)
            if decision.get("report_prompts") is True:
                self.on_prompts_changed()
        filter_spec = decision.get("filter")
        if filter_spec is not None:
            try:
                response = await self._filter(request, response, filter_spec)
            except Unavailable as exc:
                return self._stamped(_refuse(request, exc, self.refusals))
            except Exception:
                log.exception("authsvc: bug in the plugin while filtering %s; refusing", request.rel_url.raw_path)
                return self._stamped(unavailable_response(request))
        return self._stamped(response)

    def _stamped(self, response: web.StreamResponse) -> web.StreamResponse:
        """Every answer the gate gives or passes on names the service version (SPEC §12)."""
        if not response.prepared:
            response.headers[VERSION_HEADER] = self.version
        return response

    async def _prepare_pass(
        self, request: web.Request, decision: dict[str, Any]
    ) -> tuple[web.Request, dict[str, Any]] | web.StreamResponse:
        """After a `need_body`/`need_form` pass: the edited request, and the decision whose filter applies (the second step may set one)."""
        req = self._edited(request, decision)
        if decision.get("need_body") is not None:
            outcome = await self._decide_on_body(req, decision["need_body"])
        else:
            outcome = await self._decide_on_form(req, decision["need_form"])
        if isinstance(outcome, web.StreamResponse):
            return outcome
        for key in ("filter", "ws_tag", "ws_entry", "ws_queue_owner", "host_user", "report_prompts"):
            if key not in outcome and key in decision:
                outcome = {**outcome, key: decision[key]}
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
            if _IN_PLACE_SAFE.issuperset(n.lower() for n in (*(strip_headers or ()), *(set_headers or {}))) and _replace_headers(request, headers):
                return request
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
            edited = MultiDict(form)
            for name, value in set_fields.items():
                edited[name] = value
            req._post = MultiDictProxy(edited)
        return decision

    async def _filter(self, request: web.Request, response: web.StreamResponse, spec: dict[str, Any]) -> web.StreamResponse:
        # an error answer is filtered only when the filter asks for them too (`errors`: a prompt's
        # validation error lists what the host knows); a readable one, that is
        wants_errors = spec.get("errors") is True
        if (response.status >= 300 and not wants_errors) or not isinstance(response, web.Response) or response.prepared:
            if 200 <= response.status < 300:
                return unavailable_response()  # a 2xx we cannot read is a 2xx we cannot filter
            return response
        body = response.body
        if not isinstance(body, (bytes, bytearray)):
            if wants_errors and response.status >= 300:
                return response  # an error of the host's own without a body of bytes: nothing listed
            return unavailable_response()
        memo = spec.get("memo")
        key = (self.client.generation, str(spec.get("name")), request.rel_url.raw_path_qs, memo) if isinstance(memo, str) else None
        reused = self._memos.get(key, body) if key is not None else None
        if reused is not None:
            action, payload = reused
        else:
            sent = bytes(body)
            message = {
                "type": "filter", "name": spec.get("name"), "ctx": spec.get("ctx"), "status": response.status,
                "content_type": response.content_type,
            }
            if len(sent) > MAX_FRAME_BYTES - _FRAME_ROOM:
                # too large for a frame (a queue of large prompts): the sidecar names the prompts the
                # caller may see, and only those travel (narrowed here, serialised as the host does)
                answer, payload = await self.client.exchange({**message, "too_large": True})
                checked(answer, "filter")
                if answer.get("action") not in ("narrow", "respond"):
                    return unavailable_response()  # nothing the sidecar has not seen passes unfiltered
                if answer.get("action") == "narrow":
                    narrowed = narrow_prompts(sent, set(answer["keep_prompt_ids"]))
                    if narrowed is None:
                        return unavailable_response()
                    if answer.get("final") is True:
                        response.body = narrowed  # the sidecar's whole edit: nothing else to change
                        return response
                    if len(narrowed) > MAX_FRAME_BYTES - _FRAME_ROOM:
                        return unavailable_response()
                    response.body = narrowed  # a later keep keeps the narrowed answer, never the whole one
                    sent, key = narrowed, None
                    answer, payload = await self.client.exchange(message, sent)
                    checked(answer, "filter")
            else:
                answer, payload = await self.client.exchange(message, sent)
                checked(answer, "filter")
            action = answer.get("action")
            if key is not None and answer.get("memo") == memo and action in ("keep", "replace") and response.status == 200:
                self._memos.put(key, sent, action, payload)
        if action == "keep":
            return response
        if action == "replace":
            response.body = payload
            return response
        if action == "respond":
            return respond(answer)
        return unavailable_response()

    async def _on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        tag = request.get(_WS_TAG_KEY)
        if isinstance(tag, str) and isinstance(response, web.WebSocketResponse):
            self._sockets.setdefault(tag, set()).add(response)
            request[_WS_KEY] = response
            self.queue_status.socket_opened(response, request.get(_WS_QUEUE_OWNER_KEY))
            entry = request.get(_WS_ENTRY_KEY)
            if isinstance(entry, dict):
                self._socket_entries[tag] = entry

    def _forget_socket(self, req: web.Request, tag: str) -> None:
        ws = req.get(_WS_KEY)
        if ws is not None:
            self.queue_status.socket_closed(ws)
        sockets = self._sockets.get(tag)
        if sockets is not None and ws is not None:
            sockets.discard(ws)
            if not sockets:
                del self._sockets[tag]
                self._socket_entries.pop(tag, None)
        # always, even when the upgrade never happened: the sidecar then stops watching the tag
        self.client.send_event({"name": "ws_closed", "t": time.time(), "data": {"tag": tag}})

    def hello_fields(self) -> dict[str, Any]:
        """For the hello after a (re)connect: the open sockets, so a restarted sidecar still
        closes them when their credential ends."""
        return {"sockets": list(self._socket_entries.values())}

    def _close_sockets(self, message: dict[str, Any]) -> None:
        """close_ws from the sidecar: the credential behind these sockets ended or changed."""
        tags = message.get("tags")
        code = message.get("code")
        reason = message.get("reason")
        if not isinstance(tags, list) or not isinstance(code, int) or not 4000 <= code <= 4999:
            log.error("authsvc: malformed close_ws message from the sidecar; ignored")
            return
        text = (reason if isinstance(reason, str) else "")[:120].encode("utf-8")
        for tag in tags:
            for ws in list(self._sockets.get(str(tag), ())):
                asyncio.ensure_future(_close_socket(ws, code, text))

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


async def _close_socket(ws: web.WebSocketResponse, code: int, message: bytes) -> None:
    """Closes with our code on every aiohttp version: on 3.8 ``close()`` first wakes the handler,
    whose return makes aiohttp close the socket with 1000 before our code is sent, so the close
    frame goes out first through the socket's writer (present, with this signature, in 3.8-3.13)."""
    writer = getattr(ws, "_writer", None)
    try:
        if writer is not None and not ws.closed:
            await writer.close(code, message)
        await ws.close(code=code, message=message)
    except (ConnectionError, RuntimeError):
        pass  # the client went away first: the socket is closed either way


class FilterMemo:
    """Results of filters the sidecar marked with a ``memo`` (protocol ``filter.memo``): for the same
    sidecar connection, filter, request target and memo, a byte-identical host answer gets the same
    result, without sending hundreds of KB to the sidecar and back. Bounded in entries and bytes;
    the least recently used goes first (every user polling /queue has an entry of their own)."""

    def __init__(self, max_entries: int = 64, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: dict[tuple[Any, ...], tuple[bytes, str, bytes]] = {}
        self._bytes = 0

    def get(self, key: tuple[Any, ...], body: bytes | bytearray) -> tuple[str, bytes] | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] != body:
            return None
        self._entries[key] = self._entries.pop(key)  # the most recently used now
        return entry[1], entry[2]

    def put(self, key: tuple[Any, ...], body: bytes, action: str, payload: bytes) -> None:
        size = len(body) + len(payload)
        if size > self.max_bytes // 4:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= len(old[0]) + len(old[2])
        while self._entries and (len(self._entries) >= self.max_entries or self._bytes + size > self.max_bytes):
            oldest = next(iter(self._entries))
            dropped = self._entries.pop(oldest)
            self._bytes -= len(dropped[0]) + len(dropped[2])
        self._entries[key] = (body, action, payload)
        self._bytes += size


class RefusalLog:
    """One log line when refusals start (with the cause), then a count per interval, then one line
    when decisions work again: an outage under load must not write a line per request.

    Requests refused before the sidecar was ever ready are the normal start of ComfyUI (a browser
    or a health probe that is early), not an outage: they are logged at debug only, unless the
    start takes longer than one interval (a sidecar that never comes must not be silent)."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.cause: str | None = None
        self.count = 0
        self.since = 0.0
        self.starting = True  # no decision has worked yet, and the start is not overdue

    def refused(self, cause: str) -> None:
        now = self.clock()
        if self.starting:
            if self.cause is None:
                log.debug("authsvc: refusing requests (503) until the sidecar is ready: %s", cause)
                self.cause, self.count, self.since = cause, 0, now
                return
            self.count += 1
            if now - self.since < self.interval:
                return
            self.starting = False
            log.warning("authsvc: refusing requests (503): no decision has worked since the start, %.0f s ago "
                        "(%d request(s) refused): %s", now - self.since, self.count + 1, cause)
            self.cause, self.count, self.since = cause, 0, now
            return
        if self.cause is None:
            log.warning("authsvc: refusing requests (503): %s", cause)
            self.cause, self.count, self.since = cause, 0, now
            return
        self.count += 1
        if cause != self.cause or now - self.since >= self.interval:
            log.warning("authsvc: refused %d more request(s) in %.0f s: %s", self.count, now - self.since, self.cause)
            self.cause, self.count, self.since = cause, 0, now

    def recovered(self) -> None:
        if self.starting:
            self.starting = False
            if self.cause is not None:
                log.debug("authsvc: %d request(s) were refused while the sidecar started", self.count + 1)
            self.cause = None
            return
        if self.cause is not None:
            log.warning("authsvc: decisions work again (%d request(s) refused since the last report)", self.count)
            self.cause = None


def _refuse(request: web.Request, exc: Unavailable, refusals: RefusalLog) -> web.Response:
    if isinstance(exc, MalformedAnswer):
        log.error("authsvc: malformed sidecar answer (%s); refusing %s %s", exc, request.method, request.rel_url.raw_path)
    else:
        refusals.refused(str(exc))
    return unavailable_response(request)


def _too_large(max_bytes: int) -> web.Response:
    body = {"error": f"Request body larger than {max_bytes} bytes", "code": "PAYLOAD_TOO_LARGE", "statusCode": 413}
    return web.json_response(body, status=413)
