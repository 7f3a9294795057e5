"""Stand-in for ComfyUI's `nodes` module.

* NODE_CLASS_MAPPINGS holds one placeholder class per node of the captured
  object_info (fixtures/object_info.json, ComfyUI 0.3.64), plus UpscaleModelLoader /
  ImageUpscaleWithModel (absent from the capture only because spandrel was missing)
  and the stand-in's own StandinSleep, then every custom node's classes.
* Inputs whose choices are files (model folders, input/) are recomputed live.
* Custom nodes are loaded exactly like ComfyUI does (`load_custom_node`).
"""
from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import sys
import time
import traceback

import folder_paths

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")

NODE_CLASS_MAPPINGS: dict[str, type] = {}
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {}
EXTENSION_WEB_DIRS: dict[str, str] = {}
LOADED_MODULE_DIRS: dict[str, str] = {}
# results of the last init_external_custom_nodes: [(seconds, path, success)]
IMPORT_RESULTS: list[tuple[float, str, bool]] = []

# ---------------------------------------------------------------- interrupt flag
_interrupt = False


def interrupt_processing(value: bool = True) -> None:
    global _interrupt
    _interrupt = value


def processing_interrupted() -> bool:
    return _interrupt


# ---------------------------------------------------------------- built-in node infos
_EXTRA_INFOS = {
    "UpscaleModelLoader": {
        "input": {"required": {"model_name": [[]]}},
        "input_order": {"required": ["model_name"]},
        "output": ["UPSCALE_MODEL"], "output_is_list": [False], "output_name": ["UPSCALE_MODEL"],
        "name": "UpscaleModelLoader", "display_name": "Load Upscale Model", "description": "",
        "python_module": "comfy_extras.nodes_upscale_model", "category": "loaders", "output_node": False,
    },
    "ImageUpscaleWithModel": {
        "input": {"required": {"upscale_model": ["UPSCALE_MODEL"], "image": ["IMAGE"]}},
        "input_order": {"required": ["upscale_model", "image"]},
        "output": ["IMAGE"], "output_is_list": [False], "output_name": ["IMAGE"],
        "name": "ImageUpscaleWithModel", "display_name": "Upscale Image (using Model)", "description": "",
        "python_module": "comfy_extras.nodes_upscale_model", "category": "image/upscaling", "output_node": False,
    },
    "StandinSleep": {
        "input": {
            "required": {"seconds": ["FLOAT", {"default": 1.0, "min": 0.0, "max": 3600.0, "step": 0.1}]},
            "optional": {
                "text": ["STRING", {"default": ""}],
                "fail": ["BOOLEAN", {"default": False}],
                "images": ["IMAGE"],
            },
        },
        "input_order": {"required": ["seconds"], "optional": ["text", "fail", "images"]},
        "output": [], "output_is_list": [], "output_name": [],
        "name": "StandinSleep", "display_name": "Stand-in Sleep",
        "description": "Test node of the ComfyUI stand-in: runs for `seconds` (interruptible), never cached. "
                       "`text` is sent as a binary progress-text frame to all sockets; `fail` raises.",
        "python_module": "nodes", "category": "testing", "output_node": True,
    },
}

_BASE_INFO: dict[str, dict] | None = None


def base_infos() -> dict[str, dict]:
    global _BASE_INFO
    if _BASE_INFO is None:
        with open(os.path.join(FIXTURES, "object_info.json"), encoding="utf-8") as f:
            infos = json.load(f)
        for name, info in _EXTRA_INFOS.items():
            infos.setdefault(name, info)
        _BASE_INFO = infos
    return _BASE_INFO


def _input_files(filter_fn=None) -> list[str]:
    input_dir = folder_paths.get_input_directory()
    try:
        files = [f for f in os.listdir(input_dir) if os.path.isfile(os.path.join(input_dir, f))]
    except FileNotFoundError:
        files = []
    if filter_fn is not None:
        files = filter_fn(files)
    return sorted(files)


def vae_list() -> list[str]:
    vaes = folder_paths.get_filename_list("vae")
    approx = folder_paths.get_filename_list("vae_approx")
    flags = set()
    for v in approx:
        for stem in ("taesd_decoder.", "taesd_encoder.", "taesdxl_decoder.", "taesdxl_encoder.",
                     "taesd3_decoder.", "taesd3_encoder.", "taef1_decoder.", "taef1_encoder."):
            if v.startswith(stem):
                flags.add(stem[:-1])
    for name in ("taesd", "taesdxl", "taesd3", "taef1"):
        if f"{name}_decoder" in flags and f"{name}_encoder" in flags:
            vaes.append(name)
    vaes.append("pixel_space")
    return vaes


