"""Many requests in flight on one connection (answers out of order), and uploads that stream through."""
from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time

from .support import PluginCase, big_body, big_body_sha256


class ManyInFlight(PluginCase):
    async def test_fifty_concurrent_requests_get_their_own_decision(self) -> None:
        rng = random.Random(20240601)
        delays = {f"/echo/{i}": rng.uniform(0.0, 0.15) for i in range(50)}
        answered: list[str] = []

        async def out_of_order(msg: dict) -> dict:
            await asyncio.sleep(delays[msg["path"]])
            answered.append(msg["path"])
            n = msg["path"].rsplit("/", 1)[1]
            if int(n) % 7 == 3:
                return {"action": "respond", "status": 403, "body_text": f"denied {n}"}
            return {"action": "pass", "set_headers": {"x-decided-for": msg["path"]}}

        s = await self.start()
        s.fake.decide = out_of_order

        async def one(i: int) -> tuple[int, int, bytes]:
            status, _, body = await s.get(f"/echo/{i}")
            return i, status, body

        results = await asyncio.gather(*(one(i) for i in range(50)))
        self.assertNotEqual(answered, sorted(answered, key=lambda p: int(p.rsplit("/", 1)[1])),
                            "the fake must have answered out of order for this test to mean anything")
        self.assertEqual(len(s.fake.decides()), 50)
        for i, status, body in results:
            if i % 7 == 3:
                self.assertEqual((status, body), (403, f"denied {i}".encode()))
            else:
                self.assertEqual(status, 200, body)
                self.assertEqual(json.loads(body), {"n": str(i), "decided_for": f"/echo/{i}"})
        self.assertEqual(s.host.calls["echo"], sum(1 for i in range(50) if i % 7 != 3))
        ids = [m["id"] for m in s.fake.decides()]
        self.assertEqual(len(set(ids)), 50, "every request in flight needs its own id")

    async def test_one_slow_decision_does_not_hold_the_others(self) -> None:
        release = asyncio.Event()

        async def script(msg: dict) -> dict:
            if msg["path"] == "/echo/slow":
                await release.wait()
            return {"action": "pass", "set_headers": {"x-decided-for": msg["path"]}}

        s = await self.start(script)
        slow = asyncio.ensure_future(s.get("/echo/slow"))
        for i in range(5):
            status, _, body = await s.get(f"/echo/{i}")
            self.assertEqual(json.loads(body)["decided_for"], f"/echo/{i}")
        self.assertFalse(slow.done())
        release.set()
        status, _, body = await slow
        self.assertEqual(json.loads(body)["decided_for"], "/echo/slow")


class Streaming(PluginCase):
    async def test_fifty_megabyte_upload_streams_through_a_pass(self) -> None:
        size = 50 * 1024 * 1024
        s = await self.start(lambda msg: {"action": "pass", "set_headers": {"comfy-user": "alice"}})
        boundary = "authsvcTestBoundary7MA4YWxkTrZu0gW"
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"big.bin\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode()
        tail = f"\r\n--{boundary}--\r\n".encode()

        async def gen():
            yield head
            for piece in big_body(size, seed=11):
                yield piece
            yield tail

        started = time.monotonic()
        status, _, body = await s.request(
            "POST", "/upload/image", data=gen(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                     "Content-Length": str(len(head) + size + len(tail))},
        )
        elapsed = time.monotonic() - started
        self.assertEqual(status, 200, body[:300])
        answer = json.loads(body)
        self.assertEqual(answer["size"], size)
        self.assertEqual(answer["sha256"], big_body_sha256(size, seed=11))
        with open(s.host.upload_dir + "/upload.bin", "rb") as f:
            digest = hashlib.sha256()
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        self.assertEqual(digest.hexdigest(), answer["sha256"])
        self.assertEqual(s.fake.of_type("body"), [], "the gate must not read an upload it was not asked to")
        self.assertEqual(len(s.fake.decides()), 1)
        self.assertEqual(s.fake.decides()[0]["headers"]["content-length"], str(len(head) + size + len(tail)))
        self.assertEqual(s.host.seen["upload"]["headers"]["comfy-user"], "alice")
        self.assertLess(elapsed, 30)

    async def test_chunked_upload_streams_through_a_pass(self) -> None:
        size = 8 * 1024 * 1024
        s = await self.start()
        boundary = "authsvcChunked"
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"c.bin\"\r\n\r\n").encode()
        tail = f"\r\n--{boundary}--\r\n".encode()

        async def gen():
            yield head
            for piece in big_body(size, seed=5):
                yield piece
            yield tail

        status, _, body = await s.request("POST", "/upload/image", data=gen(),
                                          headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        self.assertEqual(status, 200, body[:300])
        self.assertEqual(json.loads(body)["sha256"], big_body_sha256(size, seed=5))
        self.assertEqual(s.fake.of_type("body"), [])
