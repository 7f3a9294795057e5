"""The sidecar's answers, checked at the boundary before the gate reads them, and a ``respond``
turned into the response the client gets.

Guarantees:
- an answer of the wrong shape for its step (an unknown action, a field of the wrong type) is
  ``MalformedAnswer``, an ``Unavailable``: no decision, so the request is refused (503) and the
  cause logged as the sidecar's;
- everything the gate later reads from an answer is checked here, so an exception after this
  point is a bug of the plugin's own, and is logged as one.
"""
from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from .connection import Unavailable


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
        for key, ok in (("set_headers", _is_str_map), ("response_headers", _is_str_map), ("strip_headers", _is_str_list), ("drop_query", _is_str_list), ("set_fields", _is_str_map)):
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


def checked_decision(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer to ``decide``, checked (``checked``)."""
    return checked(answer, "decide")


def respond(decision: dict[str, Any]) -> web.Response:
    """The host's response for a checked ``respond``: its status, headers and text, as the sidecar gave them."""
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
