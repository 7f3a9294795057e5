"""The filter step: the host's answer to a filtered read (a pass with ``filter``), shown to the
client only as the sidecar says (``keep``, ``replace``, ``narrow`` or ``respond``).

Guarantees:
- nothing the sidecar has not seen passes unfiltered: a 2xx the gate cannot read as bytes, an
  answer too large for a frame that the sidecar did not narrow, an unknown action: 503;
- an answer too large for a frame is narrowed to the prompts the sidecar names and serialised as
  the host serialises it, and only then sent (or kept, when the sidecar says that was all);
- a result is reused (``FilterMemo``) only for the same connection, filter, request target and
  ``memo``, and a byte-identical host answer: the memo names everything else it depends on.
"""
from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .answers import checked, respond
from .decision_client import DecisionClient
from .failsafe import unavailable_response
from .protocol import MAX_FRAME_BYTES

# what a filter message's JSON may take of a frame besides the host's answer
_FRAME_ROOM = 64 * 1024


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


class ResponseFilter:
    def __init__(self, client: DecisionClient) -> None:
        self.client = client
        self.memos = FilterMemo()

    async def apply(self, request: web.Request, response: web.StreamResponse, spec: dict[str, Any]) -> web.StreamResponse:
        """The host's ``response`` as the decision's filter ``spec`` lets the client see it; a 503
        when it cannot be filtered (a 2xx that is not readable bytes, an answer the sidecar did
        not see)."""
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
        reused = self.memos.get(key, body) if key is not None else None
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
                self.memos.put(key, sent, action, payload)
        if action == "keep":
            return response
        if action == "replace":
            response.body = payload
            return response
        if action == "respond":
            return respond(answer)
        return unavailable_response()


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
