"""Stand-in for ComfyUI's `folder_paths` module (0.3.64 layout).

The base directory is set by main.py (`set_base_path`) before any custom node is
imported; the module-level names (`base_path`, `models_dir`, ...) and the
`folder_names_and_paths` dict (mutated in place) follow it.
"""
from __future__ import annotations

import logging
import mimetypes
import os
import time
from collections.abc import Collection

supported_pt_extensions: set[str] = {'.ckpt', '.pt', '.pt2', '.bin', '.pth', '.safetensors', '.pkl', '.sft'}

# name -> ([paths], set(extensions)); insertion order is the order of GET /models
folder_names_and_paths: dict[str, tuple[list[str], set[str]]] = {}

base_path: str = os.path.abspath(os.environ.get("COMFYUI_STANDIN_BASE") or os.path.dirname(os.path.realpath(__file__)))
models_dir: str = os.path.join(base_path, "models")
output_directory: str = os.path.join(base_path, "output")
temp_directory: str = os.path.join(base_path, "temp")
input_directory: str = os.path.join(base_path, "input")
user_directory: str = os.path.join(base_path, "user")

filename_list_cache: dict = {}

LEGACY_NAMES = {"unet": "diffusion_models", "clip": "text_encoders"}

# (name, [sub-paths relative to models_dir], extensions) exactly as ComfyUI 0.3.64 declares them
_FOLDERS = [
    ("checkpoints", ["checkpoints"], supported_pt_extensions),
    ("configs", ["configs"], {".yaml"}),
    ("loras", ["loras"], supported_pt_extensions),
    ("vae", ["vae"], supported_pt_extensions),
    ("text_encoders", ["text_encoders", "clip"], supported_pt_extensions),
    ("diffusion_models", ["unet", "diffusion_models"], supported_pt_extensions),
    ("clip_vision", ["clip_vision"], supported_pt_extensions),
    ("style_models", ["style_models"], supported_pt_extensions),
    ("embeddings", ["embeddings"], supported_pt_extensions),
    ("diffusers", ["diffusers"], {"folder"}),
    ("vae_approx", ["vae_approx"], supported_pt_extensions),
    ("controlnet", ["controlnet", "t2i_adapter"], supported_pt_extensions),
    ("gligen", ["gligen"], supported_pt_extensions),
    ("upscale_models", ["upscale_models"], supported_pt_extensions),
    ("custom_nodes", None, set()),  # <base>/custom_nodes
    ("hypernetworks", ["hypernetworks"], supported_pt_extensions),
    ("photomaker", ["photomaker"], supported_pt_extensions),
    ("classifiers", ["classifiers"], {""}),
    ("model_patches", ["model_patches"], supported_pt_extensions),
    ("audio_encoders", ["audio_encoders"], supported_pt_extensions),
]


def set_base_path(path: str) -> None:
    """Re-root every folder at `path` (called by main.py before anything else)."""
    global base_path, models_dir, output_directory, temp_directory, input_directory, user_directory
    base_path = os.path.abspath(path)
    models_dir = os.path.join(base_path, "models")
    output_directory = os.path.join(base_path, "output")
    temp_directory = os.path.join(base_path, "temp")
    input_directory = os.path.join(base_path, "input")
    user_directory = os.path.join(base_path, "user")
    folder_names_and_paths.clear()
    for name, subs, exts in _FOLDERS:
        if subs is None:
            paths = [os.path.join(base_path, "custom_nodes")]
        else:
            paths = [os.path.join(models_dir, s) for s in subs]
        folder_names_and_paths[name] = (paths, set(exts))
    filename_list_cache.clear()


set_base_path(base_path)


def map_legacy(folder_name: str) -> str:
    return LEGACY_NAMES.get(folder_name, folder_name)


def set_output_directory(output_dir: str) -> None:
    global output_directory
    output_directory = output_dir


def set_temp_directory(temp_dir: str) -> None:
    global temp_directory
    temp_directory = temp_dir


def set_input_directory(input_dir: str) -> None:
    global input_directory
    input_directory = input_dir


def set_user_directory(user_dir: str) -> None:
    global user_directory
    user_directory = user_dir


