"""Protocol v2 mechanisms of the plugin (issue 8): the form step, raw body payloads,
WebSockets the sidecar closes, host events, and one log line per outage, not per request."""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import types

import aiohttp

from .support import LOGS, PluginCase, assert_unavailable, pattern_block, plugin_module


def script(decide: dict, **steps: dict):
    def answer(msg: dict) -> dict:
        if msg["type"] == "decide":
            return decide
        if msg["type"] in steps:
            return steps[msg["type"]]
        raise AssertionError(f"unexpected message {msg}")

    return answer


class FormStep(PluginCase):
    def _form(self, data: bytes) -> aiohttp.FormData:
        form = aiohttp.FormData()
        form.add_field("type", "input")
        form.add_field("overwrite", "true")
        form.add_field("image", data, filename="cat.png", content_type="image/png")
        return form

    async def test_the_handler_reuses_the_form_the_gate_parsed(self) -> None:
        s = await self.start(script({"action": "pass", "need_form": {"ctx": {"step": "s-upload"}}}, form={"action": "pass"}))
        data = pattern_block(3, 300_000)
        status, _, body = await s.request("POST", "/upload/mask", data=self._form(data))
        self.assertEqual(status, 200, body)
        answer = json.loads(body)
        self.assertEqual(answer["sha256"], hashlib.sha256(data).hexdigest(), "the handler read the whole file")
        self.assertEqual(answer["type"], "input")
        form = s.fake.of_type("form")[0]
        self.assertEqual(form["fields"], {"type": "input", "overwrite": "true"})
        self.assertEqual(form["files"], {"image": "cat.png"}, "the sidecar sees file names, never contents")

    async def test_a_refused_form_never_reaches_the_handler(self) -> None:
        s = await self.start(script({"action": "pass", "need_form": {"ctx": None}},
                                    form={"action": "respond", "status": 403, "body_text": '{"code":"NOT_OWNER"}'}))
        status, _, body = await s.request("POST", "/upload/mask", data=self._form(b"x"))
        self.assertEqual(status, 403)
        self.assertNotIn("upload_form", s.host.seen)


class BodyPayload(PluginCase):
    async def test_the_replacement_body_reaches_the_host_byte_for_byte(self) -> None:
        replacement = '{"prompt": {"3": {"inputs": {"seed": 18446744073709551615, "f": 1e400, "t": "caf\\u00e9"}}}, "prompt_id": "p9"}'
        s = await self.start(script({"action": "pass", "need_body": {"max_bytes": 65536, "ctx": {"step": "s-prompt"}}},
                                    body={"action": "pass", "body_text": replacement}))
        sent = b'{"prompt": {"3": {"inputs": {"seed": 18446744073709551615}}}}'
        status, _, body = await s.request("POST", "/prompt", data=sent, headers={"Content-Type": "application/json"})
        self.assertEqual(status, 200, body)
        self.assertEqual(s.fake.of_type("body")[0]["body_bytes"], sent, "the sidecar got the client's bytes")
        self.assertEqual(s.host.seen["prompt_post"]["body"]["prompt"]["3"]["inputs"]["seed"], 18446744073709551615)
        self.assertEqual(s.host.seen["prompt_post"]["body"]["prompt"]["3"]["inputs"]["t"], "caf\u00e9")


