"""Custom nodes on the stand-in, loaded as ComfyUI loads them, over real HTTP against `main.py` in a
subprocess: a package that fails to import does not stop the host; a probe package's module,
web directory, middleware (outermost: it sees every request), on_prompt handlers and cleanup
hook; the multi-user header.

Run from the repository root:
    /usr/bin/python3 -m unittest discover -s test/host-standin -p 'test_*.py'
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import unittest

from standin_harness import OLD_AIOHTTP, Standin, StandinCase


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


if __name__ == "__main__":
    unittest.main()
