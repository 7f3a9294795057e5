"""Behaviours compared with the real host: the same requests against the stand-in and, where it is
available, the real ComfyUI 0.3.64 (README.md, "Compared with the real host").

Run from the repository root:
    /usr/bin/python3 -m unittest discover -s test/host-standin -p 'test_*.py'
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import aiohttp

from standin_harness import FIXTURES, HERE, PYTHON, HostProcess, Standin, StandinCase, sleep_graph


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


class RealComfyUI(HostProcess):
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

    def stop(self):
        self._terminate(lambda: os.killpg(self.proc.pid, signal.SIGKILL))
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