class ClosingSockets(PluginCase):
    async def test_close_ws_closes_exactly_the_tagged_socket_and_the_sidecar_hears_it_closed(self) -> None:
        tags = iter(["tag-a", "tag-b"])
        s = await self.start(lambda msg: {"action": "pass", "ws_tag": next(tags)} if msg["type"] == "decide" else None)
        url = s.url.replace("http", "ws") + "/ws"
        a = await s.session.ws_connect(url)
        b = await s.session.ws_connect(url)
        await a.receive_json()
        await b.receive_json()
        s.fake.push({"type": "close_ws", "tags": ["tag-a"], "code": 4401, "reason": "session ended"})
        closing = await asyncio.wait_for(a.receive(), 5)
        self.assertEqual(closing.type, aiohttp.WSMsgType.CLOSE)
        self.assertEqual(closing.data, 4401, "the close code the sidecar chose")
        await b.send_str("still here")
        self.assertEqual((await asyncio.wait_for(b.receive(), 5)).data, "echo:still here", "the other socket is untouched")
        await a.close()
        deadline = asyncio.get_running_loop().time() + 5
        while not any(e["name"] == "ws_closed" and e["data"]["tag"] == "tag-a" for e in s.fake.events):
            self.assertLess(asyncio.get_running_loop().time(), deadline, "no ws_closed event for tag-a")
            await asyncio.sleep(0.02)
        await b.close()

    async def test_a_restarted_sidecar_gets_the_open_sockets_in_the_hello(self) -> None:
        entry = {"tag": "t-1", "userId": "u1", "role": "user", "authType": "session", "credentialId": "j1"}
        s = await self.start(lambda msg: {"action": "pass", "ws_tag": "t-1", "ws_entry": entry} if msg["type"] == "decide" else None)
        ws = await s.session.ws_connect(s.url.replace("http", "ws") + "/ws")
        await ws.receive_json()
        await s.fake.stop()
        await s.fake.start()
        await s.wait_ready()
        self.assertEqual(s.fake.hellos[-1]["sockets"], [entry])
        await ws.close()

    async def test_a_malformed_close_ws_is_ignored_and_logged(self) -> None:
        s = await self.start(lambda msg: {"action": "pass", "ws_tag": "t"} if msg["type"] == "decide" else None)
        ws = await s.session.ws_connect(s.url.replace("http", "ws") + "/ws")
        await ws.receive_json()
        s.fake.push({"type": "close_ws", "tags": "t", "code": 1000})
        s.fake.push({"type": "close_ws", "tags": ["t"], "code": 1000})
        deadline = asyncio.get_running_loop().time() + 5
        while len(LOGS.lines(logging.ERROR, "malformed close_ws")) < 2:
            self.assertLess(asyncio.get_running_loop().time(), deadline)
            await asyncio.sleep(0.02)
        await ws.send_str("x")
        self.assertEqual((await asyncio.wait_for(ws.receive(), 5)).data, "echo:x")
        await ws.close()


class HostEventsFromTheExecutorThread(PluginCase):
    async def test_send_sync_from_another_thread_reaches_the_sidecar_and_the_host_unchanged(self) -> None:
        host_events = plugin_module("host_events")
        loop = asyncio.get_running_loop()
        delivered: list[tuple] = []
        sent: list[dict] = []
        server = types.SimpleNamespace(loop=loop)
        server.send_sync = lambda event, data, sid=None: delivered.append((event, data, sid))
        events = host_events.HostEvents(sent.append)
        events.install(server)

        def executor() -> None:
            server.send_sync("execution_start", {"prompt_id": "p1", "timestamp": 1}, "client-1")
            server.send_sync("executed", {"node": "9", "output": {"images": [{"filename": "a.png", "subfolder": "", "type": "output"}]}, "prompt_id": "p1"}, "client-1")
            server.send_sync("progress", {"value": 1, "max": 2}, "client-1")
            server.send_sync("execution_success", {"prompt_id": "p1", "timestamp": 2}, "client-1")

        thread = threading.Thread(target=executor)
        thread.start()
        thread.join()
        deadline = loop.time() + 5
        while len(sent) < 3:
            self.assertLess(loop.time(), deadline)
            await asyncio.sleep(0.01)
        self.assertEqual([m["name"] for m in sent], ["execution_start", "executed", "execution_end"])
        self.assertEqual(sent[2]["data"], {"prompt_id": "p1", "status": "success"})
        self.assertLessEqual(sent[0]["t"], sent[2]["t"])
        self.assertEqual([d[0] for d in delivered], ["execution_start", "executed", "progress", "execution_success"],
                         "the host's own messages are all delivered, unchanged")
        self.assertEqual(events.hello_fields(), {"running": []})


class QuietOutage(PluginCase):
    async def test_an_outage_under_load_logs_its_cause_once_and_counts_the_rest(self) -> None:
        s = await self.start(lambda msg: {"action": "pass"})
        await s.fake.stop()
        LOGS.records.clear()
        for _ in range(200):
            status, _, body = await s.get("/prompt")
            assert_unavailable(self, status, body)
        refusals = LOGS.lines(logging.WARNING, "refus")
        self.assertGreaterEqual(len(refusals), 1)
        self.assertLessEqual(len(refusals), 3, f"one line per request is a disk filler: {len(refusals)} lines")


