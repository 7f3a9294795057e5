"""Node classes of the stand-in and their `/object_info` descriptions.

Guarantees:
* `NODE_CLASS_MAPPINGS` holds every class of the captured `/object_info` (in the captured
  order), then `UpscaleModelLoader`, `ImageUpscaleWithModel` and `StandinSleep`; custom
  nodes are added after those by the loader.
* `node_info(name)` answers the captured description for captured classes, with every input
  that lists files rebuilt from the disk on each call (through `folder_paths` attributes
  looked up at call time, so a wrapper installed by a plugin is seen). Other classes are
  described from their INPUT_TYPES / RETURN_TYPES / ... attributes.
* Only a handful of classes do real (tiny) work; every other one returns `None` outputs.
  Images are `Picture` values: a logical size and one colour. Written PNGs are at most
  16x16 and carry the graph as a `prompt` tEXt chunk.
* `interrupt_processing()` / `processing_interrupted()` is the one interrupt flag the
  executor and the long-running nodes look at.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import string
import struct
import threading
import zlib
from dataclasses import dataclass, replace
from typing import Any

import folder_paths

NODE_CLASS_MAPPINGS: dict[str, type] = {}
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {}
# Filled by the custom-node loader; kept here because packages look for them in `nodes`.
EXTENSION_WEB_DIRS: dict[str, str] = {}
LOADED_MODULE_DIRS: dict[str, str] = {}

MAX_BATCH = 64
MAX_SIDE = 16
_CAPTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "object_info.json")


# --------------------------------------------------------------------------- interrupt flag
class Interrupted(Exception):
    """Raised inside a run once the interrupt flag is up."""


_interrupt = threading.Event()


def interrupt_processing(value: bool = True) -> None:
    if value:
        _interrupt.set()
    else:
        _interrupt.clear()


def processing_interrupted() -> bool:
    return _interrupt.is_set()


def stop_if_interrupted() -> None:
    if _interrupt.is_set():
        raise Interrupted()


# --------------------------------------------------------------------------- pictures and PNGs
@dataclass(frozen=True)
class Picture:
    """What flows along IMAGE links: no pixels, only what the tests can observe."""
    width: int
    height: int
    count: int
    rgb: tuple[int, int, int]


def _png(width: int, height: int, rgb: tuple[int, int, int], text: dict[str, str]) -> bytes:
    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(tag + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc)

    row = b"\x00" + bytes(rgb) * width  # filter byte 0, then RGB triples
    parts = [chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))]
    parts += [chunk(b"tEXt", k.encode("latin-1") + b"\0" + v.encode("latin-1", "replace")) for k, v in text.items()]
    parts.append(chunk(b"IDAT", zlib.compress(row * height)))
    parts.append(chunk(b"IEND", b""))
    return b"\x89PNG\r\n\x1a\n" + b"".join(parts)


def _png_size(path: str) -> tuple[int, int] | None:
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        return None
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def _write_pictures(images: Picture, prefix: str, folder: str, kind: str, prompt: Any) -> dict[str, Any]:
    full_dir, base, counter, subfolder, _ = folder_paths.get_save_image_path(prefix, folder, images.width, images.height)
    os.makedirs(full_dir, exist_ok=True)
    text = {"prompt": json.dumps(prompt)} if prompt is not None else {}
    w, h = max(1, min(images.width, MAX_SIDE)), max(1, min(images.height, MAX_SIDE))
    written = []
    for _ in range(images.count):
        name = f"{base}_{counter:05}_.png"
        with open(os.path.join(full_dir, name), "wb") as f:
            f.write(_png(w, h, images.rgb, text))
        written.append({"filename": name, "subfolder": subfolder, "type": kind})
        counter += 1
    return {"ui": {"images": written}}


def _resize(images: Picture, width: int, height: int) -> Picture:
    # 0 keeps the aspect ratio from the other side, as the host's scaler does
    if width == 0 and height == 0:
        return images
    if width == 0:
        width = max(1, round(images.width * height / images.height))
    if height == 0:
        height = max(1, round(images.height * width / images.width))
    return replace(images, width=width, height=height)


# --------------------------------------------------------------------------- working classes
class EmptyImage:
    FUNCTION = "make"

    def make(self, width, height, batch_size=1, color=0):
        rgb = ((color >> 16) & 0xFF, (color >> 8) & 0xFF, color & 0xFF)
        return (Picture(width, height, min(batch_size, MAX_BATCH), rgb),)


class ImageScale:
    FUNCTION = "scale"

    def scale(self, image, upscale_method, width, height, crop="disabled"):
        return (_resize(image, width, height),)


class ImageScaleBy:
    FUNCTION = "scale"

    def scale(self, image, upscale_method, scale_by):
        return (replace(image, width=max(1, round(image.width * scale_by)), height=max(1, round(image.height * scale_by))),)


class _InputFileCheck:
    """Any existing input file passes (subfolders and `[type]` annotations too), not only the listed ones."""

    @classmethod
    def VALIDATE_INPUTS(cls, image):
        return True if folder_paths.exists_annotated_filepath(image) else f"Invalid image file: {image}"


class LoadImageMask(_InputFileCheck):
    FUNCTION = "load"

    def load(self, image, channel="alpha"):
        return (None,)


class LoadImage(_InputFileCheck):
    FUNCTION = "load"

    def load(self, image):
        # never fails on a file that is not a PNG (the stand-in has no decoder); the size is
        # read from a PNG header when there is one
        path = folder_paths.get_annotated_filepath(image)
        w, h = _png_size(path) or (64, 64)
        return (Picture(w, h, 1, (128, 128, 128)), None)


class GetImageSize:
    FUNCTION = "measure"

    def measure(self, image, unique_id=None):
        import server  # the running PromptServer, for its binary progress-text frame
        text = f"width: {image.width}, height: {image.height}\n batch size: {image.count}"
        if unique_id is not None:
            server.PromptServer.instance.send_progress_text(text, unique_id, None)
        return (image.width, image.height, image.count)


class SaveImage:
    FUNCTION = "save"

    def save(self, images, filename_prefix="ComfyUI", prompt=None, extra_pnginfo=None):
        return _write_pictures(images, filename_prefix, folder_paths.get_output_directory(), "output", prompt)


class PreviewImage:
    FUNCTION = "save"

    def save(self, images, prompt=None, extra_pnginfo=None):
        tag = "".join(random.choice(string.ascii_lowercase) for _ in range(5))
        return _write_pictures(images, "ComfyUI_temp_" + tag, folder_paths.get_temp_directory(), "temp", prompt)


def _file_enum(folder: str, extra: tuple[str, ...] = ()) -> Any:
    return lambda: [*folder_paths.get_filename_list(folder), *extra]


class UpscaleModelLoader:
    RELATIVE_PYTHON_MODULE = "comfy_extras.nodes_upscale_model"
    CATEGORY = "loaders"
    RETURN_TYPES = ("UPSCALE_MODEL",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model_name": (folder_paths.get_filename_list("upscale_models"),)}}

    def load(self, model_name):
        return (model_name,)


class ImageUpscaleWithModel:
    RELATIVE_PYTHON_MODULE = "comfy_extras.nodes_upscale_model"
    CATEGORY = "image/upscaling"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "upscale"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"upscale_model": ("UPSCALE_MODEL",), "image": ("IMAGE",)}}

    def upscale(self, upscale_model, image):
        # the factor is read from names like "4x-ultrasharp.pth" or "x2.pth"; 4 otherwise
        found = re.search(r"(\d+)x|x(\d+)", str(upscale_model or "").lower())
        factor = int(found.group(1) or found.group(2)) if found else 4
        return (replace(image, width=image.width * factor, height=image.height * factor),)


class StandinSleep:
    """Test node: keeps the worker busy, reports progress, can fail on request."""
    RELATIVE_PYTHON_MODULE = "nodes"
    CATEGORY = "standin"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "sleep"
    NEVER_CACHED = True

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"seconds": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 3600.0, "step": 0.01})},
            "optional": {"text": ("STRING", {"default": ""}), "fail": ("BOOLEAN", {"default": False}),
                         "images": ("IMAGE",)},
            "hidden": {"unique_id": "UNIQUE_ID"},
        }

    async def sleep(self, seconds, text="", fail=False, images=None, unique_id=None):
        import execution
        import server
        if text:
            server.PromptServer.instance.send_progress_text(text, unique_id, None)
        ticks = max(1, int(seconds / 0.1 + 0.999)) if seconds > 0 else 0
        for tick in range(ticks):
            stop_if_interrupted()
            await asyncio.sleep(max(0.0, min(0.1, seconds - tick * 0.1)))
            execution.report_progress(tick + 1, ticks)
        stop_if_interrupted()
        if fail:
            raise RuntimeError("StandinSleep was asked to fail")
        return ()


# --------------------------------------------------------------------------- /object_info
_captured: dict[str, dict[str, Any]] = {}

# Captured inputs that list files: class -> input -> how to list them now.
_FILE_INPUTS: dict[str, dict[str, Any]] = {
    "CheckpointLoaderSimple": {"ckpt_name": _file_enum("checkpoints")},
    "CheckpointLoader": {"ckpt_name": _file_enum("checkpoints")},
    "unCLIPCheckpointLoader": {"ckpt_name": _file_enum("checkpoints")},
    "ImageOnlyCheckpointLoader": {"ckpt_name": _file_enum("checkpoints")},
    "CreateHookModelAsLora": {"ckpt_name": _file_enum("checkpoints")},
    "CreateHookModelAsLoraModelOnly": {"ckpt_name": _file_enum("checkpoints")},
    "LoraLoader": {"lora_name": _file_enum("loras")},
    "LoraLoaderModelOnly": {"lora_name": _file_enum("loras")},
    "CreateHookLora": {"lora_name": _file_enum("loras")},
    "CreateHookLoraModelOnly": {"lora_name": _file_enum("loras")},
    "TrainLoraNode": {"existing_lora": _file_enum("loras", ("[None]",))},
    "VAELoader": {"vae_name": _file_enum("vae", ("pixel_space",))},
    "CLIPLoader": {"clip_name": _file_enum("text_encoders")},
    "DualCLIPLoader": {f"clip_name{i}": _file_enum("text_encoders") for i in (1, 2)},
    "TripleCLIPLoader": {f"clip_name{i}": _file_enum("text_encoders") for i in (1, 2, 3)},
    "QuadrupleCLIPLoader": {f"clip_name{i}": _file_enum("text_encoders") for i in (1, 2, 3, 4)},
    "UNETLoader": {"unet_name": _file_enum("diffusion_models")},
    "ControlNetLoader": {"control_net_name": _file_enum("controlnet")},
    "DiffControlNetLoader": {"control_net_name": _file_enum("controlnet")},
    "CLIPVisionLoader": {"clip_name": _file_enum("clip_vision")},
    "StyleModelLoader": {"style_model_name": _file_enum("style_models")},
    "GLIGENLoader": {"gligen_name": _file_enum("gligen")},
    "HypernetworkLoader": {"hypernetwork_name": _file_enum("hypernetworks")},
    "PhotoMakerLoader": {"photomaker_model_name": _file_enum("photomaker")},
    "ModelPatchLoader": {"name": _file_enum("model_patches")},
    "AudioEncoderLoader": {"audio_encoder_name": _file_enum("audio_encoders")},
    "LoadImage": {"image": lambda: _input_files(images_only=True)},
    "LoadImageMask": {"image": lambda: _input_files(images_only=False)},
}


def _input_files(images_only: bool) -> list[str]:
    # top level of input/ only: uploads into a subfolder never show up here
    folder = folder_paths.get_input_directory()
    try:
        names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
    except OSError:
        return []
    return folder_paths.filter_files_content_types(names, ["image"]) if images_only else names


def _with_options(spec: list[Any], options: list[str]) -> list[Any]:
    """The same input spec with a new option list, in whichever of the two forms it uses."""
    if spec and spec[0] == "COMBO" and len(spec) > 1 and isinstance(spec[1], dict):
        return ["COMBO", {**spec[1], "options": options}]
    return [options, *spec[1:]]


def _live_capture(name: str) -> dict[str, Any]:
    entry = _captured[name]
    listers = _FILE_INPUTS.get(name)
    if not listers:
        return entry  # shared, never mutated: the handler only serialises it
    sections = {}
    for section, inputs in entry["input"].items():
        if isinstance(inputs, dict) and any(k in listers for k in inputs):
            inputs = {k: _with_options(v, listers[k]()) if k in listers else v for k, v in inputs.items()}
        sections[section] = inputs
    return {**entry, "input": sections}


def _described(name: str, cls: type) -> dict[str, Any]:
    inputs = cls.INPUT_TYPES()
    outputs = list(getattr(cls, "RETURN_TYPES", ()))
    info: dict[str, Any] = {
        "input": inputs,
        "input_order": {section: list(v) for section, v in inputs.items() if isinstance(v, dict)},
        "output": outputs,
        "output_is_list": list(getattr(cls, "OUTPUT_IS_LIST", [False] * len(outputs))),
        "output_name": list(getattr(cls, "RETURN_NAMES", outputs)),
        "name": name,
        "display_name": NODE_DISPLAY_NAME_MAPPINGS.get(name, name),
        "description": getattr(cls, "DESCRIPTION", ""),
        "python_module": getattr(cls, "RELATIVE_PYTHON_MODULE", "nodes"),
        "category": getattr(cls, "CATEGORY", "sd"),
        "output_node": bool(getattr(cls, "OUTPUT_NODE", False)),
    }
    for flag in ("DEPRECATED", "EXPERIMENTAL", "API_NODE"):
        if getattr(cls, flag, False):
            info[flag.lower()] = True
    if hasattr(cls, "OUTPUT_TOOLTIPS"):
        info["output_tooltips"] = list(cls.OUTPUT_TOOLTIPS)
    return info


def node_info(class_type: str) -> dict[str, Any]:
    cls = NODE_CLASS_MAPPINGS[class_type]
    if getattr(cls, "STANDIN_CAPTURED", False) and class_type in _captured:
        return _live_capture(class_type)
    return _described(class_type, cls)


# --------------------------------------------------------------------------- registration
_WORKING = {c.__name__: c for c in (EmptyImage, ImageScale, ImageScaleBy, LoadImage, LoadImageMask, GetImageSize,
                                    SaveImage, PreviewImage)}


def _captured_class(name: str, entry: dict[str, Any]) -> type:
    """A class for a captured node: the working one when there is one, else a do-nothing one."""
    body: dict[str, Any] = {
        "STANDIN_CAPTURED": True,
        "RETURN_TYPES": tuple(entry.get("output", ())),
        "OUTPUT_NODE": bool(entry.get("output_node")),
        "CATEGORY": entry.get("category", ""),
    }
    base = _WORKING.get(name)
    if base is None:
        body["FUNCTION"] = "nothing"
        body["nothing"] = lambda self, **_: tuple(None for _ in body["RETURN_TYPES"])
        base = object
    return type(name, (base,), body)


def init_builtin_nodes() -> None:
    with open(_CAPTURE, encoding="utf-8") as f:
        _captured.update(json.load(f))
    for name, entry in _captured.items():
        NODE_CLASS_MAPPINGS[name] = _captured_class(name, entry)
        if entry.get("display_name") is not None:
            NODE_DISPLAY_NAME_MAPPINGS[name] = entry["display_name"]
    for cls in (UpscaleModelLoader, ImageUpscaleWithModel, StandinSleep):
        NODE_CLASS_MAPPINGS[cls.__name__] = cls
    NODE_DISPLAY_NAME_MAPPINGS.update({"UpscaleModelLoader": "Load Upscale Model",
                                       "ImageUpscaleWithModel": "Upscale Image (using Model)",
                                       "StandinSleep": "Stand-in Sleep"})