def diffusers_list() -> list[str]:
    paths = []
    for search_path in folder_paths.get_folder_paths("diffusers"):
        if os.path.exists(search_path):
            for root, _subdir, files in os.walk(search_path, followlinks=True):
                if "model_index.json" in files:
                    paths.append(os.path.relpath(root, start=search_path))
    return paths


def _folder(name):
    return lambda: folder_paths.get_filename_list(name)


# (class, input) -> model folder: the enum is the folder's live file list
MODEL_INPUTS: dict[tuple[str, str], str] = {
    ("CheckpointLoaderSimple", "ckpt_name"): "checkpoints",
    ("CheckpointLoader", "ckpt_name"): "checkpoints",
    ("CheckpointLoader", "config_name"): "configs",
    ("unCLIPCheckpointLoader", "ckpt_name"): "checkpoints",
    ("ImageOnlyCheckpointLoader", "ckpt_name"): "checkpoints",
    ("CreateHookModelAsLora", "ckpt_name"): "checkpoints",
    ("CreateHookModelAsLoraModelOnly", "ckpt_name"): "checkpoints",
    ("LoraLoader", "lora_name"): "loras",
    ("LoraLoaderModelOnly", "lora_name"): "loras",
    ("CreateHookLora", "lora_name"): "loras",
    ("CreateHookLoraModelOnly", "lora_name"): "loras",
    ("CLIPLoader", "clip_name"): "text_encoders",
    ("DualCLIPLoader", "clip_name1"): "text_encoders",
    ("DualCLIPLoader", "clip_name2"): "text_encoders",
    ("TripleCLIPLoader", "clip_name1"): "text_encoders",
    ("TripleCLIPLoader", "clip_name2"): "text_encoders",
    ("TripleCLIPLoader", "clip_name3"): "text_encoders",
    ("QuadrupleCLIPLoader", "clip_name1"): "text_encoders",
    ("QuadrupleCLIPLoader", "clip_name2"): "text_encoders",
    ("QuadrupleCLIPLoader", "clip_name3"): "text_encoders",
    ("QuadrupleCLIPLoader", "clip_name4"): "text_encoders",
    ("UNETLoader", "unet_name"): "diffusion_models",
    ("ControlNetLoader", "control_net_name"): "controlnet",
    ("DiffControlNetLoader", "control_net_name"): "controlnet",
    ("StyleModelLoader", "style_model_name"): "style_models",
    ("CLIPVisionLoader", "clip_name"): "clip_vision",
    ("GLIGENLoader", "gligen_name"): "gligen",
    ("HypernetworkLoader", "hypernetwork_name"): "hypernetworks",
    ("PhotoMakerLoader", "photomaker_model_name"): "photomaker",
    ("ModelPatchLoader", "name"): "model_patches",
    ("AudioEncoderLoader", "audio_encoder_name"): "audio_encoders",
    ("UpscaleModelLoader", "model_name"): "upscale_models",
}

# (class, input) -> callable returning the live choices
LIVE_INPUTS = {key: _folder(folder) for key, folder in MODEL_INPUTS.items()}
LIVE_INPUTS.update({
    ("VAELoader", "vae_name"): vae_list,
    ("TrainLoraNode", "existing_lora"): lambda: folder_paths.get_filename_list("loras") + ["[None]"],
    ("DiffusersLoader", "model_path"): diffusers_list,
    ("LoadImage", "image"): lambda: _input_files(lambda fs: folder_paths.filter_files_content_types(fs, ["image"])),
    ("LoadImageMask", "image"): lambda: _input_files(),
    ("LoadLatent", "latent"): lambda: _input_files(lambda fs: [f for f in fs if f.endswith(".latent")]),
})
_LIVE_CLASSES: dict[str, list[str]] = {}
for (_cls, _inp) in LIVE_INPUTS:
    _LIVE_CLASSES.setdefault(_cls, []).append(_inp)