class AnswersAtTheBoundary(PluginCase):
    """Issue 9, hole 9: every answer is checked before it is used; a malformed one is a 503 for
    that request with a clear line, and a bug of the plugin's own is logged as such (still 503)."""

    MALFORMED = [
        {"action": "pass", "set_headers": {"comfy-user": 5}},
        {"action": "pass", "strip_headers": "authorization"},
        {"action": "pass", "drop_query": [1]},
        {"action": "pass", "need_body": {"ctx": None}},
        {"action": "pass", "filter": "queue"},
        {"action": "pass", "ws_tag": 7},
        {"action": "respond", "status": "403"},
        {"action": "respond", "status": 99},
        {"action": "respond", "status": True},
        {"action": "respond", "status": 403, "headers": [["X", 1]]},
        {"action": "respond", "status": 403, "body_text": {"x": 1}},
        {"action": "keep"},
        {"status": 200},
    ]

    async def test_malformed_answers_are_refused_with_a_clear_line(self) -> None:
        for answer in self.MALFORMED:
            with self.subTest(answer=answer):
                s = await self.start(lambda msg, a=answer: a)
                LOGS.records.clear()
                status, _, body = await s.get("/prompt")
                assert_unavailable(self, status, body)
                self.assertNotIn("prompt_get", s.host.seen, "the handler never ran")
                self.assertEqual(len(LOGS.lines(logging.ERROR, "malformed sidecar answer")), 1)
                self.assertEqual(LOGS.lines(logging.ERROR, "bug in the plugin"), [])

    async def test_a_bug_of_the_plugin_is_logged_as_a_bug(self) -> None:
        s = await self.start(lambda msg: {"action": "pass", "set_headers": {"comfy-user": "alice"}})

        def broken(request, decision):  # noqa: ANN001 - stands in for a plugin bug
            raise TypeError("plugin bug under test")

        s.plugin.gate.edited = broken
        LOGS.records.clear()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertNotIn("prompt_get", s.host.seen)
        self.assertEqual(len(LOGS.lines(logging.ERROR, "bug in the plugin")), 1)
        self.assertEqual(LOGS.lines(logging.ERROR, "malformed sidecar answer"), [])


class ResolveOffTheLoop(PluginCase):
    """A ``resolve`` that walks a user's folder (``list``) runs on a worker thread, never on the
    host's event loop; one that only stats and realpaths answers at once on the loop."""

    async def test_a_folder_walk_is_answered_from_a_worker_thread(self) -> None:
        import os
        import sys
        import tempfile

        base = tempfile.mkdtemp(prefix="resolve-off-loop-")
        for t in ("input", "output", "temp"):
            os.makedirs(os.path.join(base, t))
        os.makedirs(os.path.join(base, "input", "u_x", "sub"))
        for name in ("a.png", "sub/b.png"):
            open(os.path.join(base, "input", "u_x", name), "wb").close()
        walked_on: list[str] = []
        fp = types.ModuleType("folder_paths")
        fp.get_input_directory = lambda: os.path.join(base, "input")  # type: ignore[attr-defined]
        fp.get_directory_by_type = lambda kind: os.path.join(base, kind) if kind in ("input", "output", "temp") else None  # type: ignore[attr-defined]

        def filter_files_content_types(names: list[str], kinds: list[str]) -> list[str]:
            walked_on.append(threading.current_thread().name)
            return names

        fp.filter_files_content_types = filter_files_content_types  # type: ignore[attr-defined]
        saved = sys.modules.get("folder_paths")
        sys.modules["folder_paths"] = fp
        try:
            s = await self.start()
            loop_thread = threading.current_thread().name
            s.fake.push({"type": "resolve", "rid": 7, "items": [{"op": "list", "folder": "u_x", "content_types": ["image"]}]})
            s.fake.push({"type": "resolve", "rid": 8, "items": [{"op": "upload", "filename": "c.png", "subfolder": "u_x"}]})
            deadline = asyncio.get_running_loop().time() + 5
            while len(s.fake.of_type("resolved")) < 2:
                self.assertLess(asyncio.get_running_loop().time(), deadline, "both resolves are answered")
                await asyncio.sleep(0.02)
            answers = {m["rid"]: m for m in s.fake.of_type("resolved")}
            self.assertEqual(answers[7]["results"], [{"files": ["u_x/a.png", "u_x/sub/b.png"]}])
            self.assertEqual(answers[8]["results"][0]["path"], os.path.join(os.path.realpath(base), "input", "u_x", "c.png"))
            self.assertEqual(len(walked_on), 1)
            self.assertNotEqual(walked_on[0], loop_thread, "the walk ran off the host's event loop")
        finally:
            if saved is None:
                sys.modules.pop("folder_paths", None)
            else:
                sys.modules["folder_paths"] = saved
