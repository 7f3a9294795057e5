"""The plain stand-in's routes and simple answers, over real HTTP against `main.py` in a subprocess:
the route table and /api twins as ComfyUI's, HEAD on every GET, static files and 404/405, the
fixture shapes and live model lists, the origin check, and the control port's request counter.

Run from the repository root:
    /usr/bin/python3 -m unittest discover -s test/host-standin -p 'test_*.py'
"""
from __future__ import annotations

import hashlib
import os
import re
import unittest

import aiohttp
from yarl import URL

from standin_harness import MAIN, OLD_AIOHTTP, HostCase, fixture, fixture_text, safetensors


class HostTest(HostCase):
    # ------------------------------------------------------------------ routing
    async def test_route_table_matches_comfyui(self):
        table = await self.control_get("/routes")
        have = [(r["method"], r["path"]) for r in table]
        expected = []
        for line in fixture_text("routes.txt").splitlines()[1:]:
            m = re.match(r"^([A-Z]+) (/\S*)$", line)
            if m:
                expected.append((m.group(1), m.group(2)))
        self.assertGreater(len(expected), 70)
        for method, path in expected:
            if path.startswith("/internal"):
                self.assertIn((method, path), have)
                self.assertNotIn((method, "/api" + path), have)
            else:
                self.assertIn((method, path), have)
                self.assertIn((method, "/api" + path), have)
                # the /api twin is registered first
                self.assertLess(have.index((method, "/api" + path)), have.index((method, path)))
        # static web root last; nothing else besides the fixture routes
        self.assertEqual(table[-1]["kind"], "StaticResource")
        extra = {p for p in have if p not in expected and (p[0], p[1][4:]) not in expected}
        self.assertEqual({p for p in extra if p[1] != ""}, set())

    async def test_head_on_every_get(self):
        for path in ["/", "/prompt", "/api/prompt", "/queue", "/history", "/object_info", "/models", "/models/checkpoints",
                     "/embeddings", "/extensions", "/features", "/system_stats", "/settings", "/users",
                     "/userdata?dir=.", "/v2/userdata", "/experiment/models", "/workflow_templates", "/i18n",
                     "/internal/logs", "/internal/folder_paths", "/assets/app.js", "/view?filename=example.png&type=input"]:
            async with self.http.get(self.u(path)) as g:
                gbody = await g.read()
            async with self.http.head(self.u(path)) as h:
                hbody = await h.read()
            self.assertEqual(h.status, g.status, path)
            self.assertIn(g.status, (200,), path)
            self.assertEqual(hbody, b"", path)
            if not path.startswith("/internal/logs"):  # the log grows between the two requests
                self.assertEqual(h.headers.get("Content-Length"), str(len(gbody)), path)

    async def test_api_twins_answer_the_same(self):
        for path in ["/prompt", "/models", "/features", "/embeddings", "/object_info/SaveImage", "/models/loras"]:
            self.assertEqual(await self.get_json(path), await self.get_json("/api" + path), path)

    async def test_index_static_and_404_405(self):
        async with self.http.get(self.u("/")) as r:
            self.assertEqual(r.status, 200)
            self.assertIn("<html", await r.text())
            self.assertEqual(r.headers["Cache-Control"], "no-cache")
        async with self.http.get(self.u("/assets/app.js")) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("application/javascript"))
        async with self.http.get(self.u("/no/such/file.js")) as r:
            self.assertEqual(r.status, 404)
        async with self.http.post(self.u("/no/such/route")) as r:
            self.assertEqual(r.status, 405)  # the static web root answers GET/HEAD for every path
        async with self.http.get(self.u("/userdata/workflows/demo.json")) as r:
            self.assertEqual(r.status, 404)
            self.assertEqual(await r.text(), "404: Not Found" if OLD_AIOHTTP else "")

    # ------------------------------------------------------------------ simple shapes
    async def test_fixture_shapes(self):
        self.assertEqual(await self.get_json("/features"), fixture("features.json"))
        self.assertEqual(await self.get_json("/extensions"), fixture("extensions.json"))
        self.assertEqual(await self.get_json("/models"), fixture("models.json"))
        self.assertEqual(await self.get_json("/models/checkpoints"), fixture("models-checkpoints.json"))
        self.assertEqual(await self.get_json("/models/loras"), fixture("models-loras.json"))
        self.assertEqual(await self.get_json("/embeddings"), fixture("embeddings.json"))
        prompt_info = await self.get_json("/prompt")
        self.assertEqual(set(prompt_info), set(fixture("prompt-get.json")))
        async with self.http.get(self.u("/models/nope")) as r:
            self.assertEqual((r.status, await r.read()), (404, b""))
            if OLD_AIOHTTP:
                self.assertEqual(r.headers["Content-Type"], "application/octet-stream")

        stats = await self.get_json("/system_stats")
        ref = fixture("system_stats.json")
        self.assertEqual(set(stats), set(ref))
        self.assertEqual(set(stats["system"]), set(ref["system"]))
        self.assertEqual(stats["system"]["argv"], [MAIN, *self.standin.args[2:]])
        self.assertEqual(stats["system"]["comfyui_version"], "0.3.64")

        self.assertEqual(await self.get_json("/workflow_templates"), {})
        self.assertEqual(await self.get_json("/i18n"), {})
        self.assertEqual(await self.get_json("/users"), {"storage": "server", "migrated": True})
        self.assertEqual(await self.get_json("/view_metadata/checkpoints?filename=sdxl/juggernaut-xl.safetensors"), {"title": "x"})
        for q in ["/view_metadata/checkpoints?filename=nope.safetensors", "/view_metadata/embeddings?filename=badhands.pt",
                  "/view_metadata/nope?filename=a.safetensors", "/view_metadata/checkpoints"]:
            async with self.http.get(self.u(q)) as r:
                self.assertEqual(r.status, 404, q)

        exp = await self.get_json("/experiment/models")
        self.assertNotIn("configs", [e["name"] for e in exp])
        self.assertEqual(exp[0], {"name": "checkpoints", "folders": [os.path.join(self.base, "models", "checkpoints")]})
        ckpts = await self.get_json("/experiment/models/checkpoints")
        self.assertEqual(sorted(c["name"] for c in ckpts), fixture("models-checkpoints.json"))
        self.assertEqual(set(ckpts[0]), {"name", "pathIndex", "modified", "created", "size"})

        fp = await self.get_json("/internal/folder_paths")
        self.assertEqual(list(fp), fixture("models.json"))
        self.assertEqual(fp["diffusion_models"], [os.path.join(self.base, "models", "unet"), os.path.join(self.base, "models", "diffusion_models")])
        self.assertIn("example.png", await self.get_json("/internal/files/input"))
        self.assertEqual(await self.get_json("/internal/files/bogus", status=400), {"error": "Invalid directory type"})
        self.assertIsInstance(await self.get_json("/internal/logs"), str)
        raw = await self.get_json("/internal/logs/raw")
        self.assertEqual(set(raw), {"entries", "size"})
        async with self.http.patch(self.u("/internal/logs/subscribe"), json={"clientId": "x", "enabled": True}) as r:
            self.assertEqual(r.status, 200)

    async def test_object_info_live_model_lists(self):
        info = await self.get_json("/object_info")
        ref = fixture("object_info.json")
        self.assertEqual(list(info)[:len(ref)], list(ref))
        for extra in ("UpscaleModelLoader", "StandinSleep"):
            self.assertIn(extra, info)
        self.assertEqual(info["CheckpointLoaderSimple"]["input"]["required"]["ckpt_name"][0], fixture("models-checkpoints.json"))
        self.assertEqual(info["CheckpointLoaderSimple"]["input"]["required"]["ckpt_name"][1], ref["CheckpointLoaderSimple"]["input"]["required"]["ckpt_name"][1])
        self.assertEqual(info["LoraLoader"]["input"]["required"]["lora_name"][0], fixture("models-loras.json"))
        self.assertEqual(info["VAELoader"]["input"]["required"]["vae_name"][0], ["vae-ft-mse.safetensors", "pixel_space"])
        self.assertEqual(info["UpscaleModelLoader"]["input"]["required"]["model_name"][0], ["4x-ultrasharp.pth"])
        self.assertEqual(info["PhotoMakerLoader"]["input"]["required"]["photomaker_model_name"][1]["options"], [])
        self.assertEqual(info["LoadImage"]["input"]["required"]["image"][0], ["example.png"])
        self.assertEqual(info["KSampler"], ref["KSampler"])
        # a new model file shows up immediately
        path = os.path.join(self.base, "models", "checkpoints", "zz-new.safetensors")
        with open(path, "wb") as f:
            f.write(safetensors({}))
        try:
            one = await self.get_json("/object_info/CheckpointLoaderSimple")
            self.assertEqual(list(one), ["CheckpointLoaderSimple"])
            self.assertEqual(one["CheckpointLoaderSimple"]["input"]["required"]["ckpt_name"][0][-1], "zz-new.safetensors")
        finally:
            os.remove(path)
        self.assertEqual(await self.get_json("/object_info/NoSuchNode"), {})

    # ------------------------------------------------------------------ middlewares, counter
    async def test_origin_check_and_options(self):
        host = URL(self.standin.url).authority
        async with self.http.post(self.u("/prompt"), data=b"{}", headers={"Origin": "http://evil.example"}) as r:
            self.assertEqual(r.status, 403)
        async with self.http.get(self.u("/prompt"), headers={"Origin": "http://" + host}) as r:
            self.assertEqual(r.status, 200)
        await self.http.post(self.standin.control + "/counter/reset")
        async with self.http.options(self.u("/prompt")) as r:
            self.assertEqual((r.status, await r.read()), (200, b""))
        self.assertEqual((await self.control_get("/counter"))["total"], 0)  # OPTIONS never reaches a handler

    async def test_counter_and_last_request(self):
        await self.http.post(self.standin.control + "/counter/reset")
        async with self.http.get(self.u("/api/prompt?token=abc"), headers={"comfy-user": "bob"}) as r:
            self.assertEqual(r.status, 200)
        last = await self.control_get("/last-request")
        self.assertEqual((last["method"], last["path"], last["query_string"], last["route"]), ("GET", "/api/prompt", "token=abc", "GET /api/prompt"))
        self.assertEqual(last["headers"]["comfy-user"], "bob")
        self.assertEqual(last["body_length"], 0)

        body = b'{"Comfy.X": 1}'
        async with self.http.post(self.u("/settings"), data=body) as r:
            self.assertEqual(r.status, 200)
        last = await self.control_get("/last-request")
        self.assertEqual((last["body_sha256"], last["body_length"]), (hashlib.sha256(body).hexdigest(), len(body)))
        self.assertEqual(last["route"], "POST /settings")

        for method, path in [("GET", "/internal/logs"), ("GET", "/internal/nope"), ("POST", "/nope"),
                             ("GET", "/assets/app.js"), ("GET", "/userdata/a%2Fb.json")]:
            async with self.http.request(method, self.u(path)) as r:
                await r.read()
        form = aiohttp.FormData()
        form.add_field("image", b"abc", filename="c.bin")
        async with self.http.post(self.u("/upload/image"), data=form) as r:
            self.assertEqual(r.status, 200)
        last = await self.control_get("/last-request")
        self.assertTrue(last["body_streamed"])
        self.assertNotIn("body_sha256", last)
        counter = await self.control_get("/counter")
        self.assertEqual(counter["by_route"], {
            "GET /api/prompt": 1, "POST /settings": 1, "GET /internal/logs": 1, "GET <unmatched>": 1,
            "POST <unmatched>": 1, "GET ": 1, "GET /userdata/{file}": 1, "POST /upload/image": 1})
        self.assertEqual(counter["total"], 8)
        recent = await self.control_get("/requests")
        self.assertEqual(recent[-2]["match_info"], {"file": "a/b.json"})
        self.assertEqual(recent[-2]["raw_path"], "/userdata/a%2Fb.json")
        await self.http.post(self.standin.control + "/counter/reset")
        self.assertEqual(await self.control_get("/counter"), {"total": 0, "by_route": {}})
        self.assertIsNone(await self.control_get("/last-request"))
        mws = await self.control_get("/middlewares")
        self.assertEqual(mws, ["cache_control", "create_origin_only_middleware.<locals>.origin_only_middleware",
                               "HandlerCounter.middleware.<locals>.standin_handler_counter"])


if __name__ == "__main__":
    unittest.main()
