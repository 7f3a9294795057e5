"""Makes the users the gate names in `comfy-user` known to ComfyUI's multi-user manager.

With `--multi-user`, ComfyUI trusts `comfy-user` only for ids listed in its
`user/users.json` and answers 500/401 for any other; without it, ComfyUI keeps
`{"default": "default"}` and ignores the header, and nothing is written.
Each id is looked at once per process; the file is replaced atomically.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any

log = logging.getLogger("authsvc")

_SINGLE_USER = {"default": "default"}


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
        if not isinstance(users, dict) or users == _SINGLE_USER or user_id in users:
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
