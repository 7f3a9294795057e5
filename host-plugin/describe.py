"""The request description (shared/protocol.json, ``decide``): what the sidecar decides on.

Guarantees:
- the description names the route aiohttp actually matched (its pattern and kind, or the status
  of no match), so the policy is decided on what the host will run, not on the path text;
- it carries the listed headers only, every line of a repeated header joined in order (RFC 9110),
  so a proxy's appended X-Forwarded-For line never hides behind the client's first one;
- ``description_fields`` is the description as a tuple: equal tuples are equal descriptions,
  which is what a kept decision is found by (kept_decisions.py); the message itself is built only
  when the sidecar is really asked.
"""
from __future__ import annotations

from typing import Any

from aiohttp import web

from .protocol import REQUEST_HEADERS

_WANTED_HEADERS = frozenset(REQUEST_HEADERS)

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
    if raw_key is not None:
        remember_by_lines(_RAW_MEMO, raw_key, result, raw_headers)
    return result


def remember_by_lines(memo: dict[Any, Any], key: Any, value: Any, raw_headers: tuple[tuple[bytes, bytes], ...]) -> None:
    """Keeps ``value`` in a memo of what was computed from a request's header lines (``key`` holds
    them whole): none from more than _RAW_MEMO_CHARS characters of lines, at most _RAW_MEMO_MAX,
    the whole memo dropped when full."""
    if sum(len(k) + len(v) for k, v in raw_headers) > _RAW_MEMO_CHARS:
        return
    if len(memo) >= _RAW_MEMO_MAX:
        memo.clear()
    memo[key] = value


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
