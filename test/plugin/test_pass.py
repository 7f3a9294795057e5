"""pass decisions: header and query edits, need_body (capped, replaceable), the version header."""
from __future__ import annotations

import asyncio
import json
import logging

from .support import LOGS, PluginCase, raw_http


def on_type(decide: dict, body: dict | None = None):
    """A script: ``decide`` for decide messages, ``body`` for body messages."""

    def script(msg: dict) -> dict:
        if msg["type"] == "decide":
            return decide
        if msg["type"] == "body" and body is not None:
            return body
        raise AssertionError(f"unexpected message {msg}")

    return script


class HeaderAndQueryEdits(PluginCase):
    async def test_set_and_strip_headers_reach_the_handler(self) -> None:
        s = await self.start(on_type({"action": "pass", "set_headers": {"comfy-user": "alice", "X-Extra": "1"},
                                      "strip_headers": ["authorization", "cookie"]}))
        status, headers, _ = await s.get("/prompt", headers={"Comfy-User": "mallory", "Authorization": "Bearer t",
                                                             "Cookie": "sid=1", "X-Kept": "yes"})
        self.assertEqual(status, 200)
        seen = s.host.seen["prompt_get"]["headers"]
        self.assertEqual(seen["comfy-user"], "alice")
        self.assertEqual(seen["x-extra"], "1")
        self.assertEqual(seen["x-kept"], "yes")
        self.assertNotIn("authorization", seen)
        self.assertNotIn("cookie", seen)
        self.assertEqual(headers["X-Authsvc-Version"], s.plugin_version)
        raw = s.host.seen["prompt_get"]["raw_headers"]
        self.assertIn(("comfy-user", "alice"), raw, "the raw header lines carry the edit too")
        self.assertNotIn("mallory", [v for _, v in raw])
        self.assertNotIn("authorization", [k for k, _ in raw])

    async def test_the_edit_reaches_the_handler_on_every_request_of_a_kept_decision(self) -> None:
        s = await self.start(on_type({"action": "pass", "set_headers": {"comfy-user": "alice"}, "strip_headers": ["authorization"],
                                      "cache": {"ms": 5000, "epoch": 0}}))
        for attempt in (1, 2):
            status, _, _ = await s.get("/prompt", headers={"Comfy-User": "mallory", "Authorization": "Bearer t"})
            self.assertEqual(status, 200)
            seen = s.host.seen["prompt_get"]
            self.assertEqual(seen["headers"]["comfy-user"], "alice", attempt)
            self.assertEqual([v for k, v in seen["raw_headers"] if k == "comfy-user"], ["alice"], attempt)
            self.assertNotIn("authorization", seen["headers"])
        self.assertEqual(len(s.fake.decides()), 1, "the second request was answered from the kept decision")

    async def test_set_header_replaces_every_client_copy(self) -> None:
        s = await self.start(on_type({"action": "pass", "set_headers": {"comfy-user": "alice"}}))
        response = await raw_http(s.port, b"GET /prompt HTTP/1.1\r\nHost: t\r\nComfy-User: mallory\r\n"
                                          b"comfy-user: eve\r\nConnection: close\r\n\r\n")
        self.assertEqual(response.status, 200)
        self.assertEqual(s.host.seen["prompt_get"]["headers"]["comfy-user"], "alice")

    async def test_drop_query_keeps_other_keys(self) -> None:
        s = await self.start(on_type({"action": "pass", "drop_query": ["token", "access_token"]}))
        status, _, _ = await s.get("/prompt?token=secret&keep=1&access_token=s2&keep=2&other=x%20y")
        self.assertEqual(status, 200)
        seen = s.host.seen["prompt_get"]
        self.assertEqual(seen["query"], [("keep", "1"), ("keep", "2"), ("other", "x y")])
        self.assertNotIn("secret", seen["path_qs"])
        self.assertNotIn("s2", seen["path_qs"])
        self.assertEqual(s.fake.decides()[0]["query"], "token=secret&keep=1&access_token=s2&keep=2&other=x%20y")

    async def test_drop_query_on_dynamic_route_keeps_match_info(self) -> None:
        s = await self.start(on_type({"action": "pass", "drop_query": ["token"]}))
        response = await raw_http(s.port, b"GET /userdata/workflows%2Fa.json?token=t&full_info=true HTTP/1.1\r\n"
                                          b"Host: t\r\nConnection: close\r\n\r\n")
        self.assertEqual(response.status, 200)
        seen = s.host.seen["userdata_get"]
        self.assertEqual(seen["query"], [("full_info", "true")])
        self.assertEqual(seen["match_info"], {"file": "workflows/a.json"})

    async def test_plain_pass_changes_nothing(self) -> None:
        s = await self.start()
        status, _, _ = await s.get("/prompt?token=t", headers={"Authorization": "Bearer x"})
        self.assertEqual(status, 200)
        seen = s.host.seen["prompt_get"]
        self.assertEqual(seen["query"], [("token", "t")])
        self.assertEqual(seen["headers"]["authorization"], "Bearer x")