def get_output_directory() -> str:
    return output_directory


def get_temp_directory() -> str:
    return temp_directory


def get_input_directory() -> str:
    return input_directory


def get_user_directory() -> str:
    return user_directory


def get_directory_by_type(type_name: str) -> str | None:
    if type_name == "output":
        return get_output_directory()
    if type_name == "temp":
        return get_temp_directory()
    if type_name == "input":
        return get_input_directory()
    return None


def annotated_filepath(name: str) -> tuple[str, str | None]:
    if name.endswith("[output]"):
        base_dir = get_output_directory()
        name = name[:-9]
    elif name.endswith("[input]"):
        base_dir = get_input_directory()
        name = name[:-8]
    elif name.endswith("[temp]"):
        base_dir = get_temp_directory()
        name = name[:-7]
    else:
        return name, None
    return name, base_dir


def get_annotated_filepath(name: str, default_dir: str | None = None) -> str:
    name, base_dir = annotated_filepath(name)
    if base_dir is None:
        base_dir = default_dir if default_dir is not None else get_input_directory()
    return os.path.join(base_dir, name)


def exists_annotated_filepath(name) -> bool:
    name, base_dir = annotated_filepath(name)
    if base_dir is None:
        base_dir = get_input_directory()
    return os.path.exists(os.path.join(base_dir, name))


def add_model_folder_path(folder_name: str, full_folder_path: str, is_default: bool = False) -> None:
    folder_name = map_legacy(folder_name)
    if folder_name in folder_names_and_paths:
        paths, _exts = folder_names_and_paths[folder_name]
        if full_folder_path in paths:
            if is_default and paths[0] != full_folder_path:
                paths.remove(full_folder_path)
                paths.insert(0, full_folder_path)
        elif is_default:
            paths.insert(0, full_folder_path)
        else:
            paths.append(full_folder_path)
    else:
        folder_names_and_paths[folder_name] = ([full_folder_path], set())


def get_folder_paths(folder_name: str) -> list[str]:
    folder_name = map_legacy(folder_name)
    return folder_names_and_paths[folder_name][0][:]


def recursive_search(directory: str, excluded_dir_names: list[str] | None = None) -> tuple[list[str], dict[str, float]]:
    if not os.path.isdir(directory):
        return [], {}
    if excluded_dir_names is None:
        excluded_dir_names = []
    result: list[str] = []
    dirs: dict[str, float] = {}
    try:
        dirs[directory] = os.path.getmtime(directory)
    except FileNotFoundError:
        logging.warning("Warning: Unable to access %s. Skipping this path.", directory)
    for dirpath, subdirs, filenames in os.walk(directory, followlinks=True, topdown=True):
        subdirs[:] = [d for d in subdirs if d not in excluded_dir_names]
        for file_name in filenames:
            try:
                relative_path = os.path.relpath(os.path.join(dirpath, file_name), directory)
                result.append(relative_path.replace(os.sep, "/"))
            except Exception:
                logging.warning("Warning: Unable to access %s. Skipping this file.", file_name)
                continue
        for d in subdirs:
            path = os.path.join(dirpath, d)
            try:
                dirs[path] = os.path.getmtime(path)
            except FileNotFoundError:
                continue
    return result, dirs


def filter_files_extensions(files: Collection[str], extensions: Collection[str]) -> list[str]:
    return sorted(list(filter(lambda a: os.path.splitext(a)[-1].lower() in extensions or len(extensions) == 0, files)))


def get_full_path(folder_name: str, filename: str) -> str | None:
    folder_name = map_legacy(folder_name)
    if folder_name not in folder_names_and_paths:
        return None
    folders = folder_names_and_paths[folder_name]
    filename = os.path.relpath(os.path.join("/", filename), "/")
    for x in folders[0]:
        full_path = os.path.join(x, filename)
        if os.path.isfile(full_path):
            return full_path
        elif os.path.islink(full_path):
            logging.warning("WARNING path %s exists but doesn't link anywhere, skipping.", full_path)
    return None


def get_full_path_or_raise(folder_name: str, filename: str) -> str:
    full_path = get_full_path(folder_name, filename)
    if full_path is None:
        raise FileNotFoundError(f"Model in folder '{folder_name}' with filename '{filename}' not found.")
    return full_path


