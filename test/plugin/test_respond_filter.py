"""respond decisions (answered by the gate) and response filters (JSON bodies sent back to the sidecar)."""
from __future__ import annotations

import asyncio
import json
import unittest

import aiohttp

from .support import PluginCase, assert_unavailable, plugin_module


class Respond(PluginCase):
    async def test_status_headers_and_body_exactly(self) -> None:
        decision = {
            "action": "respond", "status": 302,
            "headers": [["Location", "/authsvc/login?next=%2Fprompt"], ["Set-Cookie", "a=1; Path=/; HttpOnly"],
                        ["Set-Cookie", "b=2; Path=/"], ["Cache-Control", "no-store"]],
            "body_text": "redirecting \u2192 login",
        }
        s = await self.start(lambda msg: decision)
        async with s.session.get(s.url + "/prompt", allow_redirects=False) as resp:
            body = await resp.read()
            self.assertEqual(resp.status, 302)
            self.assertEqual(resp.headers.getall("Set-Cookie"), ["a=1; Path=/; HttpOnly", "b=2; Path=/"])
            self.assertEqual(resp.headers["Location"], "/authsvc/login?next=%2Fprompt")
            self.assertEqual(resp.headers["Cache-Control"], "no-store")
        self.assertEqual(body, "redirecting \u2192 login".encode("utf-8"))
        self.assertEqual(s.host.calls["prompt_get"], 0)

    async def test_dict_headers_and_json_body(self) -> None:
        decision = {"action": "respond", "status": 401,
                    "headers": {"Content-Type": "application/json", "WWW-Authenticate": "Bearer"},
                    "body_text": '{"error":"Authentication required","code":"AUTH_REQUIRED","statusCode":401}'}
        s = await self.start(lambda msg: decision)
        status, headers, body = await s.request("POST", "/prompt", json={"prompt": {}})
        self.assertEqual(status, 401)
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(headers["WWW-Authenticate"], "Bearer")
        self.assertEqual(json.loads(body)["code"], "AUTH_REQUIRED")
        self.assertEqual(s.host.calls["prompt_post"], 0)

    async def test_without_body(self) -> None:
        s = await self.start(lambda msg: {"action": "respond", "status": 204})
        status, _, body = await s.get("/prompt")
        self.assertEqual(status, 204)
        self.assertEqual(body, b"")

    async def test_respond_on_unmatched_route(self) -> None:
        s = await self.start(lambda msg: {"action": "respond", "status": 401, "body_text": "login first"})
        status, _, body = await s.get("/no/such/route")
        self.assertEqual((status, body), (401, b"login first"))

    async def test_deny_for_file_static_and_sub_app(self) -> None:
        s = await self.start(lambda msg: {"action": "respond", "status": 403, "body_text": "no"})
        for path in ("/view?filename=image.png", "/extensions/demo/app.js", "/internal/logs"):
            status, _, body = await s.get(path)
            self.assertEqual((status, body), (403, b"no"), path)
        self.assertEqual(sum(s.host.calls.values()), 0)


def filtering(name: str, ctx, answer: dict):
    def script(msg: dict) -> dict:
        if msg["type"] == "decide":
            return {"action": "pass", "filter": {"name": name, "ctx": ctx}}
        if msg["type"] == "filter":
            return answer
        raise AssertionError(msg)

    return script


