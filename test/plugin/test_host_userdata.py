"""host_paths' ``userdata`` item: what the sidecar's workflows decisions ask of the host instead of
reading the disk themselves (issue 25): what is at a path, listings in the shapes and order the
sidecar's own listing had (names in byte order, hidden names skipped by the plain listing, kept by
/v2), a file's text, an administrator's delete; always off the host's loop but for a plain look."""
from __future__ import annotations

import os
import shutil
import tempfile
import types
import unittest

from .support import plugin_module


class UserdataItem(unittest.TestCase):
    def setUp(self) -> None:
        self.host_paths = plugin_module("host_paths")
        self.saved = self.host_paths._folder_paths
        self.base = tempfile.mkdtemp(prefix="host-userdata-")
        self.host_paths._folder_paths = lambda: types.SimpleNamespace(get_directory_by_type=lambda kind: None, get_user_directory=lambda: self.base)
        self.shared = os.path.join(self.base, "default", "workflows")
        os.makedirs(os.path.join(self.shared, "team"))
        os.makedirs(os.path.join(self.shared, ".hid"))
        for name, data in [("b.json", b"{}"), ("a.json", b'{"a":1}'), ("C.json", b"{}"), (".hidden.json", b"{}"),
                           ("team/brief.json", b"{}"), (".hid/x.json", b"{}"), ("bad.json", b'{"x":"\xff\r\n"}')]:
            with open(os.path.join(self.shared, name), "wb") as f:
                f.write(data)

    def tearDown(self) -> None:
        self.host_paths._folder_paths = self.saved
        shutil.rmtree(self.base, ignore_errors=True)

    def ask(self, **item: object) -> dict:
        return self.host_paths.resolve([{"op": "userdata", **item}])["results"][0]

    def test_what_is_there(self) -> None:
        self.assertEqual(self.ask(path=self.shared), {"path": self.shared, "file": False, "dir": True, "exists": True})
        self.assertEqual(self.ask(path=os.path.join(self.shared, "a.json"))["file"], True)
        self.assertEqual(self.ask(path=os.path.join(self.base, "nobody", "workflows"))["exists"], False)
        self.assertEqual(self.ask(path="relative/workflows"), {"status": 400})

    def test_files_as_get_userdata_lists_them(self) -> None:
        flat = self.ask(path=self.shared, list="files")["listed"]
        self.assertEqual([f["rel"] for f in flat], ["C.json", "a.json", "b.json", "bad.json"])
        self.assertEqual(sorted(flat[1]), ["created", "modified", "rel", "size"])
        self.assertEqual(flat[1]["size"], 7)
        deep = self.ask(path=self.shared, list="files", recurse=True)["listed"]
        self.assertEqual([f["rel"] for f in deep], ["C.json", "a.json", "b.json", "bad.json", "team/brief.json"])
        self.assertEqual(self.ask(path=os.path.join(self.base, "none"), list="files")["listed"], [])

    def test_entries_as_v2_lists_them(self) -> None:
        root = os.path.join(self.base, "default")
        entries = self.ask(path=self.shared, list="v2", base=root)["entries"]
        self.assertEqual([e["path"] for e in entries], [
            "workflows/.hid", "workflows/.hid/x.json", "workflows/.hidden.json", "workflows/C.json", "workflows/a.json",
            "workflows/b.json", "workflows/bad.json", "workflows/team", "workflows/team/brief.json",
        ])
        self.assertEqual(entries[0], {"name": ".hid", "path": "workflows/.hid", "type": "directory"})
        self.assertEqual(list(entries[1]), ["name", "path", "type", "size", "modified"])

    def test_text_and_removal(self) -> None:
        bad = os.path.join(self.shared, "bad.json")
        self.assertEqual(self.ask(path=bad, read=True)["text"], '{"x":"\ufffd\r\n"}')
        self.assertNotIn("text", self.ask(path=self.shared, read=True))
        doomed = os.path.join(self.shared, "b.json")
        self.assertEqual(self.ask(path=doomed, remove=True)["removed"], True)
        self.assertFalse(os.path.exists(doomed))
        self.assertNotIn("removed", self.ask(path=doomed, remove=True))

    def test_nothing_outside_the_user_folder_and_removal_only_of_a_shared_workflow(self) -> None:
        outside = tempfile.mkdtemp(prefix="host-userdata-outside-")
        self.addCleanup(shutil.rmtree, outside, True)
        secret = os.path.join(outside, "secret.json")
        with open(secret, "w") as f:
            f.write("{}")
        own = os.path.join(self.base, "u1", "workflows")
        os.makedirs(own)
        with open(os.path.join(own, "mine.json"), "w") as f:
            f.write("{}")
        rows = [
            ("a file outside", {"path": secret}),
            ("read outside", {"path": secret, "read": True}),
            ("remove outside", {"path": secret, "remove": True}),
            ("list outside", {"path": outside, "list": "files"}),
            ("walked out with ..", {"path": os.path.join(self.base, "default", "..", "..", os.path.basename(outside), "secret.json"), "read": True}),
            ("a sibling whose name starts the same", {"path": self.base + "-x", "list": "files"}),
            ("v2 with a base outside", {"path": self.shared, "list": "v2", "base": outside}),
            ("remove an own workflow", {"path": os.path.join(own, "mine.json"), "remove": True}),
            ("remove the shared folder itself", {"path": self.shared, "remove": True}),
            ("remove outside workflows in default", {"path": os.path.join(self.base, "default", "x.json"), "remove": True}),
        ]
        for label, item in rows:
            self.assertEqual(self.ask(**item), {"status": 400}, label)
        self.assertTrue(os.path.exists(secret) and os.path.exists(os.path.join(own, "mine.json")), "nothing was removed")
        self.host_paths._folder_paths = lambda: types.SimpleNamespace(get_directory_by_type=lambda kind: None)
        self.assertEqual(self.ask(path=self.shared), {"status": 400}, "a host without a user folder answers nothing")

    def test_only_a_plain_look_is_answered_on_the_loop(self) -> None:
        slow = self.host_paths.slow
        self.assertFalse(slow([{"op": "userdata", "path": self.shared}]))
        for extra in ({"list": "files"}, {"list": "v2", "base": self.base}, {"read": True}, {"remove": True}):
            self.assertTrue(slow([{"op": "userdata", "path": self.shared, **extra}]), extra)


if __name__ == "__main__":
    unittest.main()