def get_filename_list(folder_name: str) -> list[str]:
    """Recursive, `/` separators, filtered by the folder's extensions, sorted (no cache)."""
    folder_name = map_legacy(folder_name)
    output_list: set[str] = set()
    folders = folder_names_and_paths[folder_name]
    for x in folders[0]:
        files, _ = recursive_search(x, excluded_dir_names=[".git"])
        output_list.update(filter_files_extensions(files, folders[1]))
    return sorted(list(output_list))


def filter_files_content_types(files: list[str], content_types: list[str]) -> list[str]:
    """content_types: any of "image", "video", "audio", "model"."""
    result = []
    for file in files:
        extension = file.split('.')[-1].lower()
        mime = mimetypes.guess_type(f"a.{extension}", strict=False)[0] if extension else None
        if extension in ("safetensors", "ckpt", "pt", "pth", "glb", "gltf", "obj", "fbx", "stl"):
            content_type = "model"
        elif mime:
            content_type = mime.split('/')[0]
        else:
            continue
        if content_type in content_types:
            result.append(file)
    return result


def get_save_image_path(filename_prefix: str, output_dir: str, image_width: int = 0, image_height: int = 0):
    """ComfyUI's counter logic: `<prefix>_<NNNNN>_.png`, next number after the highest on disk."""

    def map_filename(filename: str) -> tuple[int, str]:
        prefix_len = len(os.path.basename(filename_prefix))
        prefix = filename[:prefix_len + 1]
        try:
            digits = int(filename[prefix_len + 1:].split('_')[0])
        except Exception:
            digits = 0
        return digits, prefix

    def compute_vars(input: str, image_width: int, image_height: int) -> str:
        input = input.replace("%width%", str(image_width))
        input = input.replace("%height%", str(image_height))
        now = time.localtime()
        input = input.replace("%year%", str(now.tm_year))
        input = input.replace("%month%", str(now.tm_mon).zfill(2))
        input = input.replace("%day%", str(now.tm_mday).zfill(2))
        input = input.replace("%hour%", str(now.tm_hour).zfill(2))
        input = input.replace("%minute%", str(now.tm_min).zfill(2))
        input = input.replace("%second%", str(now.tm_sec).zfill(2))
        return input

    if "%" in filename_prefix:
        filename_prefix = compute_vars(filename_prefix, image_width, image_height)

    subfolder = os.path.dirname(os.path.normpath(filename_prefix))
    filename = os.path.basename(os.path.normpath(filename_prefix))

    full_output_folder = os.path.join(output_dir, subfolder)

    if os.path.commonpath((output_dir, os.path.abspath(full_output_folder))) != output_dir:
        err = "**** ERROR: Saving image outside the output folder is not allowed." + \
              "\n full_output_folder: " + os.path.abspath(full_output_folder) + \
              "\n         output_dir: " + output_dir + \
              "\n         commonpath: " + os.path.commonpath((output_dir, os.path.abspath(full_output_folder)))
        logging.error(err)
        raise Exception(err)

    try:
        counter = max(filter(lambda a: os.path.normcase(a[1][:-1]) == os.path.normcase(filename) and a[1][-1] == "_",
                             map(map_filename, os.listdir(full_output_folder))))[0] + 1
    except ValueError:
        counter = 1
    except FileNotFoundError:
        os.makedirs(full_output_folder, exist_ok=True)
        counter = 1
    return full_output_folder, filename, counter, subfolder, filename_prefix


def get_input_subfolders() -> list[str]:
    input_dir = get_input_directory()
    folders = []
    try:
        if not os.path.exists(input_dir):
            return []
        for root, subdirs, _ in os.walk(input_dir):
            rel_path = os.path.relpath(root, input_dir)
            if rel_path != ".":
                folders.append(rel_path.replace(os.sep, '/'))
        return sorted(folders)
    except FileNotFoundError:
        return []


class _CacheHelper:
    """`with folder_paths.cache_helper:` is used by some code paths; the stand-in never caches."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


cache_helper = _CacheHelper()
