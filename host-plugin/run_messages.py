"""A running prompt's messages reach its own client, never every open socket.

ComfyUI sends a message with no target (``sid`` None) to every open WebSocket. Nodes do that
while a prompt runs: the core ``GetImageSize`` shows its sizes with ``send_progress_text`` and no
target; the API nodes show generated-image URLs, job ids and prices the same way; the chat nodes
send ``display_component`` with no target. Each of those is the running prompt's, and with users
kept apart it reached every other user's tabs.

- A message with no target that the prompt worker thread sends (the thread that takes prompts off
  the queue: its ``get`` is wrapped on the instance), other than ``status``, goes to the running
  prompt's client (``PromptServer.client_id``, which the executor sets from the prompt; the gate
  gives every prompt one: isolation/behaviours/prompt.ts). A run without a client sends it to
  nobody, as ComfyUI already does with that run's other messages.
- ``status`` (the queue's counts) stays a broadcast: queue_status.py scopes it per socket.
- Messages from any other thread (a custom node's monitor, a route handler) are the host's, as they
  are: they belong to no prompt.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Any

log = logging.getLogger("authsvc")

# no socket has this id (ComfyUI's send_* skip an unknown sid): the message goes to nobody
_NOBODY = "authsvc-no-client"


class RunMessages:
    def __init__(self, prompt_server: Any) -> None:
        self._server = prompt_server
        self._worker: int | None = None
        self.retargeted = 0  # tests, logs

    def target(self, event: Any, sid: Any) -> Any:
        """The sid a message is sent to: a run's untargeted message goes to the run's client."""
        if sid is not None or event == "status" or threading.get_ident() != self._worker:
            return sid
        self.retargeted += 1
        client = getattr(self._server, "client_id", None)
        return client if isinstance(client, str) and client else _NOBODY

    def install(self) -> bool:
        server = self._server
        queue = getattr(server, "prompt_queue", None)
        send_sync = getattr(server, "send_sync", None)
        get = getattr(queue, "get", None)
        if not callable(send_sync) or not callable(get):
            log.warning("authsvc: this host has no prompt queue or send_sync; a running prompt's untargeted messages reach every socket")
            return False

        @functools.wraps(get)
        def worker_get(*args: Any, **kwargs: Any) -> Any:
            self._worker = threading.get_ident()
            return get(*args, **kwargs)

        target = self.target

        def targeted_send_sync(event: Any, data: Any, sid: Any = None) -> Any:
            return send_sync(event, data, target(event, sid))

        queue.get = worker_get
        server.send_sync = targeted_send_sync
        return True


def install(prompt_server: Any) -> RunMessages | None:
    messages = RunMessages(prompt_server)
    return messages if messages.install() else None
