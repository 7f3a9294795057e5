"""A pass decision's edits of the request the host's handler gets: headers set or stripped
(``set_headers``, ``strip_headers``), query keys dropped (``drop_query``).

Guarantees:
- the handler sees exactly the edited headers and query, whichever way they were made;
- the two headers the gate sets on nearly every request (``comfy-user``, ``authorization``) are
  edited on the request itself, since nothing aiohttp caches is derived from them; any other edit,
  any dropped query key, and any aiohttp whose request looks otherwise get ``clone()``, the public
  way, which builds a second request (docs/architecture.md, "Host plugin layout", says why the
  in-place edit stays).
"""
from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict

# the headers the gate edits in place: nothing aiohttp caches is derived from them (host, url,
# cookies, forwarded and scheme come from others); an edit of any other header clones the request
_IN_PLACE_SAFE = frozenset(("comfy-user", "authorization"))


def edited(request: web.Request, decision: dict[str, Any]) -> web.Request:
    """The request with the decision's edits: ``request`` itself when there are none, or when
    they could be made in place; otherwise a clone."""
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
