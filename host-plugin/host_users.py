"""Per-user userdata and settings on the host, whatever ComfyUI's start mode.

ComfyUI keeps userdata (workflows, settings) per `comfy-user` only with
`--multi-user`; without it everyone shares `user/default/`. The plugin switches
that mode on at import (`enable_per_user_storage`: the flag ComfyUI's user manager
reads on every request), so the gate's `comfy-user` always selects the principal's
own space, and `user/default/` stays what it was: the shared set.

ComfyUI trusts `comfy-user` only for ids it knows (`user/users.json`), so every id
the gate names is added once per process; the file is replaced atomically.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

log = logging.getLogger("authsvc")



def enable_per_user_storage() -> bool:
    """Turns on ComfyUI's per-user storage; False (and a log line) where this host has no such flag."""
    try:
        from comfy.cli_args import args  # ComfyUI's module
    except ImportError:
        log.warning("authsvc: this host has no comfy.cli_args; userdata cannot be kept per user")
        return False
    args.multi_user = True
    return True


class HostUsers:
    def __init__(self, prompt_server: Any) -> None:
        self._server = prompt_server
        self._known: set[str] = set()

    def ensure(self, user_id: str, name: str) -> None:
        if user_id in self._known:
            return
        self._known.add(user_id)
        manager = getattr(self._server, "user_manager", None)
        users = getattr(manager, "users", None)
        if not isinstance(users, dict) or user_id in users:
            return
        users[user_id] = name
        try:
            path = manager.get_users_file()
            fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".users.", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(users, f)
            os.replace(temp, path)
        except (OSError, AttributeError, TypeError) as exc:
            log.error("authsvc: could not record user %s in ComfyUI's users.json: %s", name, exc)
