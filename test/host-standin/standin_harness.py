"""The harness of the stand-in's own suites (test_standin_*.py): fixtures and PNG/safetensors
builders, `Standin` (main.py in a subprocess, with READY/CONTROL lines parsed from stdout),
`StandinCase` (an aiohttp client with the waits the suites share) and `HostCase` (a plain host
with models and an input image, one per test class).
"""
from __future__ import annotations

import asyncio
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


class HostProcess:
    """A host in a subprocess (`proc`), its stdout and stderr collected line by line by a reader thread."""

    lines: list[str]
    proc: subprocess.Popen
    _reader: threading.Thread

    def output(self):
        return "".join(self.lines)

    def _terminate(self, kill):
        """SIGTERM, and `kill()` if the host has not exited 10 s later; then the reader is done."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                kill()
                self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()


class Standin(HostProcess):
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

    def stop(self):
        self._terminate(self.proc.kill)
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


def sleep_graph(seconds, **extra):
    return {"1": {"class_type": "StandinSleep", "inputs": {"seconds": seconds, **extra}}}


class HostCase(StandinCase):
    """One plain stand-in per test class, started on a base dir holding models of every kind, a
    non-model file among them and one input image; stopped (exit code 0) and removed after."""

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
