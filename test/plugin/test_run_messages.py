"""run_messages.py: a message with no target sent from the prompt worker thread goes to the running
prompt's client; status, targeted messages and other threads' messages are the host's as sent."""
from __future__ import annotations

import queue
import threading
import unittest
from typing import Any

from .support import plugin_module

run_messages = plugin_module("run_messages")


class Server:
    """ComfyUI's PromptServer as far as the module uses it: its queue, its client_id and send_sync."""

    def __init__(self) -> None:
        self.prompt_queue = queue.Queue()
        self.client_id: Any = None
        self.sent: list[tuple[Any, Any, Any]] = []

    def send_sync(self, event: Any, data: Any, sid: Any = None) -> None:
        self.sent.append((event, data, sid))


def on_thread(work: Any) -> None:
    t = threading.Thread(target=work)
    t.start()
    t.join(5)
    assert not t.is_alive()


class RunMessagesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = Server()
        self.assertIsNotNone(run_messages.install(self.server))
        self.server.prompt_queue.put("item")

    def worker(self, *sends: tuple[Any, Any, Any]) -> None:
        """The worker thread: takes a prompt off the queue, then sends what a running node sends."""
        def work() -> None:
            self.server.prompt_queue.get()
            for event, data, sid in sends:
                self.server.send_sync(event, data, sid)
        on_thread(work)

    def test_untargeted_messages_of_a_run_go_to_its_client(self) -> None:
        self.server.client_id = "alice-tab"
        self.worker((3, b"text", None), ("display_component", {"x": 1}, None))
        self.assertEqual([s[2] for s in self.server.sent], ["alice-tab", "alice-tab"])

    def test_a_run_without_a_client_sends_its_untargeted_messages_to_nobody(self) -> None:
        for client in (None, ""):
            self.server.sent.clear()
            self.server.client_id = client
            self.server.prompt_queue.put("item")
            self.worker((3, b"text", None))
            sid = self.server.sent[0][2]
            self.assertIsInstance(sid, str)
            self.assertNotIn(sid, ("", "alice-tab"))

    def test_status_and_targeted_messages_are_as_sent(self) -> None:
        self.server.client_id = "alice-tab"
        self.worker(("status", {"status": {}}, None), ("executed", {}, "bob-tab"))
        self.assertEqual([s[2] for s in self.server.sent], [None, "bob-tab"])

    def test_other_threads_broadcast_as_sent(self) -> None:
        self.server.client_id = "alice-tab"
        took, done = threading.Event(), threading.Event()

        def work() -> None:  # the worker, alive (a thread id is reused once its thread ends)
            self.server.prompt_queue.get()
            took.set()
            done.wait(5)

        worker = threading.Thread(target=work)
        worker.start()
        try:
            self.assertTrue(took.wait(5))
            self.server.send_sync("monitor", {"cpu": 1}, None)  # this thread: a route or the loop
            on_thread(lambda: self.server.send_sync("monitor", {"cpu": 2}, None))  # a custom node's own thread
        finally:
            done.set()
            worker.join(5)
        self.assertEqual([s[2] for s in self.server.sent], [None, None])

if __name__ == "__main__":
    unittest.main()
