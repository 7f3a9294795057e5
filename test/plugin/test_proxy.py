"""proxy decisions: the request is streamed to the sidecar's HTTP socket and its answer streamed back."""
from __future__ import annotations

import hashlib
import json

from .support import BIG_BODY_SIZE, PROTOCOL_VERSION, PluginCase, assert_unavailable, big_body, big_body_sha256, raw_http


def proxy_authsvc(msg: dict) -> dict:
    if msg["path"].startswith("/authsvc/"):
        return {"action": "proxy"}
    return {"action": "pass"}


class Proxy(PluginCase):
    async def test_request_and_answer_are_relayed(self) -> None:
        s = await self.start(proxy_authsvc)
        payload = json.dumps({"username": "alice", "password": "pw"}).encode()
        request = (b"POST /authsvc/login?next=%2Fprompt&a=1 HTTP/1.1\r\nHost: comfy.test\r\n"
                   b"Content-Type: application/json\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n"
                   b"X-Authsvc-Peer: 6.6.6.6\r\nX-Authsvc-Scheme: https\r\nx-authsvc-user: root\r\n"
                   b"Cookie: sid=1\r\nCookie: csrf=2\r\nOrigin: http://comfy.test\r\nConnection: close\r\n\r\n"
                   + payload)
        response = await raw_http(s.port, request)
        self.assertEqual(response.status, 201, response.body)
        self.assertEqual([v for k, v in response.headers if k.lower() == "set-cookie"],
                         ["sid=abc; Path=/; HttpOnly", "csrf=xyz; Path=/"])
        self.assertEqual(response.header("X-Owned-By"), "sidecar")
        answer = response.json()
        self.assertEqual(answer["path"], "/authsvc/login?next=%2Fprompt&a=1")
        self.assertEqual(answer["sha256"], hashlib.sha256(payload).hexdigest())
        self.assertEqual(len(s.http.requests), 1)
        seen = s.http.requests[0]
        self.assertEqual(seen["method"], "POST")
        self.assertEqual(seen["raw_path"], "/authsvc/login?next=%2Fprompt&a=1")
        headers = seen["headers"]
        self.assertEqual([v for k, v in headers if k == "x-authsvc-peer"], ["127.0.0.1"])
        self.assertEqual([v for k, v in headers if k == "x-authsvc-scheme"], ["http"])
        self.assertEqual([v for k, v in headers if k == "x-authsvc-user"], [], "client x-authsvc-* must be stripped")
        self.assertEqual(dict(headers)["origin"], "http://comfy.test")
        self.assertEqual(dict(headers)["host"], "comfy.test", "the sidecar sees the Host the client used")
        cookies = "; ".join(v for k, v in headers if k == "cookie")
        self.assertEqual(sorted(cookies.split("; ")), ["csrf=2", "sid=1"])
        self.assertEqual(sum(s.host.calls.values()), 0)

    async def test_big_answer_streams_back_intact(self) -> None:
        s = await self.start(proxy_authsvc)
        async with s.session.get(s.url + "/authsvc/big") as resp:
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.headers.getall("Set-Cookie"), ["big1=1; Path=/", "big2=2; Path=/"])
            digest = hashlib.sha256()
            size = 0
            async for chunk in resp.content.iter_chunked(1 << 16):
                digest.update(chunk)
                size += len(chunk)
        self.assertEqual(size, BIG_BODY_SIZE)
        self.assertEqual(digest.hexdigest(), big_body_sha256(BIG_BODY_SIZE))

    async def test_big_request_streams_to_the_sidecar(self) -> None:
        s = await self.start(proxy_authsvc)
        size = BIG_BODY_SIZE

        async def gen():
            for piece in big_body(size, seed=3):
                yield piece

        status, _, body = await s.request("PUT", "/authsvc/workflows/big.json", data=gen())
        self.assertEqual(status, 201, body[:200])
        self.assertEqual(s.http.requests[-1]["size"], size)
        self.assertEqual(s.http.requests[-1]["sha256"], big_body_sha256(size, seed=3))

    async def test_sidecar_http_socket_down_is_503(self) -> None:
        s = await self.start(proxy_authsvc, sidecar_http=False)
        status, _, body = await s.get("/authsvc/login")
        assert_unavailable(self, status, body)
        # other routes are unaffected
        self.assertEqual((await s.get("/prompt"))[0], 200)

    async def test_hello_without_http_socket_is_503(self) -> None:
        def no_http(msg: dict) -> dict:
            return {"type": "hello", "protocol": PROTOCOL_VERSION, "sidecar_version": "test"}

        s = await self.start(proxy_authsvc, hello=no_http)
        status, _, body = await s.get("/authsvc/login")
        assert_unavailable(self, status, body)

    async def test_sidecar_http_restart_is_picked_up(self) -> None:
        s = await self.start(proxy_authsvc)
        self.assertEqual((await s.get("/authsvc/a"))[0], 201)
        await s.http.stop()
        status, _, body = await s.get("/authsvc/a")
        assert_unavailable(self, status, body)
        await s.http.start()
        await s.wait_status("/authsvc/a", 201)
