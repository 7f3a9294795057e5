"""host_paths' ``view`` item asked with ``head``: the file's first bytes for the sidecar's
content-safety policy (what kind of file a /view serves, sidecar/src/nsfw/kinds.ts), read from the
very file and state the answer's stamp names, never read when not asked, never an open that
waits."""
from __future__ import annotations

import base64
import os
import shutil
import tempfile
import types
import unittest

from .support import plugin_module


class ViewHead(unittest.TestCase):
    def setUp(self) -> None:
        self.host_paths = plugin_module("host_paths")
        self.saved = self.host_paths._folder_paths
        self.base = tempfile.mkdtemp(prefix="host-view-head-")
        self.output = os.path.join(self.base, "output")
        os.makedirs(self.output)
        folders = {"output": self.output, "input": os.path.join(self.base, "input"), "temp": os.path.join(self.base, "temp")}
        self.host_paths._folder_paths = lambda: types.SimpleNamespace(
            get_directory_by_type=lambda kind: folders.get(kind),
            annotated_filepath=lambda name: (name, None),
        )

    def tearDown(self) -> None:
        self.host_paths._folder_paths = self.saved
        shutil.rmtree(self.base, ignore_errors=True)

    def view(self, query: str, **extra: object) -> dict:
        return self.host_paths.resolve([{"op": "view", "query": query, **extra}])["results"][0]

    def test_the_first_bytes_when_asked_and_only_then(self) -> None:
        data = b"fLaC" + bytes(range(256)) * 4
        with open(os.path.join(self.output, "song.flac"), "wb") as f:
            f.write(data)
        asked = self.view("filename=song.flac&type=output", head=True)
        self.assertEqual(base64.b64decode(asked["head"]), data[: self.host_paths.HEAD_BYTES])
        self.assertIn("stamp", asked)
        self.assertNotIn("head", self.view("filename=song.flac&type=output"))
        # a client's own query cannot ask for it: only the sidecar's item does
        self.assertNotIn("head", self.view("filename=song.flac&type=output&head=true"))

    def test_a_view_with_head_is_answered_off_the_loop(self) -> None:
        # a file read: answered from the resolver's own threads, never on the host's loop
        self.assertTrue(self.host_paths.slow([{"op": "view", "query": "filename=x.png", "head": True}]))
        self.assertFalse(self.host_paths.slow([{"op": "view", "query": "filename=x.png"}]))

    def test_a_short_file_whole_and_an_empty_one_empty(self) -> None:
        for name, data in (("short.bin", b"ID3"), ("empty.bin", b"")):
            with open(os.path.join(self.output, name), "wb") as f:
                f.write(data)
            self.assertEqual(base64.b64decode(self.view(f"filename={name}", head=True)["head"]), data)

    def test_no_head_when_the_file_is_not_the_one_stamped(self) -> None:
        path = os.path.join(self.output, "x.png")
        with open(path, "wb") as f:
            f.write(b"\x89PNG....")
        st = os.stat(path)
        with open(path, "ab") as f:
            f.write(b"more")  # rewritten after the stat the answer was stamped with
        self.assertIsNone(self.host_paths._head(path, st))
        self.assertIsNotNone(self.host_paths._head(path, os.stat(path)))

    @unittest.skipUnless(hasattr(os, "mkfifo"), "FIFOs are a POSIX thing")
    def test_a_fifo_put_in_its_place_is_not_opened_to_wait(self) -> None:
        path = os.path.join(self.output, "x.png")
        with open(path, "wb") as f:
            f.write(b"\x89PNG....")
        st = os.stat(path)
        os.remove(path)
        os.mkfifo(path)
        self.assertIsNone(self.host_paths._head(path, st))  # returns at once: no writer needed


if __name__ == "__main__":
    unittest.main()
