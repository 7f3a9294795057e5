"""Files on the plain stand-in, over real HTTP against `main.py` in a subprocess: uploads (names,
subfolders, masks, the 100 MiB limit), /view's errors, and userdata and settings.

Run from the repository root:
    /usr/bin/python3 -m unittest discover -s test/host-standin -p 'test_*.py'
"""
from __future__ import annotations

import asyncio
import json
import os
import unittest

import aiohttp

from standin_harness import HostCase, fixture, fixture_text, make_png


class HostTest(HostCase):
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


if __name__ == "__main__":
    unittest.main()
