"""The fail-closed answers. Imports nothing but aiohttp and the stdlib, so it loads even when the rest cannot.

Every refusal is a 503. API clients get the JSON error of the spec (``AUTHSVC_UNAVAILABLE``);
a browser navigation gets a small self-contained HTML page saying why the server is closed
and what the owner should do: ``OUTAGE`` holds that, set by whoever knows the cause (the
platform check, the sidecar supervisor, the background install). The page never names a
path, a setting's value or anything else the log alone should see.
"""
from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from aiohttp import web

if TYPE_CHECKING:
    from .install_state import Problem


@dataclass(frozen=True)
class Outage:
    """What the 503 page says. ``reload_s``: the page reloads itself (a state that will change by itself)."""

    title: str
    what: str
    fix: str = ""
    reload_s: int | None = None


STARTING = Outage("authsvc is starting", "The authentication service of this ComfyUI server is starting.", reload_s=2)
UNKNOWN = Outage("authsvc is unavailable",
                 "The authentication service of this ComfyUI server is not answering; every request is refused.",
                 "If this lasts, look at the ComfyUI log on the server.", reload_s=10)
SETUP_FAILED = Outage("authsvc could not start", "The authentication plugin of this ComfyUI server failed to set itself "
                      "up, so every request is refused.",
                      "look for the line 'authsvc: setup failed' in the ComfyUI log, fix its cause, restart ComfyUI.")


class _Current:
    outage: Outage = STARTING


OUTAGE = _Current()


def set_outage(outage: Outage) -> None:
    OUTAGE.outage = outage


def problem_page(problem: "Problem") -> Outage:
    return Outage("authsvc cannot start", problem.what + ". Every request is refused until this is fixed.",
                  problem.fix, reload_s=None if problem.kind == "unsupported_platform" else 30)


def refuse_unsupported_platform() -> bool:
    """True when the gate cannot run on this platform; the page and one log line then say why."""
    from .install_state import platform_problem  # stdlib only, like this module

    problem = platform_problem()
    if problem is None:
        return False
    set_outage(problem_page(problem))
    logging.getLogger("authsvc").error("authsvc: cannot start: %s. Every request is refused (503).", problem.log_line())
    return True


def is_navigation(request: web.Request) -> bool:
    """SPEC §1: Sec-Fetch-Mode navigate, or an Accept that wants HTML and not JSON."""
    headers = request.headers
    if headers.get("Sec-Fetch-Mode", "").lower() == "navigate":
        return True
    accept = headers.get("Accept", "").lower()
    return "text/html" in accept and "application/json" not in accept


def outage_page(outage: Outage) -> str:
    esc = html.escape
    refresh = f'<meta http-equiv="refresh" content="{outage.reload_s}">' if outage.reload_s else ""
    fix = f"<p>To fix it, on the server: {esc(outage.fix)}</p>" if outage.fix else ""
    note = "This page reloads itself." if outage.reload_s else "Every request is refused until then."
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>{esc(outage.title)}</title>"
        "<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#222}"
        "h1{font-size:1.4rem}p.note{color:#666}</style></head><body>"
        f"<h1>{esc(outage.title)}</h1><p>{esc(outage.what)}</p>{fix}"
        f'<p class="note">{note}</p></body></html>'
    )


def unavailable_response(request: web.Request | None = None) -> web.Response:
    """The 503 answer; an HTML page for a browser navigation, the JSON error for everyone else."""
    headers = {"Retry-After": "1", "Cache-Control": "no-store"}
    if request is not None and is_navigation(request):
        return web.Response(status=503, text=outage_page(OUTAGE.outage), content_type="text/html", headers=headers)
    body = {"error": "Authentication service unavailable", "code": "AUTHSVC_UNAVAILABLE", "statusCode": 503}
    return web.json_response(body, status=503, headers=headers)


def deny_all_middleware() -> Callable[..., Awaitable[web.StreamResponse]]:
    """Installed first; stays if setup fails, so the host never serves unprotected."""

    @web.middleware
    async def authsvc_deny_all(request: web.Request, handler: Any) -> web.StreamResponse:
        # the gate replaces this middleware when setup succeeds: still here means it failed
        if OUTAGE.outage is STARTING:
            set_outage(SETUP_FAILED)
        return unavailable_response(request)

    return authsvc_deny_all