class NeedBody(PluginCase):
    async def test_body_message_then_replacement_reaches_the_handler(self) -> None:
        ctx = {"principal": "alice", "route": "/prompt"}
        stamped = {"prompt": {"1": {"class_type": "X"}}, "extra_data": {"authsvc_user": "alice"}}
        s = await self.start(on_type(
            {"action": "pass", "set_headers": {"comfy-user": "alice"}, "need_body": {"max_bytes": 10_000, "ctx": ctx}},
            {"action": "pass", "body_text": json.dumps(stamped)},
        ))
        sent = {"prompt": {"1": {"class_type": "X"}}, "extra_data": {"authsvc_user": "mallory", "text": "é✓"}}
        status, _, body = await s.request("POST", "/prompt", json=sent)
        self.assertEqual(status, 200, body)
        bodies = s.fake.of_type("body")
        self.assertEqual(len(bodies), 1)
        self.assertEqual(bodies[0]["ctx"], ctx)
        self.assertEqual(json.loads(bodies[0]["body_text"]), sent)
        self.assertIsInstance(bodies[0]["id"], int)
        self.assertEqual(s.host.seen["prompt_post"]["body"], stamped)
        self.assertEqual(s.host.seen["prompt_post"]["headers"]["comfy-user"], "alice")
        self.assertEqual(json.loads(body)["received"], stamped)

    async def test_body_pass_without_replacement_keeps_the_original(self) -> None:
        s = await self.start(on_type({"action": "pass", "need_body": {"max_bytes": 10_000, "ctx": None}},
                                     {"action": "pass"}))
        status, _, _ = await s.request("POST", "/prompt", json={"prompt": {"a": 1}})
        self.assertEqual(status, 200)
        self.assertEqual(s.host.seen["prompt_post"]["body"], {"prompt": {"a": 1}})

    async def test_raw_body_route_gets_the_replacement_bytes(self) -> None:
        s = await self.start(on_type({"action": "pass", "need_body": {"max_bytes": 10_000, "ctx": 1}},
                                     {"action": "pass", "body_text": '{"nodes":[],"owner":"alice"}'}))
        status, _, _ = await s.request("POST", "/userdata/workflows%2Fa.json", data=b'{"nodes":[]}')
        self.assertEqual(status, 200)
        self.assertEqual(s.host.seen["userdata_post"]["body"], b'{"nodes":[],"owner":"alice"}')

    async def test_respond_after_body(self) -> None:
        s = await self.start(on_type(
            {"action": "pass", "need_body": {"max_bytes": 10_000, "ctx": "c"}},
            {"action": "respond", "status": 403, "headers": {"Content-Type": "application/json"},
             "body_text": '{"error":"model not allowed"}'},
        ))
        status, headers, body = await s.request("POST", "/prompt", json={"prompt": {}})
        self.assertEqual(status, 403)
        self.assertEqual(body, b'{"error":"model not allowed"}')
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(s.host.calls["prompt_post"], 0)

    async def test_body_over_max_with_content_length_is_413(self) -> None:
        s = await self.start(on_type({"action": "pass", "need_body": {"max_bytes": 100, "ctx": None}}))
        status, _, body = await s.request("POST", "/prompt", data=b"x" * 101,
                                          headers={"Content-Type": "application/json"})
        self.assertEqual(status, 413, body)
        self.assertEqual(json.loads(body)["code"], "PAYLOAD_TOO_LARGE")
        self.assertEqual(s.host.calls["prompt_post"], 0)
        self.assertEqual(s.fake.of_type("body"), [])

    async def test_body_exactly_max_is_accepted(self) -> None:
        payload = json.dumps({"prompt": "y" * 80}).encode()
        s = await self.start(on_type({"action": "pass", "need_body": {"max_bytes": len(payload), "ctx": None}},
                                     {"action": "pass"}))
        status, _, _ = await s.request("POST", "/prompt", data=payload)
        self.assertEqual(status, 200)
        self.assertEqual(s.host.calls["prompt_post"], 1)

    async def test_body_over_max_chunked_is_413(self) -> None:
        s = await self.start(on_type({"action": "pass", "need_body": {"max_bytes": 100, "ctx": None}}))
        chunk = b'{"prompt":"' + b"z" * 200 + b'"}'
        request = (b"POST /prompt HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   + b"%x\r\n" % 60 + chunk[:60] + b"\r\n"
                   + b"%x\r\n" % (len(chunk) - 60) + chunk[60:] + b"\r\n0\r\n\r\n")
        response = await raw_http(s.port, request)
        self.assertEqual(response.status, 413, response.body)
        self.assertEqual(response.json()["code"], "PAYLOAD_TOO_LARGE")
        self.assertEqual(s.host.calls["prompt_post"], 0)
        self.assertEqual(s.fake.of_type("body"), [])

    async def test_chunked_body_under_max_is_read(self) -> None:
        s = await self.start(on_type({"action": "pass", "need_body": {"max_bytes": 1000, "ctx": None}},
                                     {"action": "pass"}))

        async def gen():
            yield b'{"prompt":'
            await asyncio.sleep(0)
            yield b'{"n":1}}'

        status, _, _ = await s.request("POST", "/prompt", data=gen(), headers={"Content-Type": "application/json"})
        self.assertEqual(status, 200)
        self.assertEqual(s.fake.of_type("body")[0]["body_text"], '{"prompt":{"n":1}}')
        self.assertEqual(s.host.seen["prompt_post"]["body"], {"prompt": {"n": 1}})

    async def test_body_decision_timeout_is_503(self) -> None:
        async def script(msg: dict):
            if msg["type"] == "decide":
                return {"action": "pass", "need_body": {"max_bytes": 1000, "ctx": None}}
            await asyncio.sleep(3)
            return {"action": "pass"}

        s = await self.start(script, timeout_ms=200)
        status, _, body = await s.request("POST", "/prompt", json={"prompt": {}})
        self.assertEqual(status, 503, body)
        self.assertEqual(s.host.calls["prompt_post"], 0)


