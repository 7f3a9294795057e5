"""Tests of the ComfyUI stand-in, over real HTTP against `main.py` in a subprocess.

Run from the repository root:
    /usr/bin/python3 -m unittest discover -s test/host-standin -p 'test_*.py'
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib

import aiohttp
from yarl import URL

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
MAIN = os.path.join(HERE, "main.py")
PYTHON = sys.executable or "/usr/bin/python3"
JSON_CT = "application/json; charset=utf-8"
PNG_SIG = b"\x89PNG\r\n\x1a\n"
AIOHTTP = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in aiohttp.__version__.split(".")[:2])
# aiohttp 3.8 (Debian) vs 3.11 (real installs): a bare web.Response has Content-Type
# application/octet-stream only on 3.8, and a missing static file is a raised HTTPNotFound
# on 3.8 but a *returned* FileResponse (status 200 until prepared, then 404, empty body) on 3.11.
OLD_AIOHTTP = AIOHTTP < (3, 9)


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return json.load(f)


def fixture_text(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def make_png(w, h, rgb):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes(rgb) * w for _ in range(h))
    return PNG_SIG + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def parse_png(data: bytes):
    assert data[:8] == PNG_SIG, "not a PNG"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        pos += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    w, h, depth, ctype = struct.unpack(">IIBB", chunks[0][1][:10])
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert depth == 8 and ctype == 2 and len(raw) == h * (1 + 3 * w)
    return w, h, {k: b for k, b in chunks}


def safetensors(meta: dict) -> bytes:
    header = json.dumps({"__metadata__": meta}).encode()
    return struct.pack("<Q", len(header)) + header


class Standin:
    """main.py in a subprocess, with READY/CONTROL lines parsed from stdout."""

    def __init__(self, base_dir, extra_args=()):
        self.base_dir = base_dir
        self.args = [PYTHON, MAIN, "--base-dir", base_dir, "--listen", "127.0.0.1", "--port", "0",
                     "--control-port", "0", *extra_args]
        self.lines: list[str] = []
        self.url = self.control = None

    def start(self, timeout=15.0):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=self.base_dir)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.output()
            m1 = re.search(r"STANDIN READY (http://\S+)", out)
            m2 = re.search(r"STANDIN CONTROL (http://\S+)", out)
            if m1 and m2:
                self.url, self.control = m1.group(1), m2.group(1)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("stand-in exited:\n" + out)
            time.sleep(0.02)
        self.proc.kill()
        raise RuntimeError("stand-in did not start:\n" + self.output())

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace"))

    def output(self):
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()
        return self.proc.returncode


class StandinCase(unittest.IsolatedAsyncioTestCase):
    standin: Standin

    async def asyncSetUp(self):
        self.http = aiohttp.ClientSession()

    async def asyncTearDown(self):
        await self.http.close()

    def u(self, path: str) -> URL:
        """URL sent exactly as written (no re-quoting)."""
        return URL(self.standin.url + path, encoded=True)

    async def get_json(self, path, status=200, **kw):
        async with self.http.get(self.u(path), **kw) as r:
            self.assertEqual(r.status, status, f"{path}: {await r.text()}")
            self.assertEqual(r.headers["Content-Type"], JSON_CT)
            return await r.json()

    async def post_json(self, path, body, status=200):
        async with self.http.post(self.u(path), data=json.dumps(body)) as r:
            text = await r.text()
            self.assertEqual(r.status, status, f"{path}: {text}")
            return json.loads(text) if text else None

    async def control_get(self, path):
        async with self.http.get(self.standin.control + path) as r:
            self.assertEqual(r.status, 200)
            return await r.json()

    async def wait_history(self, prompt_id, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            h = await self.get_json(f"/history/{prompt_id}")
            if prompt_id in h:
                return h[prompt_id]
            await asyncio.sleep(0.02)
        self.fail(f"prompt {prompt_id} did not finish")

    async def wait_idle(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while (await self.get_json("/prompt"))["exec_info"]["queue_remaining"]:
            if time.monotonic() > deadline:
                self.fail("queue did not drain")
            await asyncio.sleep(0.02)

    async def ws_collect_until_idle(self, ws, prompt_id, timeout=10.0):
        """Frames until `executing` with node null for prompt_id."""
        frames = []
        deadline = time.monotonic() + timeout
        while True:
            msg = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
            if msg.type == aiohttp.WSMsgType.TEXT:
                data = json.loads(msg.data)
                frames.append(data)
                if data["type"] == "executing" and data["data"]["node"] is None and data["data"].get("prompt_id") == prompt_id:
                    return frames
            elif msg.type == aiohttp.WSMsgType.BINARY:
                frames.append({"_binary": bytes(msg.data)})
            else:
                self.fail(f"ws closed: {msg}")


GRAPH = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 255}},
    "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "fixture-ws"}},
}


def sleep_graph(seconds, **extra):
    return {"1": {"class_type": "StandinSleep", "inputs": {"seconds": seconds, **extra}}}


# =========================================================================== plain host
class HostTest(StandinCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="standin-test-")
        base = cls.base = os.path.join(cls.tmp, "host")
        files = {
            "models/checkpoints/sd15-base.safetensors": safetensors({"title": "x"}),
            "models/checkpoints/sdxl/juggernaut-xl.safetensors": safetensors({"title": "x"}),
            "models/loras/detail-tweaker.safetensors": safetensors({"title": "x"}),
            "models/loras/styles/anime-lines.safetensors": safetensors({"title": "x"}),
            "models/vae/vae-ft-mse.safetensors": safetensors({"title": "x"}),
            "models/embeddings/easynegative.safetensors": safetensors({"title": "x"}),
            "models/embeddings/badhands.pt": b"junk",
            "models/upscale_models/4x-ultrasharp.pth": b"junk",
            "models/checkpoints/notes.txt": b"not a model",
            "input/example.png": make_png(2, 2, (1, 2, 3)),
        }
        for rel, data in files.items():
            path = os.path.join(base, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        os.makedirs(os.path.join(base, "custom_nodes"))
        os.makedirs(os.path.join(base, "user", "default"))
        cls.standin = Standin(base).start()

    @classmethod
    def tearDownClass(cls):
        rc = cls.standin.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"stand-in exit code {rc}:\n{cls.standin.output()}"

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

    # ------------------------------------------------------------------ prompts
    async def test_prompt_ws_history_view(self):
        await self.wait_idle()
        async with self.http.ws_connect(self.u("/ws?clientId=fixture-client")) as ws:
            first = await ws.receive_json(timeout=5)
            self.assertEqual(first["type"], "status")
            self.assertEqual(first["data"]["sid"], "fixture-client")
            await ws.send_json({"type": "feature_flags", "data": {"supports_preview_metadata": True}})
            ff = await ws.receive_json(timeout=5)
            self.assertEqual(ff, json.loads(fixture_text("ws-transcript.jsonl").splitlines()[1]))

            resp = await self.post_json("/prompt", {"prompt": GRAPH, "client_id": "fixture-client", "extra_data": {"owner_tag": "alice"}})
            self.assertEqual(list(resp), ["prompt_id", "number", "node_errors"])
            self.assertEqual(resp["node_errors"], {})
            pid = resp["prompt_id"]
            frames = await self.ws_collect_until_idle(ws, pid)

            ref = [json.loads(line) for line in fixture_text("ws-transcript.jsonl").splitlines()[2:]]
            self.assertEqual([f["type"] for f in frames], [f["type"] for f in ref])
            for got, want in zip(frames, ref):
                self.assertEqual(set(got["data"]), set(want["data"]), got["type"])
                if "prompt_id" in want["data"]:
                    self.assertEqual(got["data"]["prompt_id"], pid)
            executed = [f for f in frames if f["type"] == "executed"][0]["data"]
            self.assertEqual(executed["output"], {"images": [{"filename": "fixture-ws_00001_.png", "subfolder": "", "type": "output"}]})
            ref_pid = ref[2]["data"]["prompt_id"]
            self.assertEqual(frames[4]["data"], json.loads(json.dumps(ref[4]["data"]).replace(ref_pid, pid)))

            entry = await self.wait_history(pid)
            ref_entry = next(iter(fixture("history-one.json").values()))
            self.assertEqual(list(entry), list(ref_entry))
            self.assertEqual(entry["prompt"][:3], [resp["number"], pid, GRAPH])
            self.assertEqual(entry["prompt"][3], {"owner_tag": "alice", "client_id": "fixture-client"})
            self.assertEqual(entry["prompt"][4], ["2"])
            self.assertEqual(entry["outputs"], {"2": executed["output"]})
            self.assertEqual(entry["meta"], ref_entry["meta"])
            self.assertEqual([m[0] for m in entry["status"]["messages"]], ["execution_start", "execution_cached", "execution_success"])
            self.assertEqual(entry["status"]["status_str"], "success")
            self.assertEqual(await self.get_json("/history/" + pid), {pid: entry})

            async with self.http.get(self.u("/view?filename=fixture-ws_00001_.png&type=output")) as r:
                self.assertEqual(r.status, 200)
                self.assertEqual(r.headers["Content-Type"], "image/png")
                self.assertEqual(r.headers["Content-Disposition"], 'filename="fixture-ws_00001_.png"')
                self.assertIn("Etag", r.headers)
                w, h, chunks = parse_png(await r.read())
                self.assertEqual((w, h), (16, 16))
                self.assertEqual(json.loads(chunks[b"tEXt"].split(b"\0", 1)[1]), GRAPH)

            # the identical graph runs fully from cache: same output, no new file
            resp2 = await self.post_json("/prompt", {"prompt": GRAPH, "client_id": "fixture-client"})
            self.assertEqual(resp2["number"], resp["number"] + 1)
            frames2 = await self.ws_collect_until_idle(ws, resp2["prompt_id"])
            cached = [f for f in frames2 if f["type"] == "execution_cached"][0]
            self.assertEqual(cached["data"]["nodes"], ["1", "2"])
            entry2 = await self.wait_history(resp2["prompt_id"])
            self.assertEqual(entry2["outputs"], entry["outputs"])
            self.assertEqual(sorted(f for f in os.listdir(os.path.join(self.base, "output")) if f.startswith("fixture-ws")), ["fixture-ws_00001_.png"])

            # a new prefix writes the next counter; history paging
            g3 = json.loads(json.dumps(GRAPH))
            g3["2"]["inputs"]["filename_prefix"] = "sub/fixture-ws"
            resp3 = await self.post_json("/prompt", {"prompt": g3})
            entry3 = await self.wait_history(resp3["prompt_id"])
            self.assertEqual(entry3["outputs"]["2"]["images"], [{"filename": "fixture-ws_00001_.png", "subfolder": "sub", "type": "output"}])
            last = await self.get_json("/history?max_items=1")
            self.assertEqual(list(last), [resp3["prompt_id"]])

    async def test_binary_transcript_and_failure(self):
        await self.wait_idle()
        graph = {
            "1": {"class_type": "EmptyImage", "inputs": {"width": 48, "height": 32, "batch_size": 1, "color": 0}},
            "2": {"class_type": "GetImageSize", "inputs": {"image": ["1", 0]}},
            "3": {"class_type": "EmptyImage", "inputs": {"width": ["2", 0], "height": ["2", 1], "batch_size": 1, "color": 7}},
            "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "binframe"}},
        }
        async with self.http.ws_connect(self.u("/ws?clientId=bin-client")) as ws:
            await ws.receive_json(timeout=5)
            resp = await self.post_json("/prompt", {"prompt": graph, "client_id": "bin-client"})
            frames = await self.ws_collect_until_idle(ws, resp["prompt_id"])
            ref = [json.loads(line) for line in fixture_text("ws-transcript-binary.jsonl").splitlines()[2:]]
            self.assertEqual([f.get("type", "binary") for f in frames], [f.get("type", "binary") for f in ref])
            binary = next(f["_binary"] for f in frames if "_binary" in f)
            want = next(f for f in ref if "_frame" in f)
            self.assertEqual(binary.hex(), want["first8_hex"] + want["payload_hex"][8:])
            entry = await self.wait_history(resp["prompt_id"])
            with open(os.path.join(self.base, "output", entry["outputs"]["4"]["images"][0]["filename"]), "rb") as f:
                w, h, _ = parse_png(f.read())
            self.assertEqual((w, h), (16, 16))

            resp = await self.post_json("/prompt", {"prompt": sleep_graph(0, fail=True), "client_id": "bin-client"})
            frames = await self.ws_collect_until_idle(ws, resp["prompt_id"])
            err = [f for f in frames if f.get("type") == "execution_error"][0]["data"]
            self.assertEqual((err["node_id"], err["node_type"], err["exception_type"]), ("1", "StandinSleep", "RuntimeError"))
            entry = await self.wait_history(resp["prompt_id"])
            self.assertEqual((entry["status"]["status_str"], entry["status"]["messages"][-1][0]), ("error", "execution_error"))

    async def test_prompt_errors_and_numbers(self):
        first = await self.post_json("/prompt", {"prompt": sleep_graph(0)})
        body = await self.post_json("/prompt", {"client_id": "x"}, status=400)
        self.assertEqual(body, fixture("prompt-400-no-prompt.json"))
        body = await self.post_json("/prompt", {"prompt": {"1": {"class_type": "NoSuchNode", "inputs": {}}}, "client_id": "x"}, status=400)
        self.assertEqual(body, fixture("prompt-400-invalid.json"))
        bad = json.loads(json.dumps(GRAPH))
        del bad["2"]["inputs"]["filename_prefix"]
        body = await self.post_json("/prompt", {"prompt": bad}, status=400)
        self.assertEqual(body, fixture("prompt-400-validation.json"))
        body = await self.post_json("/prompt", {"prompt": {"1": {"class_type": "EmptyImage", "inputs": {}}}}, status=400)
        self.assertEqual(body["error"]["type"], "prompt_no_outputs")
        ckpt = {"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "missing.safetensors"}},
                "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}
        if "PreviewAny" in fixture("object_info.json"):
            body = await self.post_json("/prompt", {"prompt": ckpt}, status=400)
            self.assertEqual(body["node_errors"]["1"]["errors"][0]["type"], "value_not_in_list")
        last = await self.post_json("/prompt", {"prompt": sleep_graph(0)})
        n_400 = 5 if "PreviewAny" in fixture("object_info.json") else 4
        self.assertEqual(last["number"], first["number"] + 1 + n_400)  # rejected prompts use numbers too
        explicit = await self.post_json("/prompt", {"prompt": sleep_graph(0), "number": 7})
        self.assertEqual(explicit["number"], 7.0)
        async with self.http.post(self.u("/prompt"), data=b"not-json") as r:
            self.assertEqual(r.status, 500)
        await self.wait_history(explicit["prompt_id"])
        await self.wait_idle()

    async def test_queue_interrupt_and_secrets(self):
        await self.wait_idle()
        extra = {"owner_tag": "q1", "api_key_comfy_org": "SECRET", "auth_token_comfy_org": "TOKEN"}
        async with self.http.ws_connect(self.u("/ws?clientId=q-client")) as ws:
            await ws.receive_json(timeout=5)
            a = await self.post_json("/prompt", {"prompt": sleep_graph(10, text="hello"), "client_id": "q-client", "extra_data": extra})
            b = await self.post_json("/prompt", {"prompt": sleep_graph(10), "client_id": "q-client", "extra_data": {"owner_tag": "q2"}})
            c = await self.post_json("/prompt", {"prompt": sleep_graph(10), "client_id": "q-client"})
            deadline = time.monotonic() + 5
            while True:
                q = await self.get_json("/queue")
                if q["queue_running"] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.02)
            self.assertEqual(len(q["queue_running"]), 1)
            run = q["queue_running"][0]
            self.assertEqual(len(run), 5)
            self.assertEqual(run[:2], [a["number"], a["prompt_id"]])
            self.assertEqual(run[3], {**extra, "client_id": "q-client"})  # secrets included, like ComfyUI
            self.assertEqual(run[4], ["1"])
            self.assertEqual([p[1] for p in q["queue_pending"]], [b["prompt_id"], c["prompt_id"]])
            self.assertEqual((await self.get_json("/prompt"))["exec_info"]["queue_remaining"], 3)

            async with self.http.post(self.u("/queue"), json={"delete": [b["prompt_id"]]}) as r:
                self.assertEqual((r.status, await r.read()), (200, b""))
            self.assertEqual([p[1] for p in (await self.get_json("/queue"))["queue_pending"]], [c["prompt_id"]])
            async with self.http.post(self.u("/queue"), json={"clear": True}) as r:
                self.assertEqual(r.status, 200)
            self.assertEqual((await self.get_json("/queue"))["queue_pending"], [])

            # a targeted interrupt for another prompt does nothing; a global one stops the run
            async with self.http.post(self.u("/interrupt"), json={"prompt_id": b["prompt_id"]}) as r:
                self.assertEqual(r.status, 200)
            await asyncio.sleep(0.15)
            self.assertEqual(len((await self.get_json("/queue"))["queue_running"]), 1)
            async with self.http.post(self.u("/interrupt")) as r:
                self.assertEqual(r.status, 200)
            frames = await self.ws_collect_until_idle(ws, a["prompt_id"])
            types = [f.get("type") for f in frames]
            self.assertIn("execution_interrupted", types)
            self.assertNotIn("execution_success", types)
            binary = [f["_binary"] for f in frames if "_binary" in f]
            self.assertEqual(binary[0], struct.pack(">II", 3, 1) + b"1hello")

        entry = await self.wait_history(a["prompt_id"])
        self.assertEqual(entry["status"]["status_str"], "error")
        self.assertFalse(entry["status"]["completed"])
        self.assertEqual(entry["status"]["messages"][-1][0], "execution_interrupted")
        self.assertEqual(entry["prompt"][3], {"owner_tag": "q1", "client_id": "q-client"})  # secrets stripped
        raw = await self.control_get("/history-raw")
        self.assertEqual(raw[a["prompt_id"]]["prompt"][3], entry["prompt"][3])
        self.assertNotIn(b["prompt_id"], await self.get_json("/history"))

        async with self.http.post(self.u("/history"), json={"delete": [a["prompt_id"]]}) as r:
            self.assertEqual(r.status, 200)
        self.assertNotIn(a["prompt_id"], await self.get_json("/history"))
        async with self.http.post(self.u("/free"), json={"unload_models": True}) as r:
            self.assertEqual(r.status, 200)

    async def test_ws_reused_client_id_takes_over(self):
        await self.wait_idle()
        async with self.http.ws_connect(self.u("/ws?clientId=shared")) as ws1, \
                self.http.ws_connect(self.u("/api/ws?clientId=shared")) as ws2:
            await ws1.receive_json(timeout=5)
            await ws2.receive_json(timeout=5)
            self.assertIn("shared", await self.control_get("/sockets"))
            resp = await self.post_json("/prompt", {"prompt": sleep_graph(0), "client_id": "shared"})
            frames = await self.ws_collect_until_idle(ws2, resp["prompt_id"])
            self.assertIn("execution_start", [f["type"] for f in frames])
            # the first socket only gets broadcasts (status)
            got = []
            while True:
                try:
                    got.append((await ws1.receive_json(timeout=0.3))["type"])
                except asyncio.TimeoutError:
                    break
            self.assertTrue(set(got) <= {"status"}, got)
        async with self.http.ws_connect(self.u("/ws")) as ws3:
            first = await ws3.receive_json(timeout=5)
            self.assertRegex(first["data"]["sid"], r"^[0-9a-f]{32}$")
        async with self.http.get(self.u("/ws")) as r:
            self.assertEqual(r.status, 400)

    # ------------------------------------------------------------------ files
    async def test_upload_image(self):
        red, blue = make_png(2, 2, (255, 0, 0)), make_png(2, 2, (0, 0, 255))

        async def upload(data, path="/upload/image", **fields):
            form = aiohttp.FormData()
            if data is not None:
                form.add_field("image", data, filename="fixture-upload.png", content_type="image/png")
            for k, v in fields.items():
                form.add_field(k, v)
            async with self.http.post(self.u(path), data=form) as r:
                text = await r.text()
                return r.status, (json.loads(text) if r.status == 200 else None)

        self.assertEqual(await upload(red), (200, fixture("upload-image.json")))
        self.assertEqual(await upload(red), (200, fixture("upload-image-dup.json")))
        self.assertEqual(await upload(blue), (200, fixture("upload-image-rename.json")))
        self.assertEqual(await upload(blue), (200, fixture("upload-image-rename.json")))  # same content as "(1)"
        self.assertEqual(await upload(blue, overwrite="true"), (200, fixture("upload-image-overwrite.json")))
        with open(os.path.join(self.base, "input", "fixture-upload.png"), "rb") as f:
            self.assertEqual(f.read(), blue)
        self.assertEqual(await upload(red, subfolder="fixtures", type="input"), (200, fixture("upload-image-subfolder.json")))
        self.assertEqual(await upload(red, subfolder="../.."), (400, None))
        self.assertEqual(await upload(None, subfolder="x"), (400, None))
        self.assertEqual(await upload(red, type="temp"), (200, {"name": "fixture-upload.png", "subfolder": "", "type": "temp"}))
        self.assertEqual((await upload(red, type="bogus"))[0], 500)
        mask = await upload(red, path="/upload/mask", original_ref=json.dumps({"filename": "example.png", "type": "input"}))
        self.assertEqual(mask, (200, {"name": "fixture-upload (2).png", "subfolder": "", "type": "input"}))
        self.assertTrue(os.path.isfile(os.path.join(self.base, "input", "fixture-upload (2).png")))
        green = make_png(3, 3, (0, 255, 0))
        self.assertEqual((await upload(green, path="/upload/mask"))[0], 500)  # no original_ref: ComfyUI fails too
        self.assertEqual(os.listdir(os.path.join(self.base, ".standin-uploads")), [])

    async def test_upload_over_client_max_size_is_413_like_comfyui(self):
        # ComfyUI reads uploads with request.post(), which enforces client_max_size (100 MiB);
        # the stand-in does the same (it used to stream past it, which the real host never does)
        size = 101 * 1024 * 1024 + 3
        path = os.path.join(self.tmp, "big.bin")

        def write():
            with open(path, "wb") as f:
                block = os.urandom(1 << 20)
                left = size
                while left:
                    n = min(left, len(block))
                    f.write(block[:n])
                    left -= n

        await asyncio.to_thread(write)
        form = aiohttp.FormData()
        with open(path, "rb") as fp:
            form.add_field("image", fp, filename="big.bin", content_type="application/octet-stream")
            async with self.http.post(self.u("/upload/image"), data=form) as r:
                self.assertEqual(r.status, 413, await r.text())
        self.assertFalse(os.path.exists(os.path.join(self.base, "input", "big.bin")))
        os.remove(path)

    async def test_view_errors(self):
        with open(os.path.join(self.base, "output", "fixture_00001_.png"), "wb") as f:
            f.write(make_png(1, 1, (0, 0, 0)))
        for line in fixture_text("view-errors.txt").splitlines():
            status, request, _body = line.split("\t")
            method, path = request.split(" ", 1)
            async with self.http.request(method, self.u(path)) as r:
                self.assertEqual(r.status, int(status), path)
                self.assertEqual(await r.read(), b"", path)
        async with self.http.get(self.u("/view?filename=example.png&type=input&preview=webp;50&channel=rgba")) as r:
            self.assertEqual(r.status, 200)
        async with self.http.get(self.u("/view?filename=example.png%20%5Binput%5D")) as r:
            self.assertEqual(r.status, 200)

    async def test_userdata(self):
        wf = fixture_text("userdata-get.json").encode()
        async with self.http.post(self.u("/userdata/workflows%2Fdemo.json"), data=wf) as r:
            self.assertEqual((r.status, await r.json()), (200, fixture("userdata-post.json")))
        async with self.http.post(self.u("/userdata/workflows%2Fsub%2Fnested.json?full_info=true"), data=b'{"nodes":[]}') as r:
            full = await r.json()
        self.assertEqual(set(full), set(fixture("userdata-post-full.json")))
        self.assertEqual((full["path"], full["size"]), ("workflows/sub/nested.json", 12))
        async with self.http.post(self.u("/userdata/workflows%2Fdemo.json?overwrite=false"), data=b"x") as r:
            self.assertEqual((r.status, await r.text()), (409, "File already exists"))

        self.assertEqual(await self.get_json("/userdata?dir=workflows"), fixture("userdata-list.json"))
        listed = await self.get_json("/userdata?dir=workflows&full_info=true")
        self.assertEqual([(e["path"], e["size"]) for e in listed], [("demo.json", 146)])
        self.assertEqual(set(listed[0]), set(fixture("userdata-list-full.json")[0]))
        self.assertEqual(sorted(await self.get_json("/userdata?dir=workflows&split=true&recurse=true")), fixture("userdata-list-split.json"))
        self.assertEqual(sorted(await self.get_json("/userdata?dir=workflows&recurse=true")), fixture("userdata-list-recurse.json"))
        v2 = await self.get_json("/v2/userdata?path=workflows")
        ref = fixture("userdata-v2.json")
        self.assertEqual([(e["name"], e["path"], e["type"]) for e in v2], [(e["name"], e["path"], e["type"]) for e in ref])
        self.assertEqual([set(e) for e in v2], [set(e) for e in ref])

        async with self.http.get(self.u("/userdata/workflows%2Fdemo.json")) as r:
            self.assertEqual((r.status, await r.read()), (200, wf))
            self.assertEqual(r.headers["Content-Type"], "application/json")
        async with self.http.get(self.u("/userdata?dir=nope-dir")) as r:
            self.assertEqual((r.status, await r.text()), (404, "Directory not found"))
        async with self.http.get(self.u("/userdata/..%2F..%2Fetc%2Fpasswd")) as r:
            self.assertEqual(r.status, 403)
        async with self.http.get(self.u("/userdata?dir=..%2Fother")) as r:
            self.assertEqual(r.status, 403)

        moved = await self.post_json("/userdata/workflows%2Fdemo.json/move/workflows%2Frenamed.json", None)
        self.assertEqual(moved, "workflows/renamed.json")
        async with self.http.delete(self.u("/userdata/workflows%2Frenamed.json")) as r:
            self.assertEqual((r.status, await r.read()), (204, b""))
        async with self.http.delete(self.u("/userdata/workflows%2Frenamed.json")) as r:
            self.assertEqual(r.status, 404)
        self.assertTrue(os.path.isfile(os.path.join(self.base, "user", "default", "workflows", "sub", "nested.json")))

        async with self.http.post(self.u("/settings"), json={"Comfy.A": 1}) as r:
            self.assertEqual(r.status, 200)
        async with self.http.post(self.u("/settings/Comfy.B"), json="two") as r:
            self.assertEqual(r.status, 200)
        settings = await self.get_json("/settings")
        self.assertEqual((settings["Comfy.A"], settings["Comfy.B"]), (1, "two"))
        self.assertEqual(await self.get_json("/settings/Comfy.B"), "two")
        self.assertIsNone(await self.get_json("/settings/Comfy.C"))

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


# =========================================================================== custom nodes
PROBE_INIT = r'''
import os
from aiohttp import web
import server
import folder_paths
from .helper import VALUE

seen = []
try:
    import mw_probe  # noqa: F401  (must fail: loaded by path, like ComfyUI)
    PLAIN_IMPORT = "worked"
except ImportError:
    PLAIN_IMPORT = "failed"


@web.middleware
async def probe(request, handler):
    route = request.match_info.route
    canonical = route.resource.canonical if route.resource is not None else None
    try:
        response = await handler(request)
    except web.HTTPException as e:
        seen.append([request.method, request.path, canonical, "raised", e.status])
        raise
    seen.append([request.method, request.path, canonical, "returned", response.status])
    return response


server.PromptServer.instance.app.middlewares.insert(0, probe)


@server.PromptServer.instance.routes.get("/probe/seen")
async def probe_seen(request):
    return web.json_response({"seen": seen, "value": VALUE, "plain_import": PLAIN_IMPORT,
                              "base": folder_paths.base_path})


def stamp(json_data):
    json_data.setdefault("extra_data", {})["probe"] = True
    return json_data


def broken(json_data):
    raise RuntimeError("on_prompt handlers' exceptions are swallowed")


server.PromptServer.instance.add_on_prompt_handler(stamp)
server.PromptServer.instance.add_on_prompt_handler(broken)


async def on_cleanup(app):
    with open(os.path.join(folder_paths.base_path, "probe-cleanup-ran"), "w") as f:
        f.write("yes")

server.PromptServer.instance.app.on_cleanup.append(on_cleanup)


class ProbeNode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": ""})}}
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True
    CATEGORY = "probe"

    def run(self, text):
        return ()


NODE_CLASS_MAPPINGS = {"ProbeNode": ProbeNode}
NODE_DISPLAY_NAME_MAPPINGS = {"ProbeNode": "Probe Node"}
WEB_DIRECTORY = "./web"
'''


class CustomNodesTest(StandinCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="standin-test-cn-")
        base = cls.base = os.path.join(cls.tmp, "host")
        probe = os.path.join(base, "custom_nodes", "mw_probe")
        os.makedirs(os.path.join(probe, "web", "sub"))
        with open(os.path.join(probe, "__init__.py"), "w") as f:
            f.write(PROBE_INIT)
        with open(os.path.join(probe, "helper.py"), "w") as f:
            f.write("VALUE = 42\n")
        for rel in ("web/probe.js", "web/sub/more.js"):
            with open(os.path.join(probe, rel), "w") as f:
                f.write("export {};\n")
        broken = os.path.join(base, "custom_nodes", "broken_pkg")
        os.makedirs(broken)
        with open(os.path.join(broken, "__init__.py"), "w") as f:
            f.write("raise RuntimeError('boom at import')\n")
        os.makedirs(os.path.join(base, "user"))
        with open(os.path.join(base, "user", "users.json"), "w") as f:
            json.dump({"alice_1": "alice"}, f)
        cls.standin = Standin(base, ["--multi-user"]).start()

    @classmethod
    def tearDownClass(cls):
        rc = cls.standin.stop()
        try:
            assert rc == 0, f"stand-in exit code {rc}:\n{cls.standin.output()}"
            assert os.path.exists(os.path.join(cls.base, "probe-cleanup-ran")), "on_cleanup did not run"
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    async def test_failed_import_does_not_stop_the_host(self):
        out = self.standin.output()
        self.assertIn("IMPORT FAILED: " + os.path.join(self.base, "custom_nodes", "broken_pkg"), out)
        self.assertIn("RuntimeError: boom at import", out)
        imports = {os.path.basename(i["path"]): i["success"] for i in await self.control_get("/imports")}
        self.assertEqual(imports, {"broken_pkg": False, "mw_probe": True})

    async def test_package_loaded_like_comfyui(self):
        seen = await self.get_json("/api/probe/seen")
        self.assertEqual((seen["value"], seen["plain_import"], seen["base"]), (42, "failed", self.base))
        self.assertEqual(sorted(await self.get_json("/extensions")), ["/extensions/mw_probe/probe.js", "/extensions/mw_probe/sub/more.js"])
        async with self.http.get(self.u("/extensions/mw_probe/sub/more.js")) as r:
            self.assertEqual(r.status, 200)
        info = await self.get_json("/object_info/ProbeNode")
        self.assertEqual(info["ProbeNode"]["python_module"], "custom_nodes.mw_probe")
        self.assertEqual(info["ProbeNode"]["display_name"], "Probe Node")
        self.assertTrue(info["ProbeNode"]["output_node"])
        self.assertEqual((await self.control_get("/middlewares"))[0], "probe")

    async def test_outermost_middleware_sees_everything(self):
        async with self.http.ws_connect(self.u("/ws?clientId=probe-ws")) as ws:
            await ws.receive_json(timeout=5)
        requests = [("OPTIONS", "/prompt"), ("GET", "/internal/logs"), ("GET", "/assets/app.js"),
                    ("GET", "/nope.js"), ("POST", "/nope"), ("GET", "/extensions/mw_probe/probe.js")]
        for method, path in requests:
            async with self.http.request(method, self.u(path)) as r:
                await r.read()
        await asyncio.sleep(0.1)
        seen = (await self.get_json("/probe/seen"))["seen"]
        rows = {(s[0], s[1]): s[2:] for s in seen}
        self.assertEqual(rows[("GET", "/ws")], ["/ws", "returned", 101])
        self.assertEqual(rows[("OPTIONS", "/prompt")], [None, "returned", 200])  # no OPTIONS route: 405 match
        self.assertEqual(rows[("GET", "/internal/logs")], ["/internal/logs", "returned", 200])
        self.assertEqual(rows[("GET", "/assets/app.js")], ["", "returned", 200])
        self.assertEqual(rows[("GET", "/nope.js")], ["", "raised", 404] if OLD_AIOHTTP else ["", "returned", 200])
        self.assertEqual(rows[("POST", "/nope")], [None, "raised", 405])
        self.assertEqual(rows[("GET", "/extensions/mw_probe/probe.js")], ["/extensions/mw_probe", "returned", 200])

    async def test_on_prompt_handlers(self):
        resp = await self.post_json("/prompt", {"prompt": {"1": {"class_type": "ProbeNode", "inputs": {"text": "x"}}}, "client_id": "p"})
        entry = await self.wait_history(resp["prompt_id"])
        self.assertEqual(entry["prompt"][3], {"probe": True, "client_id": "p"})
        self.assertIn("on_prompt handlers' exceptions are swallowed", self.standin.output())

    async def test_multi_user_header(self):
        async with self.http.post(self.u("/userdata/workflows%2Fa.json"), data=b"{}", headers={"comfy-user": "alice_1"}) as r:
            self.assertEqual((r.status, await r.json()), (200, "workflows/a.json"))
        self.assertTrue(os.path.isfile(os.path.join(self.base, "user", "alice_1", "workflows", "a.json")))
        self.assertEqual(await self.get_json("/userdata?dir=workflows", headers={"comfy-user": "alice_1"}), ["a.json"])
        # ComfyUI only knows users of user/users.json: others (and no header) fail
        async with self.http.get(self.u("/userdata?dir=workflows"), headers={"comfy-user": "mallory"}) as r:
            self.assertEqual(r.status, 500)
        async with self.http.get(self.u("/settings")) as r:
            self.assertEqual(r.status, 401)
        users = await self.get_json("/users")
        self.assertEqual(users, {"storage": "server", "users": {"alice_1": "alice"}})
        new_id = await self.post_json("/users", {"username": "bob smith"})
        self.assertRegex(new_id, r"^bob-smith_[0-9a-f-]{36}$")
        self.assertEqual(await self.get_json("/settings", headers={"comfy-user": new_id}), {})



# =========================================================================== behaviours compared with the real host
SEND_SYNC_PROBE = os.path.join(FIXTURES, "send_sync_probe")
REPO = os.path.dirname(os.path.dirname(HERE))
REAL_COMFYUI = os.path.join(os.path.dirname(REPO), "shared", "real-comfyui")
REAL_TARBALL = os.path.join(REAL_COMFYUI, "ComfyUI-0.3.64.tar.gz")
REAL_CACHE = os.path.join(REPO, ".cache", "real-comfyui", "ComfyUI-0.3.64")  # made by test/helpers/real-host.ts


def real_host_skip_reason():
    if os.environ.get("COMFYUI_DIR"):
        if os.path.isfile(os.path.join(os.environ["COMFYUI_DIR"], "main.py")):
            return None
        return f"real ComfyUI: COMFYUI_DIR={os.environ['COMFYUI_DIR']} has no main.py"
    if os.path.isfile(REAL_TARBALL):
        return None
    return f"real ComfyUI not available: neither {REAL_COMFYUI} nor COMFYUI_DIR exists"


class RealComfyUI:
    """The real ComfyUI 0.3.64 in a subprocess, the same interface as `Standin` (url, start, stop,
    output), started like test/helpers/real-host.ts does: run.sh's command line plus its own
    --base-directory and --database-url, the stubs first on PYTHONPATH."""

    def __init__(self, base_dir, extra_args=()):
        self.base_dir = base_dir
        self.extra_args = list(extra_args)
        self.lines: list[str] = []
        self.url = self.control = None

    def source(self):
        if os.environ.get("COMFYUI_DIR"):
            return os.path.abspath(os.environ["COMFYUI_DIR"])
        if os.path.isfile(os.path.join(REAL_CACHE, ".authsvc-complete")):
            return REAL_CACHE
        target = os.path.join(os.path.dirname(self.base_dir), "comfyui")
        os.makedirs(target, exist_ok=True)
        subprocess.run(["tar", "-xzf", REAL_TARBALL, "-C", target, "--strip-components=1"], check=True)
        return target

    def start(self, timeout=90.0):
        import socket
        src = self.source()
        for d in ("input", "output", "user", "custom_nodes", "models/checkpoints"):
            os.makedirs(os.path.join(self.base_dir, d), exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        paths = [os.path.join(REAL_COMFYUI, "stubs")] if os.path.isdir(REAL_COMFYUI) else []
        env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        for _attempt in range(5):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            args = [os.environ.get("COMFYUI_PYTHON", PYTHON), "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(port),
                    "--base-directory", self.base_dir,
                    "--database-url", "sqlite:///" + os.path.join(self.base_dir, "user", "comfyui.db"), *self.extra_args]
            if os.path.isdir(REAL_COMFYUI):
                args += ["--front-end-root", os.path.join(REAL_COMFYUI, "frontend")]
            self.lines = []
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=src,
                                         start_new_session=True)
            self.listening = threading.Event()
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
            # the line ComfyUI logs once its site listens (so another process on the port cannot fool us)
            deadline = time.monotonic() + timeout
            while not self.listening.wait(0.05):
                if self.proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    raise RuntimeError(f"ComfyUI did not listen in {timeout} s:\n" + self.output())
            else:
                self.url = f"http://127.0.0.1:{port}"
                return self
            self._reader.join(5)
            if "address already in use" not in self.output():
                raise RuntimeError("ComfyUI exited during start:\n" + self.output())
        raise RuntimeError("ComfyUI: no free port after 5 attempts:\n" + self.output())

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            if "To see the GUI go to:" in line:
                self.listening.set()

    def output(self):
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()
        return 0  # ComfyUI has no clean shutdown on SIGTERM: only the stand-in's exit code means something
EXECUTOR_EVENTS = ("execution_start", "execution_cached", "executing", "executed", "progress_state", "execution_success")


def tiny_graph(prefix, color):
    return {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": color}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": prefix}},
    }


class RealHostBehaviourTest(StandinCase):
    """What the real ComfyUI 0.3.64 does, seen by running the same requests against it and the
    stand-in (README.md, "Compared with the real host"). The send_sync probe is the custom node
    fixtures/send_sync_probe, loaded by both hosts alike. RealComfyUIBehaviourTest runs these same
    tests against the real host, so they hold there too."""

    HOST = Standin

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="standin-test-real-")
        base = cls.base = os.path.join(cls.tmp, "host")
        os.makedirs(os.path.join(base, "custom_nodes"))
        os.symlink(SEND_SYNC_PROBE, os.path.join(base, "custom_nodes", "send_sync_probe"))
        cls.standin = cls.HOST(base).start()
        cls.color = 0

    def busy_graph(self, long):
        """A prompt that keeps the worker busy: about 0.5 s (long=False) or far longer than any test."""
        return sleep_graph(30 if long else 0.5)

    @classmethod
    def tearDownClass(cls):
        rc = cls.standin.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"stand-in exit code {rc}:\n{cls.standin.output()}"

    def graph(self, prefix):
        type(self).color += 1  # a graph of its own: nothing is served from the cache
        return tiny_graph(prefix, type(self).color)

    async def open_ws(self, client_id):
        ws = await self.http.ws_connect(self.u(f"/ws?clientId={client_id}"))
        self.assertEqual((await ws.receive_json(timeout=5))["type"], "status")
        return ws

    async def drain(self, ws, client_id):
        """Every text frame `ws` gets until a prompt of its own (queued last) ends: messages are
        published in order, so everything sent for earlier prompts has arrived by then."""
        resp = await self.post_json("/prompt", {"prompt": self.graph("sentinel"), "client_id": client_id})
        frames = await self.ws_collect_until_idle(ws, resp["prompt_id"])
        return [f for f in frames if "_binary" not in f]

    @staticmethod
    def of(frames, prompt_id):
        return [f["type"] + (":" + str(f["data"]["node"]) if f["type"] == "executing" else "")
                for f in frames if isinstance(f.get("data"), dict) and f["data"].get("prompt_id") == prompt_id]

    async def test_client_id_routing_and_precedence(self):
        # real host: execution messages go to the prompt's client_id only; top-level client_id wins over
        # extra_data.client_id; "client_id": null wins too and means none. Without a client_id the
        # executor sends no execution_start/executing/executed/execution_success at all: only
        # progress_state is broadcast (the stand-in broadcast executing/executed until this was fixed).
        await self.wait_idle()
        ws_a, ws_b = await self.open_ws("route-a"), await self.open_ws("route-b")
        try:
            top = await self.post_json("/prompt", {"prompt": self.graph("top"), "client_id": "route-a",
                                                   "extra_data": {"client_id": "route-b"}})
            extra = await self.post_json("/prompt", {"prompt": self.graph("extra"), "extra_data": {"client_id": "route-b"}})
            null = await self.post_json("/prompt", {"prompt": self.graph("null"), "client_id": None,
                                                    "extra_data": {"client_id": "route-b"}})
            none = await self.post_json("/prompt", {"prompt": self.graph("none")})
            frames_a = await self.drain(ws_a, "route-a")
            frames_b = await self.drain(ws_b, "route-b")
        finally:
            await ws_a.close()
            await ws_b.close()
        full = ["execution_start", "execution_cached", "progress_state", "executing:1", "progress_state",
                "progress_state", "executing:2", "executed", "progress_state", "execution_success", "executing:None"]
        self.assertEqual(self.of(frames_a, top["prompt_id"]), full)
        self.assertEqual(self.of(frames_b, top["prompt_id"]), [])
        self.assertEqual(self.of(frames_a, extra["prompt_id"]), [])
        self.assertEqual(self.of(frames_b, extra["prompt_id"]), full)
        for broadcast in (null, none):
            for frames in (frames_a, frames_b):
                self.assertEqual(self.of(frames, broadcast["prompt_id"]), ["progress_state"] * 4)
        self.assertEqual((await self.wait_history(top["prompt_id"]))["prompt"][3], {"client_id": "route-a"})
        self.assertEqual((await self.wait_history(null["prompt_id"]))["prompt"][3], {"client_id": None})
        self.assertEqual((await self.wait_history(none["prompt_id"]))["prompt"][3], {})

    async def test_send_sync_comes_from_the_worker_thread(self):
        # real host: the executor calls PromptServer.send_sync from the prompt_worker thread (not the
        # server's loop); a prompt without client_id produces only progress_state calls (sid None).
        await self.wait_idle()
        await self.post_json("/send_sync_probe/reset", {})
        ws = await self.open_ws("probe-a")
        try:
            mine = await self.post_json("/prompt", {"prompt": self.graph("probe"), "client_id": "probe-a"})
            await self.ws_collect_until_idle(ws, mine["prompt_id"])
            anonymous = await self.post_json("/prompt", {"prompt": self.graph("probe-none")})
            await self.drain(ws, "probe-a")
        finally:
            await ws.close()
        calls = await self.get_json("/send_sync_probe/calls")
        for_mine = [c for c in calls if isinstance(c["data"], dict) and c["data"].get("prompt_id") == mine["prompt_id"]]
        self.assertEqual(sorted({c["event"] for c in for_mine}), sorted(EXECUTOR_EVENTS))
        for c in for_mine:
            self.assertEqual((c["sid"], c["on_server_loop"]), ("probe-a", False), c)
            self.assertRegex(c["thread"], r"^Thread-\d+ \(prompt_worker\)$")
        executed = next(c["data"] for c in for_mine if c["event"] == "executed")
        self.assertEqual(set(executed), {"node", "display_node", "output", "prompt_id"})
        self.assertEqual(executed["output"]["images"][0]["type"], "output")
        self.assertRegex(executed["output"]["images"][0]["filename"], r"^probe_\d{5}_\.png$")
        success = next(c["data"] for c in for_mine if c["event"] == "execution_success")
        self.assertEqual(set(success), {"prompt_id", "timestamp"})
        self.assertEqual([c["data"] for c in for_mine if c["event"] == "executing"][-1], {"node": None, "prompt_id": mine["prompt_id"]})
        for_anonymous = [c for c in calls if isinstance(c["data"], dict) and c["data"].get("prompt_id") == anonymous["prompt_id"]]
        self.assertEqual({(c["event"], c["sid"]) for c in for_anonymous}, {("progress_state", None)})
        status = [c for c in calls if c["event"] == "status"]
        self.assertEqual({c["on_server_loop"] for c in status}, {True, False}, "status from POST /prompt (loop) and the worker")

    async def test_client_chosen_prompt_id(self):
        # real host: a client's prompt_id is taken as is (str() of it), and reusing one is accepted:
        # the later prompt's history entry replaces the earlier one under that key.
        first = await self.post_json("/prompt", {"prompt": self.graph("chosen"), "prompt_id": "chosen-id"})
        self.assertEqual(first["prompt_id"], "chosen-id")
        await self.wait_history("chosen-id")
        again_graph = self.graph("chosen-again")
        again = await self.post_json("/prompt", {"prompt": again_graph, "prompt_id": "chosen-id"})
        self.assertEqual(again["prompt_id"], "chosen-id")
        numeric = await self.post_json("/prompt", {"prompt": self.graph("numeric"), "prompt_id": 12345})
        self.assertEqual(numeric["prompt_id"], "12345")
        await self.wait_history("12345")
        entry = (await self.get_json("/history/chosen-id"))["chosen-id"]
        self.assertEqual((entry["prompt"][0], entry["prompt"][2]), (again["number"], again_graph))

    async def test_interrupt_by_prompt_id(self):
        # real host: {"prompt_id": X} interrupts only when X runs (a pending X: nothing happens);
        # without prompt_id whatever runs is interrupted; when idle, the next prompt still runs.
        await self.wait_idle()
        ws = await self.open_ws("intr")
        long = None
        try:
            short = await self.post_json("/prompt", {"prompt": self.busy_graph(False), "client_id": "intr"})
            frames = []  # the worker takes the prompt in its own time: wait until it has
            while not any(f.get("type") == "execution_start" and f["data"]["prompt_id"] == short["prompt_id"] for f in frames):
                frames.append(await ws.receive_json(timeout=10))
            long = await self.post_json("/prompt", {"prompt": self.busy_graph(True), "client_id": "intr"})
            queue = await self.get_json("/queue")
            self.assertEqual(([q[1] for q in queue["queue_running"]], [q[1] for q in queue["queue_pending"]]),
                             ([short["prompt_id"]], [long["prompt_id"]]))
            await self.post_json("/interrupt", {"prompt_id": long["prompt_id"]})  # pending: no effect
            frames = await self.ws_collect_until_idle(ws, short["prompt_id"])
            self.assertIn("execution_success", [f.get("type") for f in frames])
            frames = []
            while not any(f.get("type") == "executing" and f["data"]["node"] == "1" for f in frames):
                frames.append(await ws.receive_json(timeout=10))
            await self.post_json("/interrupt", {"prompt_id": short["prompt_id"]})  # finished: no effect
            await self.post_json("/interrupt", {"prompt_id": long["prompt_id"]})
            frames = await self.ws_collect_until_idle(ws, long["prompt_id"])
            self.assertIn("execution_interrupted", [f.get("type") for f in frames])
            entry = await self.wait_history(long["prompt_id"])
            self.assertEqual((entry["status"]["status_str"], entry["status"]["completed"]), ("error", False))
            await self.post_json("/interrupt", {})  # idle: the flag is cleared when the next prompt starts
            after = await self.post_json("/prompt", {"prompt": self.graph("after-idle-interrupt"), "client_id": "intr"})
            frames = await self.ws_collect_until_idle(ws, after["prompt_id"])
            self.assertIn("execution_success", [f.get("type") for f in frames])
        finally:
            await ws.close()
            if long is not None:  # a failure above must not leave a 30 s prompt to the next tests
                await self.post_json("/queue", {"delete": [long["prompt_id"]]})
                await self.post_json("/interrupt", {"prompt_id": long["prompt_id"]})

    async def test_history_paging(self):
        # real host: offset counts from the oldest entry; max_items alone (or with a negative offset)
        # gives the newest max_items; a negative offset alone gives everything; unknown id -> {}.
        await self.wait_idle()
        for i in range(4):
            await self.wait_history((await self.post_json("/prompt", {"prompt": self.graph(f"page{i}")}))["prompt_id"])
        ids = list(await self.get_json("/history"))
        self.assertGreaterEqual(len(ids), 4)
        rows = {"max_items=2": ids[-2:], "max_items=2&offset=1": ids[1:3], "offset=2": ids[2:], "offset=-1": ids,
                "offset=-3": ids, "max_items=2&offset=-1": ids[-2:], "max_items=2&offset=-50": ids[-2:],
                "max_items=0": [], "offset=100000": []}
        for query, want in rows.items():
            self.assertEqual(list(await self.get_json("/history?" + query)), want, query)
        async with self.http.get(self.u("/history?max_items=x")) as r:
            self.assertEqual(r.status, 500)
        self.assertEqual(await self.get_json("/history/no-such-prompt"), {})


    async def test_view_rows(self):
        # real host: type defaults to output; an annotation needs its space; ".." anywhere in the name
        # is a 400, a subfolder leaving the folder a 403; a name with a slash is not found
        files = {"output/rv-a.png": b"A", "output/rv-sub/rv-b.png": b"B", "input/rv-c.png": b"C", "temp/rv-d.png": b"D"}
        for rel, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(self.base, rel)), exist_ok=True)
            with open(os.path.join(self.base, rel), "wb") as f:
                f.write(data)
        rows = {
            "filename=rv-a.png": (200, b"A"), "filename=rv-c.png": (404, b""), "filename=rv-c.png&type=input": (200, b"C"),
            "filename=rv-d.png&type=temp": (200, b"D"), "filename=rv-a.png&type=": (400, b""),
            "filename=rv-a.png&type=bogus": (400, b""), "filename=rv-c.png%20%5Binput%5D&type=output": (200, b"C"),
            "filename=rv-a.png%5Boutput%5D": (404, b""), "filename=rv-a.png%20%5Bbogus%5D": (404, b""),
            "filename=rv-b.png&subfolder=rv-sub": (200, b"B"), "filename=rv-b.png&subfolder=rv-sub/": (200, b"B"),
            "filename=rv-a.png&subfolder=rv-sub/..": (200, b"A"), "filename=rv-b.png&subfolder=/rv-sub": (403, b""),
            "filename=rv-a.png&subfolder=..": (403, b""), "filename=rv-sub/rv-b.png": (404, b""),
            "filename=rv-sub%2Frv-b.png": (404, b""), "filename=rv..a.png": (400, b""), "filename=": (400, b""), "": (404, b""),
        }
        got = {}
        for query in rows:
            async with self.http.get(self.u("/view?" + query)) as r:
                got[query] = (r.status, await r.read())
        self.assertEqual(got, rows)

    async def test_upload_names_and_loadimage_list(self):
        # real host: same content -> the existing name, other content -> "name (n).ext", overwrite=true or 1
        # replaces, overwrite=false renames; LoadImage lists top-level image files of input/ only
        async def upload(data, **fields):
            form = aiohttp.FormData()
            form.add_field("image", data, filename="ul.png", content_type="image/png")
            for k, v in fields.items():
                form.add_field(k, v)
            async with self.http.post(self.u("/upload/image"), data=form) as r:
                self.assertEqual(r.status, 200)
                return (await r.json())["name"] if not fields.get("subfolder") else await r.json()

        names = [await upload(b"one"), await upload(b"one"), await upload(b"two"), await upload(b"three"),
                 await upload(b"two"), await upload(b"four", overwrite="true"), await upload(b"five", overwrite="1"),
                 await upload(b"six", overwrite="false")]
        self.assertEqual(names, ["ul.png", "ul.png", "ul (1).png", "ul (2).png", "ul (1).png", "ul.png", "ul.png", "ul (3).png"])
        with open(os.path.join(self.base, "input", "ul.png"), "rb") as f:
            self.assertEqual(f.read(), b"five")
        self.assertEqual(await upload(b"sub", subfolder="ul-sf/deeper"), {"name": "ul.png", "subfolder": "ul-sf/deeper", "type": "input"})
        with open(os.path.join(self.base, "input", "ul-note.txt"), "w") as f:
            f.write("not an image")
        listed = (await self.get_json("/object_info/LoadImage"))["LoadImage"]["input"]["required"]["image"]
        self.assertEqual([n for n in listed[0] if n.startswith("ul")], ["ul (1).png", "ul (2).png", "ul (3).png", "ul.png"])
        self.assertEqual(listed[1], {"image_upload": True})
        masks = (await self.get_json("/object_info/LoadImageMask"))["LoadImageMask"]["input"]["required"]["image"][0]
        self.assertIn("ul-note.txt", masks)

@unittest.skipIf(real_host_skip_reason(), real_host_skip_reason() or "")
class RealComfyUIBehaviourTest(RealHostBehaviourTest):
    """The same tests against the real ComfyUI 0.3.64 (../shared/real-comfyui or COMFYUI_DIR)."""

    HOST = RealComfyUI

    def busy_graph(self, long):
        # no sleep node there: lanczos rescales of a 3072x3072 image, about 0.9 s each on this VM;
        # an interrupt is seen before the next node starts
        type(self).color += 1
        graph = {"1": {"class_type": "EmptyImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 1, "color": type(self).color}}}
        previous = "1"
        for i in range(40 if long else 2):
            size = 3072 if i % 2 == 0 else 1024
            graph[str(10 + i)] = {"class_type": "ImageScale", "inputs": {"image": [previous, 0], "upscale_method": "lanczos",
                                                                        "width": size, "height": size, "crop": "disabled"}}
            previous = str(10 + i)
        graph["99"] = {"class_type": "SaveImage", "inputs": {"images": [previous, 0], "filename_prefix": "busy"}}
        return graph

if __name__ == "__main__":
    unittest.main()
