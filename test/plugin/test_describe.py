"""DESIGN §2.2: the description names the route aiohttp matched, the raw path, and the policy's headers."""
from __future__ import annotations

import sys
from unittest import mock

from .support import PluginCase, raw_http


class Description(PluginCase):
    async def asyncSetUp(self) -> None:
        await super().asyncSetUp()
        self.s = await self.start()

    async def described(self, method: str, path: str, **kw) -> dict:
        self.s.fake.clear()
        await self.s.request(method, path, **kw)
        decides = self.s.fake.decides()
        self.assertEqual(len(decides), 1, decides)
        return decides[0]

    async def test_plain_route(self) -> None:
        d = await self.described("GET", "/prompt?a=1&b=%20x")
        self.assertEqual(d["type"], "decide")
        self.assertIsInstance(d["id"], int)
        self.assertEqual(d["method"], "GET")
        self.assertEqual(d["path"], "/prompt")
        self.assertEqual(d["query"], "a=1&b=%20x")
        self.assertEqual(d["route"], {"pattern": "/prompt", "kind": "route"})
        self.assertEqual(d["route_status"], 200)
        self.assertEqual(d["match_info"], {})
        self.assertEqual(d["peer"], "127.0.0.1")
        self.assertEqual(d["scheme"], "http")
        d = await self.described("POST", "/prompt", json={"prompt": {}})
        self.assertEqual(d["method"], "POST")
        self.assertEqual(d["route"], {"pattern": "/prompt", "kind": "route"})
        self.assertEqual(d["headers"]["content-type"], "application/json")

    async def test_dynamic_route_raw_path_and_decoded_match_info(self) -> None:
        response = await raw_http(self.s.port, (
            b"GET /userdata/workflows%2Fa.json?dir=x%2Fy HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"))
        self.assertEqual(response.status, 200)
        d = self.s.fake.decides()[-1]
        self.assertEqual(d["route"], {"pattern": "/userdata/{file}", "kind": "route"})
        self.assertEqual(d["match_info"], {"file": "workflows/a.json"})
        self.assertEqual(d["path"], "/userdata/workflows%2Fa.json", "the raw path must not be decoded")
        self.assertEqual(d["query"], "dir=x%2Fy")
        self.assertEqual(self.s.host.seen["userdata_get"]["match_info"], {"file": "workflows/a.json"})

    async def test_encoded_dot_segments_stay_raw(self) -> None:
        response = await raw_http(self.s.port, (
            b"GET /userdata/..%2F..%2Fsecret HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"))
        self.assertEqual(response.status, 200)
        d = self.s.fake.decides()[-1]
        self.assertEqual(d["path"], "/userdata/..%2F..%2Fsecret")
        self.assertEqual(d["route"]["pattern"], "/userdata/{file}")
        self.assertEqual(d["match_info"], {"file": "../../secret"})

    async def test_static_route(self) -> None:
        d = await self.described("GET", "/extensions/demo/app.js")
        self.assertEqual(d["route"]["kind"], "static")
        self.assertEqual(d["route"]["pattern"], "/extensions/demo")
        self.assertEqual(d["route_status"], 200)
        self.assertEqual(d["match_info"], {"filename": "app.js"})

    async def test_sub_app_routes_carry_the_prefix(self) -> None:
        d = await self.described("GET", "/internal/logs")
        self.assertEqual(d["route"], {"pattern": "/internal/logs", "kind": "route"})
        self.assertEqual(d["route_status"], 200)
        d = await self.described("GET", "/internal/files/a%20b.txt")
        self.assertEqual(d["route"], {"pattern": "/internal/files/{name}", "kind": "route"})
        self.assertEqual(d["match_info"], {"name": "a b.txt"})
        self.assertEqual(d["path"], "/internal/files/a%20b.txt")
        self.assertEqual(self.s.host.calls["internal_file"], 1)

    async def test_unmatched_404(self) -> None:
        d = await self.described("GET", "/no/such/route?x=1")
        self.assertIsNone(d["route"])
        self.assertEqual(d["route_status"], 404)
        self.assertEqual(d["path"], "/no/such/route")
        self.assertEqual(d["match_info"], {})

    async def test_wrong_method_405(self) -> None:
        d = await self.described("DELETE", "/prompt")
        self.assertIsNone(d["route"])
        self.assertEqual(d["route_status"], 405)
        self.assertEqual(d["method"], "DELETE")

    async def test_headers_subset_lowercase_and_cookies_joined(self) -> None:
        response = await raw_http(self.s.port, (
            b"GET /prompt HTTP/1.1\r\n"
            b"Host: example.test:8188\r\n"
            b"Authorization: Bearer abc\r\n"
            b"Cookie: a=1\r\n"
            b"Cookie: b=2\r\n"
            b"Origin: http://example.test:8188\r\n"
            b"Sec-Fetch-Site: same-origin\r\n"
            b"Sec-Fetch-Mode: cors\r\n"
            b"Sec-Fetch-Dest: empty\r\n"
            b"Comfy-User: mallory\r\n"
            b"X-Forwarded-For: 10.0.0.1\r\n"
            b"X-Forwarded-Proto: https\r\n"
            b"X-Secret-Thing: not for the policy\r\n"
            b"User-Agent: test-agent\r\n"
            b"Connection: close\r\n\r\n"))
        self.assertEqual(response.status, 200)
        d = self.s.fake.decides()[-1]
        self.assertEqual(d["headers"], {
            "authorization": "Bearer abc",
            "cookie": "a=1; b=2",
            "origin": "http://example.test:8188",
            "sec-fetch-site": "same-origin",
            "sec-fetch-mode": "cors",
            "sec-fetch-dest": "empty",
            "comfy-user": "mallory",
            "x-forwarded-for": "10.0.0.1",
            "x-forwarded-proto": "https",
            "user-agent": "test-agent",
            "host": "example.test:8188",
        })
        self.assertEqual(d["scheme"], "http", "x-forwarded-proto is reported as a header, not trusted as scheme")

    async def test_websocket_upgrade_is_described(self) -> None:
        self.s.fake.clear()
        async with self.s.session.ws_connect(self.s.url + "/ws?clientId=c1") as ws:
            await ws.receive_json()
        d = self.s.fake.decides()[0]
        self.assertEqual(d["route"], {"pattern": "/ws", "kind": "route"})
        self.assertEqual(d["query"], "clientId=c1")
        self.assertEqual(d["headers"]["upgrade"].lower(), "websocket")

    async def test_non_utf8_header_bytes_are_still_decided(self) -> None:
        response = await raw_http(self.s.port, b"GET /prompt HTTP/1.1\r\nHost: t\r\nUser-Agent: caf\xe9\xff\r\n"
                                               b"Connection: close\r\n\r\n")
        self.assertEqual(response.status, 200)
        d = self.s.fake.decides()[-1]
        self.assertTrue(d["headers"]["user-agent"].startswith("caf"))

    async def test_a_remembered_description_is_the_description_of_exactly_those_header_lines(self) -> None:
        """The fields are remembered by the raw header lines (keep-alive clients repeat them); every
        row is a request whose lines differ from the one before, and each must be described as sent,
        also after a request that looked the same but for one line, and after the memo started over."""
        rows = [
            ([b"Authorization: Bearer a"], {"authorization": "Bearer a"}),
            ([b"Authorization: Bearer a"], {"authorization": "Bearer a"}),
            ([b"Authorization: Bearer b"], {"authorization": "Bearer b"}),
            ([b"Authorization: Bearer a", b"X-Forwarded-For: 10.0.0.1"], {"authorization": "Bearer a", "x-forwarded-for": "10.0.0.1"}),
            ([b"Authorization: Bearer a", b"X-Forwarded-For: 10.0.0.1", b"X-Forwarded-For: 10.0.0.2"],
             {"authorization": "Bearer a", "x-forwarded-for": "10.0.0.1, 10.0.0.2"}),
            ([b"Authorization: Bearer a", b"X-Forwarded-For: 10.0.0.1"], {"authorization": "Bearer a", "x-forwarded-for": "10.0.0.1"}),
            ([b"Authorization: Bearer a", b"X-Unknown: 1"], {"authorization": "Bearer a"}),
            ([b"Authorization: Bearer a", b"Cookie: s=1", b"Cookie: t=2"], {"authorization": "Bearer a", "cookie": "s=1; t=2"}),
            ([b"Authorization: Bearer a"], {"authorization": "Bearer a"}),
            ([], {}),
        ]

        async def described_lines(lines: list[bytes], path: bytes = b"/prompt") -> dict:
            head = b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n" + b"".join(line + b"\r\n" for line in lines)
            response = await raw_http(self.s.port, head + b"Connection: close\r\n\r\n")
            self.assertEqual(response.status, 200)
            return self.s.fake.decides()[-1]

        for round_ in range(2):
            for i, (lines, expected) in enumerate(rows):
                d = await described_lines(lines)
                got = {k: v for k, v in d["headers"].items() if k not in ("host", "connection")}
                self.assertEqual(got, expected, f"round {round_}, row {i}: {lines}")
                self.assertEqual((d["path"], d["query"]), ("/prompt", ""))
            # the same lines on other paths and queries are other descriptions
            for target, query in ((b"/queue?x=1", "x=1"), (b"/queue?x=2", "x=2"), (b"/queue", ""), (b"/queue?x=1", "x=1")):
                d = await described_lines(rows[0][0], target)
                self.assertEqual((d["path"], d["query"], d["route"]["pattern"]), ("/queue", query, "/queue"))
            # many different clients (past the memo's bound, lowered here): the memo starts over,
            # and the answers stay right
            describe = sys.modules[f"{self.s.plugin.__name__}.describe"]
            with mock.patch.object(describe, "_RAW_MEMO_MAX", 16):
                for n in range(16 + 5):
                    d = await described_lines([b"Authorization: Bearer n%d" % n])
                    self.assertEqual(d["headers"]["authorization"], f"Bearer n{n}")
                self.assertTrue(0 < len(describe._RAW_MEMO) < 16, f"it started over: {len(describe._RAW_MEMO)} held")