def builtin_node_info(class_type: str) -> dict:
    """The captured info of a built-in class; file enums replaced by live lists.

    Returns the shared dict for classes without live inputs (do not mutate)."""
    info = base_infos()[class_type]
    live = _LIVE_CLASSES.get(class_type)
    if not live:
        return info
    info = copy.deepcopy(info)
    for input_name in live:
        for section in ("required", "optional"):
            spec = (info["input"].get(section) or {}).get(input_name)
            if spec is None:
                continue
            values = LIVE_INPUTS[(class_type, input_name)]()
            if spec and spec[0] == "COMBO":
                spec[1]["options"] = values
            else:
                spec[0] = values
    return info


class StandinBuiltinNode:
    """Placeholder for a built-in ComfyUI node (its info comes from the capture)."""
    STANDIN_BUILTIN = True
    FUNCTION = "execute"
    CATEGORY = ""

    @classmethod
    def INPUT_TYPES(cls):
        return builtin_node_info(cls.STANDIN_NAME)["input"]


def _make_builtin(name: str, info: dict) -> type:
    attrs = {
        "STANDIN_NAME": name,
        "RETURN_TYPES": tuple(info.get("output") or ()),
        "RETURN_NAMES": tuple(info.get("output_name") or ()),
        "OUTPUT_NODE": bool(info.get("output_node")),
        "CATEGORY": info.get("category", ""),
        "DESCRIPTION": info.get("description", ""),
    }
    return type(name, (StandinBuiltinNode,), attrs)


def init_builtin_nodes() -> None:
    for name, info in base_infos().items():
        if name not in NODE_CLASS_MAPPINGS:
            NODE_CLASS_MAPPINGS[name] = _make_builtin(name, info)
            if info.get("display_name"):
                NODE_DISPLAY_NAME_MAPPINGS[name] = info["display_name"]


def is_builtin(class_type: str) -> bool:
    cls = NODE_CLASS_MAPPINGS.get(class_type)
    return cls is not None and getattr(cls, "STANDIN_BUILTIN", False) is True


def node_info(node_class: str) -> dict:
    """GET /object_info entry for a class (ComfyUI's server.node_info for custom classes)."""
    if is_builtin(node_class):
        return builtin_node_info(node_class)
    obj_class = NODE_CLASS_MAPPINGS[node_class]
    if hasattr(obj_class, "GET_NODE_INFO_V1"):
        return obj_class.GET_NODE_INFO_V1()
    info = {}
    info['input'] = obj_class.INPUT_TYPES()
    info['input_order'] = {key: list(value.keys()) for (key, value) in obj_class.INPUT_TYPES().items()}
    info['output'] = obj_class.RETURN_TYPES
    info['output_is_list'] = obj_class.OUTPUT_IS_LIST if hasattr(obj_class, 'OUTPUT_IS_LIST') else [False] * len(obj_class.RETURN_TYPES)
    info['output_name'] = obj_class.RETURN_NAMES if hasattr(obj_class, 'RETURN_NAMES') else info['output']
    info['name'] = node_class
    info['display_name'] = NODE_DISPLAY_NAME_MAPPINGS[node_class] if node_class in NODE_DISPLAY_NAME_MAPPINGS.keys() else node_class
    info['description'] = obj_class.DESCRIPTION if hasattr(obj_class, 'DESCRIPTION') else ''
    info['python_module'] = getattr(obj_class, "RELATIVE_PYTHON_MODULE", "nodes")
    info['category'] = 'sd'
    if hasattr(obj_class, 'OUTPUT_NODE') and obj_class.OUTPUT_NODE is True:
        info['output_node'] = True
    else:
        info['output_node'] = False
    if hasattr(obj_class, 'CATEGORY'):
        info['category'] = obj_class.CATEGORY
    if hasattr(obj_class, 'OUTPUT_TOOLTIPS'):
        info['output_tooltips'] = obj_class.OUTPUT_TOOLTIPS
    if getattr(obj_class, "DEPRECATED", False):
        info['deprecated'] = True
    if getattr(obj_class, "EXPERIMENTAL", False):
        info['experimental'] = True
    if hasattr(obj_class, 'API_NODE'):
        info['api_node'] = obj_class.API_NODE
    return info


# ---------------------------------------------------------------- custom node loading
def get_module_name(module_path: str) -> str:
    base_path = os.path.basename(module_path)
    if os.path.isfile(module_path):
        base_path = os.path.splitext(base_path)[0]
    return base_path


