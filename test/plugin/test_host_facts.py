"""host_facts.py: the model inputs the plugin reports are read from the host's own /object_info
handler with one marker per folder (issue 11), whatever the node is called, for empty folders
too; the host's get_filename_list is always put back; facts reach later hellos and an event."""
from __future__ import annotations

import json
import sys
import types
import unittest
from unittest import mock
from typing import Any

from .support import plugin_module

host_facts = plugin_module("host_facts")


def fake_folder_paths(files: dict[str, list[str]]) -> types.ModuleType:
    fp = types.ModuleType("folder_paths")
    fp.folder_names_and_paths = {name: ([f"/m/{name}"], {".safetensors"}) for name in files}  # type: ignore[attr-defined]
    fp.map_legacy = lambda name: {"clip": "text_encoders"}.get(name, name)  # type: ignore[attr-defined]

    def get_filename_list(name: str) -> list[str]:
        return list(files[fp.map_legacy(name)])

    fp.get_filename_list = get_filename_list  # type: ignore[attr-defined]
    return fp


class Response:
    def __init__(self, body: Any) -> None:
        self.text = json.dumps(body)


class Route:
    def __init__(self, method: str, path: str, handler: Any) -> None:
        self.method, self.path, self.handler = method, path, handler


class ModelInputs(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.saved = sys.modules.get("folder_paths")
        self.fp = fake_folder_paths({"checkpoints": ["a.safetensors"], "vae": [], "text_encoders": ["t.safetensors"], "mine": ["a.safetensors"]})
        sys.modules["folder_paths"] = self.fp
        fp = self.fp

        async def object_info(_request: Any) -> Response:
            # what node definitions do: read the lists when asked, filter or extend them
            return Response({
                "Ckpt": {"input": {"required": {"ckpt_name": [fp.get_filename_list("checkpoints"), {}], "seed": ["INT", {}]}}},
                "Vae": {"input": {"required": {"vae_name": [fp.get_filename_list("vae") + ["pixel_space"]]}}},
                "Clip": {"input": {"optional": {"clip_name": ["COMBO", {"options": fp.get_filename_list("clip")}]}}},
                "Mine": {"input": {"required": {"m": [[x for x in fp.get_filename_list("mine") if x.endswith(".safetensors")]]}}},
                "Sampler": {"input": {"required": {"sampler_name": [["euler", "a.safetensors"]]}}},
            })

        self.server = types.SimpleNamespace(routes=[Route("GET", "/object_info/{node_class}", None), Route("GET", "/object_info", object_info)])

    def tearDown(self) -> None:
        if self.saved is None:
            sys.modules.pop("folder_paths", None)
        else:
            sys.modules["folder_paths"] = self.saved

    async def test_inputs_by_marker_not_by_name_or_content(self) -> None:
        real = self.fp.get_filename_list
        inputs = await host_facts.probe_model_inputs(self.server)
        self.assertIs(self.fp.get_filename_list, real, "the host's function is put back")
        self.assertEqual(inputs, {
            "Ckpt": {"ckpt_name": {"folders": ["checkpoints"], "extras": []}},
            "Vae": {"vae_name": {"folders": ["vae"], "extras": ["pixel_space"]}},
            "Clip": {"clip_name": {"folders": ["text_encoders"], "extras": []}},
            "Mine": {"m": {"folders": ["mine"], "extras": []}},
        })

    async def test_the_function_is_put_back_when_the_handler_fails(self) -> None:
        real = self.fp.get_filename_list

        async def broken(_request: Any) -> Response:
            raise RuntimeError("a node failed")

        with self.assertRaises(RuntimeError):
            await host_facts.probe_model_inputs(types.SimpleNamespace(routes=[Route("GET", "/object_info", broken)]))
        self.assertIs(self.fp.get_filename_list, real)

    async def test_startup_facts_go_into_later_hellos_and_an_event(self) -> None:
        class App:
            on_startup: list[Any] = []

        app = App()
        app.on_startup = []
        hello: dict[str, Any] = {"protocol": 2, "host": {}}
        sent: list[dict[str, Any]] = []
        host_facts.install(app, self.server, hello, sent.append)
        await app.on_startup[0](app)
        self.assertEqual(sent[0]["name"], "host_facts")
        self.assertIs(hello["host"], sent[0]["data"])
        facts = hello["host"]
        self.assertEqual(facts["model_folders"]["checkpoints"], ["/m/checkpoints"])
        self.assertEqual(facts["model_folder_extensions"]["checkpoints"], [".safetensors"])
        self.assertEqual(facts["legacy_folders"], {"clip": "text_encoders"})
        self.assertEqual(facts["model_inputs"]["Ckpt"], {"ckpt_name": {"folders": ["checkpoints"], "extras": []}})
        self.assertIn(facts["model_paths"]["sep"], ("/", "\\"))
        self.assertIs(facts["all_nodes_loaded"], True)
        self.assertNotIn("all_nodes_loaded", host_facts.collect(), "the import-time facts do not say it")

    async def test_startup_facts_that_cannot_be_read_again_keep_the_hellos_say_every_node_loaded_and_that_they_may_lack_some(self) -> None:
        class App:
            on_startup: list[Any] = []

        app = App()
        app.on_startup = []
        hello: dict[str, Any] = {"protocol": 2, "host": {"model_folders": {"checkpoints": ["/m/checkpoints"]}}}
        sent: list[dict[str, Any]] = []
        host_facts.install(app, self.server, hello, sent.append)
        with mock.patch.object(host_facts, "collect", side_effect=RuntimeError("broken folder_paths")), self.assertLogs("authsvc", "ERROR"):
            await app.on_startup[0](app)
        self.assertEqual(sent[0]["data"], {"model_folders": {"checkpoints": ["/m/checkpoints"]}, "all_nodes_loaded": True, "facts_incomplete": True})
        self.assertIs(hello["host"], sent[0]["data"])


if __name__ == "__main__":
    unittest.main()


class WriterInputs(unittest.TestCase):
    """writer_inputs_of: the text inputs by which an output node names where it writes."""

    def test_output_nodes_prefix_text_inputs_only(self) -> None:
        writer_inputs_of = plugin_module("host_facts").writer_inputs_of
        info = {
            "SaveImage": {"output_node": True, "input": {"required": {"images": ["IMAGE"], "filename_prefix": ["STRING", {"default": "ComfyUI"}]}}},
            "SaveLoRANode": {"output_node": True, "input": {"required": {"lora": ["LORA_MODEL"], "prefix": ["STRING", {}]}, "optional": {"steps": ["INT", {}]}}},
            "CLIPTextEncode": {"output_node": False, "input": {"required": {"text": ["STRING", {}], "prefix": ["STRING", {}]}}},
            "Odd": {"output_node": True, "input": {"required": {"prefix": [["a", "b"]]}}},
        }
        self.assertEqual(writer_inputs_of(info), {"SaveImage": ["filename_prefix"], "SaveLoRANode": ["prefix"]})
