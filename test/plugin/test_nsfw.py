"""Issue 23 in the plugin: when the NSFW classifier's optional packages are wanted (install.py and
the plugin's install check read the same data dir's config.json), and how a preview frame's image
is taken out of ComfyUI's binary frame data for the sidecar's check (host-plugin/preview_check.py).
"""
from __future__ import annotations

import json
import os
import struct
import tempfile
import unittest

from .support import ROOT, plugin_module

state = plugin_module("install_state")
preview_check = plugin_module("preview_check")


class ClassifierWanted(unittest.TestCase):
    def wanted(self, config: object | None, env: dict[str, str] | None = None) -> bool:
        with tempfile.TemporaryDirectory() as data:
            if config is not None:
                with open(os.path.join(data, "config.json"), "w") as f:
                    f.write(config if isinstance(config, str) else json.dumps(config))
            return state.classifier_wanted(ROOT, {"AUTHSVC_DATA_DIR": data, **(env or {})})

    def test_rows(self) -> None:
        rows = [
            ("no config", None, {}, False),
            ("policy on", {"nsfw": {"enabled": True}}, {}, True),
            ("policy off", {"nsfw": {"enabled": False}}, {}, False),
            ("no nsfw section", {"seperate_users": True}, {}, False),
            ("a truthy string is not true", {"nsfw": {"enabled": "yes"}}, {}, False),
            ("not JSON", "{nsfw", {}, False),
            ("a JSON list", [1], {}, False),
            ("the test classifier needs none", {"nsfw": {"enabled": True, "classifier": "test"}}, {}, False),
            ("the bundled one named", {"nsfw": {"enabled": True, "classifier": "nsfwjs"}}, {}, True),
        ]
        for name, config, env, expected in rows:
            with self.subTest(name):
                self.assertEqual(self.wanted(config, env), expected)

    def test_found_in_comfyuis_user_directory_without_env(self) -> None:
        # inside ComfyUI the data dir is <ComfyUI>/user/authsvc (data_dir.py): install.py, run
        # outside ComfyUI, finds its config.json there
        with tempfile.TemporaryDirectory() as comfy:
            package = os.path.join(comfy, "custom_nodes", "authsvc")
            data = os.path.join(comfy, "user", "authsvc")
            os.makedirs(package)
            os.makedirs(data)
            self.assertFalse(state.classifier_wanted(package, {}))
            with open(os.path.join(data, "config.json"), "w") as f:
                json.dump({"nsfw": {"enabled": True}}, f)
            self.assertTrue(state.classifier_wanted(package, {}))

    def test_current_needs_the_installed_lockfile(self) -> None:
        with tempfile.TemporaryDirectory() as root:
            folder = os.path.join(root, state.CLASSIFIER_DIR)
            os.makedirs(os.path.join(folder, "node_modules"))
            lock = {"packages": {"": {}, "node_modules/nsfwjs": {"version": "4.4.0", "integrity": "sha512-x"}}}
            with open(os.path.join(folder, "package-lock.json"), "w") as f:
                json.dump(lock, f)
            self.assertFalse(state.classifier_current(root))
            with open(os.path.join(folder, "node_modules", ".package-lock.json"), "w") as f:
                json.dump(lock, f)
            self.assertTrue(state.classifier_current(root))


class PreviewImage(unittest.TestCase):
    def test_rows(self) -> None:
        png = b"\x89PNG\r\n\x1a\nrest"
        meta = json.dumps({"image_type": "image/png", "node_id": "3"}).encode()
        rows = [
            ("PREVIEW_IMAGE: type header, then the image", 1, struct.pack(">I", 2) + png, png),
            ("a bytearray, as ComfyUI builds them", 1, bytearray(struct.pack(">I", 1) + png), png),
            ("WITH_METADATA: length, JSON, then the image", 4, struct.pack(">I", len(meta)) + meta + png, png),
            ("WITH_METADATA whose length runs past the end", 4, struct.pack(">I", 999) + meta, None),
            ("too short", 1, b"\x00\x00", None),
        ]
        for name, event, data, expected in rows:
            with self.subTest(name):
                self.assertEqual(preview_check.image_of(event, data), expected)


if __name__ == "__main__":
    unittest.main()