class ResponseHeaders(PluginCase):
    INERT = {"Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"}

    async def test_added_to_the_hosts_file_answer_on_every_request_of_a_kept_decision(self) -> None:
        s = await self.start(on_type({"action": "pass", "response_headers": self.INERT, "cache": {"ms": 5000, "epoch": 0}}))
        with open(s.host.view_file, "rb") as f:
            content = f.read()
        for attempt in (1, 2):
            status, headers, body = await s.get("/view?filename=image.png")
            self.assertEqual((status, body), (200, content), attempt)
            self.assertEqual(headers.getall("Content-Security-Policy"), ["sandbox"], attempt)
            self.assertEqual(headers.getall("X-Content-Type-Options"), ["nosniff"], attempt)
            self.assertEqual(headers["X-Authsvc-Version"], s.plugin_version)
        self.assertEqual(len(s.fake.decides()), 1, "the second request was answered from the kept decision")

    async def test_added_to_the_hosts_error_answer_and_absent_without_the_field(self) -> None:
        s = await self.start(on_type({"action": "pass", "response_headers": self.INERT}))
        status, headers, _ = await s.get("/forbidden")
        self.assertEqual(status, 403)
        self.assertEqual(headers.get("Content-Security-Policy"), "sandbox")
        s = await self.start(on_type({"action": "pass"}))
        status, headers, _ = await s.get("/view?filename=image.png")
        self.assertEqual(status, 200)
        self.assertNotIn("Content-Security-Policy", headers)
        self.assertNotIn("X-Content-Type-Options", headers)

    async def test_added_when_the_handler_raises_and_when_the_edit_copied_the_request(self) -> None:
        s = await self.start(on_type({"action": "pass", "response_headers": self.INERT, "drop_query": ["token"]}))
        status, headers, body = await s.get("/raises")
        self.assertEqual((status, body), (404, b"host raised"))
        self.assertEqual(headers.getall("Content-Security-Policy"), ["sandbox"], "an HTTPException the handler raised")
        status, headers, _ = await s.get("/view?filename=image.png&token=t")
        self.assertEqual(status, 200)
        self.assertNotIn("token", [k for k, _ in s.host.seen["view"]["query"]], "the edit made a copy of the request")
        self.assertEqual(headers.getall("X-Content-Type-Options"), ["nosniff"])

    async def test_a_websocket_the_handler_already_answered_is_left_as_it_is(self) -> None:
        s = await self.start(on_type({"action": "pass", "response_headers": self.INERT}))
        async with s.session.ws_connect(s.url + "/ws") as ws:
            self.assertEqual((await ws.receive_json())["type"], "status")
            await ws.send_str("hi")
            self.assertEqual((await ws.receive()).data, "echo:hi")

    async def test_a_wrong_shape_is_refused_before_the_handler(self) -> None:
        for bad in (["Content-Security-Policy", "sandbox"], {"Content-Security-Policy": 1}, "sandbox"):
            s = await self.start(on_type({"action": "pass", "response_headers": bad}))
            status, _, body = await s.get("/prompt")
            self.assertEqual(status, 503, bad)
            self.assertEqual(json.loads(body)["code"], "AUTHSVC_UNAVAILABLE")
            self.assertEqual(s.host.calls["prompt_get"], 0, bad)


