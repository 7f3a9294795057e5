"""authsvc host plugin: installs the gate as ComfyUI's outermost middleware at import time.

Order matters: a deny-all middleware goes in first, then the real gate replaces
it. If anything in between raises, the deny-all stays and every request is
answered 503: ComfyUI starts even when a custom node fails to import, so a
failed setup must never mean an unprotected server.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

from .failsafe import deny_all_middleware, refuse_unsupported_platform

log = logging.getLogger("authsvc")

NODE_CLASS_MAPPINGS: dict[str, Any] = {}
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {}
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _package_version() -> str:
    try:
        with open(os.path.join(PACKAGE_ROOT, "package.json"), encoding="utf-8") as f:
            return str(json.load(f)["version"])
    except (OSError, ValueError, KeyError):
        return "unknown"


PLUGIN_VERSION = _package_version()
def _timeout_seconds() -> float:
    raw = os.environ.get("AUTHSVC_DECISION_TIMEOUT_MS", "2000")
    value = int(raw)  # a malformed value is a setup error: deny-all stays
    if value <= 0:
        raise ValueError("AUTHSVC_DECISION_TIMEOUT_MS must be positive")
    return value / 1000.0


def _restart_hold_seconds(timeout: float) -> float:
    """How long a request waits for a sidecar that is being replaced (AUTHSVC_RESTART_HOLD_MS,
    default and at most the decision timeout; 0 refuses at once, as before issue 27)."""
    raw = os.environ.get("AUTHSVC_RESTART_HOLD_MS")
    if raw is None:
        return timeout
    value = int(raw)  # a malformed value is a setup error: deny-all stays
    if value < 0:
        raise ValueError("AUTHSVC_RESTART_HOLD_MS must not be negative")
    return min(value / 1000.0, timeout)


def _spin_us() -> int:
    value = int(os.environ.get("AUTHSVC_DECISION_SPIN_US", "250"))
    if value < 0 or value > 10_000:
        raise ValueError("AUTHSVC_DECISION_SPIN_US must be between 0 and 10000")
    return value


def _keep_first(app: Any, ours: list[Any]) -> None:
    """On start, before aiohttp freezes the list: our middleware (the gate, or deny-all) runs first
    again, whatever a package imported after this one inserted ahead of it (at index 0, say): a
    middleware ahead of the gate runs for requests nobody decided on."""

    async def first_again(_app: Any) -> None:
        middlewares = app.middlewares
        mine = ours[0]
        if mine not in middlewares:
            # another package replaced or emptied the list: nothing would decide
            log.error("authsvc: another package removed the gate from the middlewares; it is put back first")
        elif middlewares[0] is mine:
            return
        else:
            ahead = [getattr(m, "__name__", repr(m)) for m in middlewares[: middlewares.index(mine)]]
            middlewares.remove(mine)
            log.warning("authsvc: middlewares %s were put ahead of the gate by another package; the gate runs first again", ahead)
        middlewares.insert(0, mine)

    app.on_startup.append(first_again)


def _install(app: Any, prompt_server: Any = None) -> None:
    deny = deny_all_middleware()
    app.middlewares.insert(0, deny)
    ours = [deny]
    _keep_first(app, ours)
    try:
        if refuse_unsupported_platform():  # deny-all stays, with a page saying why (docs/platforms.md)
            return
        from . import host_facts, run_guard, run_messages
        from . import data_dir as data_dirs
        from .decision_client import DecisionClient
        from .gate import Gate
        from .host_events import HostEvents
        from .host_users import HostUsers, enable_per_user_storage
        from .protocol import PROTOCOL_VERSION
        from .sidecar_process import ExternalSidecar, SidecarSupervisor

        # <user_dir>/authsvc inside ComfyUI (an old <package>/users moved there once), AUTHSVC_DATA_DIR first
        data_dir = data_dirs.prepare(os.environ, PACKAGE_ROOT)
        external = os.environ.get("AUTHSVC_SOCKET")
        socket_path = external or data_dirs.socket_path(data_dir)
        hello = {"protocol": PROTOCOL_VERSION, "plugin_version": PLUGIN_VERSION, "host": host_facts.collect()}
        client = DecisionClient(socket_path, _timeout_seconds(), hello, _spin_us())
        client.hold_s = _restart_hold_seconds(client.timeout)
        gate = Gate(client, PLUGIN_VERSION, HostUsers(prompt_server).ensure if prompt_server is not None else None)
        if external:
            runner: Any = ExternalSidecar(client)
        else:
            runner = SidecarSupervisor(client, socket_path, data_dir)
        app.on_startup.append(runner.start)
        app.on_cleanup.append(runner.stop)
        gate.attach(app)
        client.hello_extra = gate.sockets.hello_fields
        if prompt_server is not None:
            enable_per_user_storage()
            events = HostEvents(client.send_event)
            events.install(prompt_server)
            gate.queue_status.install(prompt_server, events.status_seq)
            gate.previews.install(prompt_server)
            # authsvc's own folders (the store, the signing secret, the sockets) are no prompt's to touch
            # (an operator's own socket, AUTHSVC_SOCKET, is the file alone: its folder may be anyone's, /tmp)
            private = tuple(dict.fromkeys((data_dir, socket_path if external else os.path.dirname(socket_path))))
            run_guard.install(prompt_server, private, PACKAGE_ROOT)
            run_messages.install(prompt_server)
            gate.on_prompts_changed = events.report_prompts
            client.hello_extra = lambda: {**events.hello_fields(), **gate.sockets.hello_fields()}
            host_facts.install(app, prompt_server, hello, client.send_event)
        app.middlewares[app.middlewares.index(deny)] = gate.middleware
        ours[0] = gate.middleware
        log.debug("authsvc: gate installed (sidecar socket %s)", socket_path)
    except Exception:
        log.exception("authsvc: setup failed; every request will be answered 503 until this is fixed")


def _install_into_comfyui() -> None:
    import server  # ComfyUI's module: only present when loaded as a custom node

    _install(server.PromptServer.instance.app, server.PromptServer.instance)


_install_into_comfyui()