def load_custom_node(module_path: str, ignore=frozenset(), module_parent: str = "custom_nodes") -> bool:
    """ComfyUI's loader: by file path, sys.modules key = the path ('.' -> '_x_')."""
    module_name = get_module_name(module_path)
    if os.path.isfile(module_path):
        sp = os.path.splitext(module_path)
        sys_module_name = sp[0]
    else:
        sys_module_name = module_path.replace(".", "_x_")
    try:
        logging.debug("Trying to load custom node %s", module_path)
        if os.path.isfile(module_path):
            module_spec = importlib.util.spec_from_file_location(sys_module_name, module_path)
            module_dir = os.path.split(module_path)[0]
        else:
            module_spec = importlib.util.spec_from_file_location(
                sys_module_name, os.path.join(module_path, "__init__.py"),
                submodule_search_locations=[module_path])
            module_dir = module_path

        module = importlib.util.module_from_spec(module_spec)
        sys.modules[sys_module_name] = module
        module_spec.loader.exec_module(module)

        LOADED_MODULE_DIRS[module_name] = os.path.abspath(module_dir)

        if hasattr(module, "WEB_DIRECTORY") and getattr(module, "WEB_DIRECTORY") is not None:
            web_dir = os.path.abspath(os.path.join(module_dir, getattr(module, "WEB_DIRECTORY")))
            if os.path.isdir(web_dir):
                EXTENSION_WEB_DIRS[module_name] = web_dir

        if hasattr(module, "NODE_CLASS_MAPPINGS") and getattr(module, "NODE_CLASS_MAPPINGS") is not None:
            for name, node_cls in module.NODE_CLASS_MAPPINGS.items():
                if name not in ignore:
                    NODE_CLASS_MAPPINGS[name] = node_cls
                    node_cls.RELATIVE_PYTHON_MODULE = "{}.{}".format(module_parent, get_module_name(module_path))
            if hasattr(module, "NODE_DISPLAY_NAME_MAPPINGS") and getattr(module, "NODE_DISPLAY_NAME_MAPPINGS") is not None:
                NODE_DISPLAY_NAME_MAPPINGS.update(module.NODE_DISPLAY_NAME_MAPPINGS)
            return True
        logging.warning("Skip %s module for custom nodes due to the lack of NODE_CLASS_MAPPINGS.", module_path)
        return False
    except Exception as e:
        tb = traceback.format_exc()
        logging.warning(tb)
        logging.warning("Cannot import %s module for custom nodes: %s", module_path, e)
        print(f"IMPORT FAILED: {module_path}", flush=True)
        return False


def _custom_node_candidates(custom_node_path: str) -> list[str]:
    try:
        possible_modules = sorted(os.listdir(os.path.realpath(custom_node_path)))
    except FileNotFoundError:
        return []
    out = []
    for possible_module in possible_modules:
        module_path = os.path.join(custom_node_path, possible_module)
        if os.path.isfile(module_path) and os.path.splitext(module_path)[1] != ".py":
            continue
        if module_path.endswith(".disabled"):
            continue
        if possible_module == "__pycache__":
            continue
        out.append(module_path)
    return out


def execute_prestartup_scripts() -> None:
    """Runs each package's prestartup_script.py (before PromptServer exists), as ComfyUI does."""
    for custom_node_path in folder_paths.get_folder_paths("custom_nodes"):
        for module_path in _custom_node_candidates(custom_node_path):
            if os.path.isfile(module_path):
                continue
            script_path = os.path.join(module_path, "prestartup_script.py")
            if not os.path.exists(script_path):
                continue
            try:
                spec = importlib.util.spec_from_file_location(os.path.splitext(script_path)[0], script_path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            except Exception as e:
                logging.error("Failed to execute startup-script: %s / %s", script_path, e)


def init_external_custom_nodes() -> None:
    base_node_names = set(NODE_CLASS_MAPPINGS.keys())
    IMPORT_RESULTS.clear()
    for custom_node_path in folder_paths.get_folder_paths("custom_nodes"):
        for module_path in _custom_node_candidates(custom_node_path):
            time_before = time.perf_counter()
            success = load_custom_node(module_path, base_node_names, module_parent="custom_nodes")
            IMPORT_RESULTS.append((time.perf_counter() - time_before, module_path, success))
    if IMPORT_RESULTS:
        lines = ["", "Import times for custom nodes:"]
        for n in sorted(IMPORT_RESULTS):
            import_message = "" if n[2] else " (IMPORT FAILED)"
            lines.append("{:6.1f} seconds{}: {}".format(n[0], import_message, n[1]))
        print("\n".join(lines) + "\n", flush=True)