class VersionHeader(PluginCase):
    async def test_version_header_on_passed_responses(self) -> None:
        s = await self.start()
        for path in ("/prompt", "/view?filename=image.png", "/extensions/demo/app.js", "/internal/logs",
                     "/forbidden", "/raises", "/no/such/route"):
            status, headers, _ = await s.get(path)
            self.assertEqual(headers.get("X-Authsvc-Version"), s.plugin_version, f"{path} -> {status}")

    async def test_file_response_streams_intact(self) -> None:
        s = await self.start()
        status, _, body = await s.get("/view?filename=image.png")
        self.assertEqual(status, 200)
        with open(s.host.view_file, "rb") as f:
            self.assertEqual(body, f.read())
        status, _, body = await s.get("/extensions/demo/app.js")
        self.assertEqual(status, 200)
        self.assertEqual(body, b"console.log('static');\n")

    async def test_host_404_and_405_pass_through(self) -> None:
        s = await self.start()
        self.assertEqual((await s.get("/no/such/route"))[0], 404)
        self.assertEqual((await s.request("DELETE", "/prompt"))[0], 405)
        status, _, body = await s.get("/raises")
        self.assertEqual(status, 404)
        self.assertEqual(body, b"host raised")


class HostErrors(PluginCase):
    async def test_host_handler_http_errors_are_the_hosts(self) -> None:
        s = await self.start()
        status, headers, body = await s.get("/raises")
        self.assertEqual((status, body), (404, b"host raised"))
        self.assertEqual(headers["X-Authsvc-Version"], s.plugin_version)

    async def test_host_handler_exception_is_not_reported_as_sidecar_failure(self) -> None:
        s = await self.start()
        status, _, body = await s.request("POST", "/prompt", data=b"{not json",
                                          headers={"Content-Type": "application/json"})
        self.assertEqual(LOGS.lines(logging.ERROR, containing="malformed decision"), [])
        self.assertEqual(status, 500, body)
