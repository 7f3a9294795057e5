"""Prompts on the plain stand-in, over real HTTP against `main.py` in a subprocess: the WebSocket
transcript, history and /view of a run, binary frames and failures, prompt errors and numbers,
the queue, interrupts and stripped secrets, and a reused client id.

Run from the repository root:
    /usr/bin/python3 -m unittest discover -s test/host-standin -p 'test_*.py'
"""
from __future__ import annotations

import asyncio
import json
import os
import struct
import time
import unittest

from standin_harness import HostCase, fixture, fixture_text, parse_png, sleep_graph


GRAPH = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 255}},
    "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "fixture-ws"}},
}


class HostTest(HostCase):
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


if __name__ == "__main__":
    unittest.main()
