"""A pass decision's edits of the request the host's handler gets: headers set or stripped
(``set_headers``, ``strip_headers``), query keys dropped (``drop_query``).

Guarantees:
- the handler sees exactly the edited headers and query, whichever way they were made;
- the two headers the gate sets on nearly every request (``comfy-user``, ``authorization``) are
  edited on the request itself, since nothing aiohttp caches is derived from them; any other edit,
  any dropped query key, and any aiohttp whose request looks otherwise get ``clone()``, the public
  way, which builds a second request (docs/architecture.md, "Host plugin layout", says why the
  in-place edit stays);
- an in-place edit is remembered by the header lines as received and the edit (both whole), so a
  request with equal lines and an equal edit gets the very same (read-only) headers without
  building them again; nothing else goes into the result.
"""
from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict

from .describe import remember_by_lines

# the headers the gate edits in place: nothing aiohttp caches is derived from them (host, url,
# cookies, forwarded and scheme come from others); an edit of any other header clones the request
_IN_PLACE_SAFE = frozenset(("comfy-user", "authorization"))

# in-place edits by what they are computed from (the header lines as received and the edit): a
# client on a keep-alive connection sends the same lines again and again, and a kept decision
# edits them the same way each time (bounded as the description's memo: describe.remember_by_lines)
_MEMO: dict[tuple[Any, ...], tuple[CIMultiDictProxy, tuple[tuple[bytes, bytes], ...]]] = {}


def edited(request: web.Request, decision: dict[str, Any]) -> web.Request:
    """The request with the decision's edits: ``request`` itself when there are none, or when
    they could be made in place; otherwise a clone."""
    set_headers = decision.get("set_headers")
    strip_headers = decision.get("strip_headers")
    drop_query = decision.get("drop_query")
    if not (set_headers or strip_headers or drop_query):
        return request
    key = None
    if not drop_query and isinstance(set_headers, dict) and isinstance(strip_headers, (list, type(None))):
        try:
            key = (request.raw_headers, tuple(set_headers.items()), tuple(strip_headers or ()))
            found = _MEMO.get(key)
        except TypeError:  # an unhashable value: no memo, the edit below says what is wrong with it
            key = found = None
        if found is not None and _put_headers(request, *found):
            return request
    headers = request.headers.copy()
    for name in strip_headers or ():
        headers.popall(name, None)
    for name, value in (set_headers or {}).items():
        headers[name] = value
    if not drop_query:
        if _IN_PLACE_SAFE.issuperset(n.lower() for n in (*(strip_headers or ()), *(set_headers or {}))):
            made = _replace_headers(request, headers)
            if made is not None:
                if key is not None:
                    remember_by_lines(_MEMO, key, made, key[0])
                return request
        return request.clone(headers=headers)
    query = MultiDict(request.rel_url.query)
    for key in drop_query:
        query.popall(key, None)
    return request.clone(headers=headers, rel_url=request.rel_url.with_query(query))


def _put_headers(request: web.Request, proxy: CIMultiDictProxy, raw: tuple[tuple[bytes, bytes], ...]) -> bool:
    """Gives ``request`` these headers (made by ``_replace_headers`` for equal header lines and edit)."""
    cache = getattr(request, "_cache", None)
    message = getattr(request, "_message", None)
    if not isinstance(cache, dict) or not hasattr(message, "_replace") or not hasattr(request, "_headers"):
        return False
    request._message = message._replace(headers=proxy, raw_headers=raw)
    request._headers = proxy
    cache.pop("headers", None)
    cache.pop("raw_headers", None)
    return True


def _replace_headers(request: web.Request, headers: CIMultiDict) -> tuple[CIMultiDictProxy, tuple[tuple[bytes, bytes], ...]] | None:
    """Gives ``request`` these headers in place: what ``clone(headers=)`` does to the headers, without
    building a second Request (a third of the gate's own Python per request). aiohttp 3.8 to 3.13 keep
    them in ``_headers`` and ``_message`` and cache ``headers``/``raw_headers`` in ``_cache``; before
    the gate runs nothing else derived from the headers is cached (the description reads ``headers``
    only). What it gave (to be given again to a request with the same lines and edit); where this
    aiohttp looks otherwise: None, and the caller clones."""
    proxy = CIMultiDictProxy(headers)
    # aiohttp reads header bytes with surrogateescape: a byte that is not UTF-8 goes back as it came
    raw = tuple((k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape")) for k, v in headers.items())
    return (proxy, raw) if _put_headers(request, proxy, raw) else None
