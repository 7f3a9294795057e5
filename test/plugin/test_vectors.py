"""Shared vectors (shared/vectors/decisions.json), plugin side: each request, routed by an
app with ComfyUI's route table (test/e2e/fixtures/routes.txt, /api twins added the way
ComfyUI adds them, the /internal sub-app, the static web root), is described as the vector
says. The TypeScript side (test/unit/vectors.test.ts) checks the decisions."""
from __future__ import annotations

import importlib
import json
import os
import re
import sys
import tempfile
import types
import unittest

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from .support import plugin_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_plugin_module = plugin_module


async def _handler(request: web.Request) -> web.Response:
    return web.Response(text="host")


def comfyui_shaped_app(web_root: str) -> web.Application:
    with open(os.path.join(ROOT, "test", "e2e", "fixtures", "routes.txt"), encoding="utf-8") as f:
        table = [m.groups() for m in (re.match(r"^(GET|POST|PUT|PATCH|DELETE) (/\S*)$", line.strip()) for line in f) if m]
    app = web.Application()
    internal = web.Application()
    routes = web.RouteTableDef()
    for method, path in table:
        if path.startswith("/internal"):
            internal.router.add_route(method, path[len("/internal"):], _handler)
        else:
            routes.route(method, path)(_handler)
    api = web.RouteTableDef()
    for route in routes:
        assert isinstance(route, web.RouteDef)
        api.route(route.method, "/api" + route.path)(route.handler)
    app.add_routes(api)
    app.add_routes(routes)
    app.add_subapp("/internal", internal)
    app.router.add_static("/", web_root)
    return app


class SharedVectors(unittest.IsolatedAsyncioTestCase):
    async def test_descriptions_match_the_vectors(self) -> None:
        describe = _plugin_module("describe")
        with open(os.path.join(ROOT, "shared", "vectors", "decisions.json"), encoding="utf-8") as f:
            vectors = json.load(f)["vectors"]
        self.assertGreater(len(vectors), 10)
        with tempfile.TemporaryDirectory() as web_root:
            os.makedirs(os.path.join(web_root, "assets"))
            with open(os.path.join(web_root, "assets", "app.js"), "w") as f:
                f.write("//")
            app = comfyui_shaped_app(web_root)
            app.freeze()
            for vector in vectors:
                with self.subTest(vector["name"]):
                    req = vector["request"]
                    request = make_mocked_request(req["method"], req["path"], headers=req["headers"], app=app)
                    match_info = await app.router.resolve(request)
                    match_info.add_app(app)
                    request._match_info = match_info  # what aiohttp sets before the middlewares run
                    described = describe.describe(request)
                    for key, expected in vector["description"].items():
                        actual = described[key]
                        if isinstance(expected, dict) and isinstance(actual, dict):
                            actual = {k: actual.get(k) for k in expected}
                        self.assertEqual(actual, expected, f"{vector['name']}: {key}")


if __name__ == "__main__":
    unittest.main()


class FrameVectors(unittest.TestCase):
    """Protocol v3 frames byte for byte (shared/vectors/frames.json): the plugin encodes each
    message with its payload to exactly the shared bytes, and decodes them back."""

    def test_frames_match_the_vectors(self) -> None:
        protocol = _plugin_module("protocol")
        with open(os.path.join(ROOT, "shared", "vectors", "frames.json"), encoding="utf-8") as f:
            spec = json.load(f)
        self.assertEqual(spec["protocol"], protocol.PROTOCOL_VERSION)
        for vector in spec["vectors"]:
            with self.subTest(vector["name"]):
                frame = bytes.fromhex(vector["frame_hex"])
                payload = vector["payload_utf8"].encode("utf-8")
                self.assertEqual(protocol.encode_frame(vector["message"], payload), frame)
                decoder = protocol.FrameDecoder()
                self.assertEqual(decoder.feed(frame[:5]), [], "half a frame is no message")
                self.assertEqual(decoder.feed(frame[5:]), [(vector["message"], payload)])