class Filter(PluginCase):
    async def test_replace(self) -> None:
        replaced = {"queue_running": [[1, "p1", {}, {"client_id": "alice"}, []]], "queue_pending": []}
        s = await self.start(filtering("queue", {"user": "alice"},
                                       {"action": "replace", "body_text": json.dumps(replaced)}))
        status, headers, body = await s.get("/queue")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), replaced)
        self.assertEqual(int(headers["Content-Length"]), len(body))
        self.assertEqual(headers["X-Authsvc-Version"], s.plugin_version)
        filters = s.fake.of_type("filter")
        self.assertEqual(len(filters), 1)
        f = filters[0]
        self.assertEqual(f["name"], "queue")
        self.assertEqual(f["ctx"], {"user": "alice"})
        self.assertEqual(f["status"], 200)
        self.assertEqual(f["content_type"], "application/json")
        self.assertEqual(json.loads(f["body_text"]), s.host.queue_body)
        self.assertEqual(s.host.calls["queue"], 1)

    async def test_replace_with_longer_body(self) -> None:
        bigger = {"padding": "x" * 5000}
        s = await self.start(filtering("queue", None, {"action": "replace", "body_text": json.dumps(bigger)}))
        status, _, body = await s.get("/queue")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), bigger)

    async def test_keep(self) -> None:
        s = await self.start(filtering("queue", None, {"action": "keep"}))
        status, _, body = await s.get("/queue")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), s.host.queue_body)
        self.assertEqual(len(s.fake.of_type("filter")), 1)

    async def test_respond_from_filter(self) -> None:
        s = await self.start(filtering("queue", None, {"action": "respond", "status": 403, "body_text": "nope"}))
        status, _, body = await s.get("/queue")
        self.assertEqual((status, body), (403, b"nope"))

    async def test_non_2xx_host_response_passes_untouched(self) -> None:
        s = await self.start(filtering("queue", None, {"action": "replace", "body_text": "[]"}))
        status, _, body = await s.get("/forbidden")
        self.assertEqual(status, 403)
        self.assertEqual(json.loads(body), {"error": "host says no"})
        status, _, body = await s.get("/raises")
        self.assertEqual((status, body), (404, b"host raised"))
        self.assertEqual(s.fake.of_type("filter"), [])

    async def test_unreadable_2xx_fails_closed(self) -> None:
        """A 2xx that cannot be read (a file) cannot be filtered: refuse rather than leak it."""
        s = await self.start(filtering("queue", None, {"action": "keep"}))
        status, _, body = await s.get("/view?filename=image.png")
        assert_unavailable(self, status, body)

    async def test_bad_filter_answer_fails_closed(self) -> None:
        # (protocol v2: a `replace` carries its body as the frame's payload, so a bare replace is an empty body)
        for answer in ({"action": "shrug"}, {"action": None}, {"body_text": "[]"}):
            with self.subTest(answer=answer):
                s = await self.start(filtering("queue", None, answer))
                status, _, body = await s.get("/queue")
                assert_unavailable(self, status, body)
                self.assertNotIn(b"p2", body)

    async def test_filter_timeout_fails_closed(self) -> None:
        async def script(msg: dict):
            if msg["type"] == "decide":
                return {"action": "pass", "filter": {"name": "queue", "ctx": None}}
            await asyncio.sleep(3)
            return {"action": "keep"}

        s = await self.start(script, timeout_ms=200)
        status, _, body = await s.get("/queue")
        assert_unavailable(self, status, body)


class WebSocketGate(PluginCase):
    async def test_deny_before_the_handler(self) -> None:
        s = await self.start(lambda msg: {"action": "respond", "status": 401, "body_text": "login first"})
        with self.assertRaises(aiohttp.WSServerHandshakeError) as raised:
            await s.session.ws_connect(s.url + "/ws?clientId=c1")
        self.assertEqual(raised.exception.status, 401)
        self.assertEqual(s.host.calls["ws"], 0)

    async def test_pass_frames_flow_both_ways(self) -> None:
        s = await self.start(lambda msg: {"action": "pass", "set_headers": {"comfy-user": "alice"}})
        async with s.session.ws_connect(s.url + "/ws?clientId=c1") as ws:
            first = await ws.receive_json(timeout=5)
            self.assertEqual(first["type"], "status")
            await ws.send_str("hello")
            self.assertEqual(await ws.receive_str(timeout=5), "echo:hello")
            await ws.send_bytes(b"\x00\x00\x00\x01png")
            self.assertEqual(await ws.receive_bytes(timeout=5), b"echo:\x00\x00\x00\x01png")
            for i in range(20):
                await ws.send_str(f"m{i}")
            for i in range(20):
                self.assertEqual(await ws.receive_str(timeout=5), f"echo:m{i}")
        self.assertEqual(s.host.calls["ws"], 1)
        self.assertEqual(s.host.seen["ws"]["headers"]["comfy-user"], "alice")
        self.assertEqual(len(s.fake.decides()), 1, "one decision per upgrade, none per frame")

    async def test_sidecar_down_refuses_the_upgrade(self) -> None:
        s = await self.start()
        await s.fake.stop()
        with self.assertRaises(aiohttp.WSServerHandshakeError) as raised:
            await s.session.ws_connect(s.url + "/ws")
        self.assertEqual(raised.exception.status, 503)
        self.assertEqual(s.host.calls["ws"], 0)



class NarrowPrompts(unittest.TestCase):
    """narrow_prompts: a /queue or /history answer too large for a frame keeps only the prompts the
    sidecar names, serialised as the host serialises its own answers (json.dumps)."""

    def setUp(self) -> None:
        self.narrow = plugin_module("response_filter").narrow_prompts

    def test_queue_keeps_the_named_items_in_order(self) -> None:
        queue = {"queue_running": [[0, "a", {"seed": 18446744073709551615}, {}, []]], "queue_pending": [[1, "b", {}, {}, []], [2, "c", {}, {}, []]]}
        out = self.narrow(json.dumps(queue).encode(), {"a", "c"})
        self.assertEqual(out, json.dumps({"queue_running": queue["queue_running"], "queue_pending": [queue["queue_pending"][1]]}).encode())
        self.assertIn(b"18446744073709551615", out)

    def test_history_keeps_the_host_order(self) -> None:
        history = {"x": {"n": 1}, "y": {"n": 2}, "z": {"n": 3}}
        self.assertEqual(self.narrow(json.dumps(history).encode(), {"z", "x"}), b'{"x": {"n": 1}, "z": {"n": 3}}')

    def test_other_shapes_are_none(self) -> None:
        for body in (b"[1, 2]", b"not json", b'"text"'):
            self.assertIsNone(self.narrow(body, {"a"}))
