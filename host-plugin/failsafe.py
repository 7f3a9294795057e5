"""The fail-closed answers. Imports nothing but aiohttp, so it loads even when the rest cannot."""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from aiohttp import web


def unavailable_response() -> web.Response:
    body = {"error": "Authentication service unavailable", "code": "AUTHSVC_UNAVAILABLE", "statusCode": 503}
    return web.json_response(body, status=503, headers={"Retry-After": "1"})


def deny_all_middleware() -> Callable[..., Awaitable[web.StreamResponse]]:
    """Installed first; stays if setup fails, so the host never serves unprotected."""

    @web.middleware
    async def authsvc_deny_all(request: web.Request, handler: Any) -> web.StreamResponse:
        return unavailable_response()

    return authsvc_deny_all
