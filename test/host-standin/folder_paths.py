"""The stand-in's `folder_paths`: where models, inputs, outputs, temp files and user data live.

Custom nodes import this module by the name ComfyUI gives it, so its public names are the ones
they use (see the stand-in contract). What it guarantees:

* `set_base_path(root)` roots every folder at `root` (`root/models/<folder>`, `root/input`,
  `root/output`, `root/temp`, `root/user`, `root/custom_nodes`); main.py calls it first.
* `folder_names_and_paths` maps each model folder name to `(directories, extensions)`, in the
  order `GET /models` lists them. The legacy names `unet` and `clip` are aliases of
  `diffusion_models` and `text_encoders`, which also search `models/unet` and `models/clip`.
  Unlike ComfyUI, no folder also searches `output/<name>` (the tests pin two directories).
* File lists are read from the disk on every call: sorted, recursive, relative with `/`.
* `get_save_image_path` numbers files the way SaveImage does: `<prefix>_<NNNNN>_.png`, next
  number = the highest one already in the folder + 1.
"""
from __future__ import annotations

import mimetypes
import os
import time
from typing import Callable, Iterable

supported_pt_extensions: set[str] = {".ckpt", ".pt", ".pt2", ".bin", ".pth", ".safetensors", ".pkl", ".sft"}

# Model folder table: name -> (subfolders of models/ in search order, allowed extensions).
# None as the extension set means "the checkpoint-like extensions" above.
_MODEL_FOLDERS: list[tuple[str, tuple[str, ...], set[str] | None]] = [
    ("checkpoints", ("checkpoints",), None),
    ("configs", ("configs",), {".yaml"}),
    ("loras", ("loras",), None),
    ("vae", ("vae",), None),
    ("text_encoders", ("text_encoders", "clip"), None),
    ("diffusion_models", ("unet", "diffusion_models"), None),
    ("clip_vision", ("clip_vision",), None),
    ("style_models", ("style_models",), None),
    ("embeddings", ("embeddings",), None),
    ("diffusers", ("diffusers",), {"folder"}),
    ("vae_approx", ("vae_approx",), None),
    ("controlnet", ("controlnet", "t2i_adapter"), None),
    ("gligen", ("gligen",), None),
    ("upscale_models", ("upscale_models",), None),
    ("custom_nodes", (), set()),  # lives beside models/, filled in by set_base_path
    ("hypernetworks", ("hypernetworks",), None),
    ("photomaker", ("photomaker",), None),
    ("classifiers", ("classifiers",), {""}),
    ("model_patches", ("model_patches",), None),
    ("audio_encoders", ("audio_encoders",), None),
]

_LEGACY = {"unet": "diffusion_models", "clip": "text_encoders"}

FolderEntry = tuple[list[str], set[str]]  # (directories searched in order, allowed extensions)

base_path: str = os.path.dirname(os.path.realpath(__file__))
models_dir: str = ""
folder_names_and_paths: dict[str, FolderEntry] = {}
_roots: dict[str, str] = {}  # "input", "output", "temp", "user" -> directory


def set_base_path(path: str) -> None:
    """Roots every folder at `path`; forgets folders custom nodes added before."""
    global base_path, models_dir
    root = os.path.abspath(path)
    base_path, models_dir = root, os.path.join(root, "models")
    _roots.update({kind: os.path.join(root, kind) for kind in ("input", "output", "temp", "user")})
    folder_names_and_paths.clear()
    for name, subdirs, exts in _MODEL_FOLDERS:
        dirs = [os.path.join(models_dir, d) for d in subdirs]
        if name == "custom_nodes":
            dirs = [os.path.join(root, "custom_nodes")]
        folder_names_and_paths[name] = (dirs, set(supported_pt_extensions) if exts is None else set(exts))


set_base_path(base_path)


def map_legacy(name: str) -> str:
    return _LEGACY.get(name, name)


def get_folder_paths(name: str) -> list[str]:
    return list(folder_names_and_paths[map_legacy(name)][0])


def add_model_folder_path(name: str, path: str, is_default: bool = False) -> None:
    """Adds a search directory; a default one goes first (moved there if already listed)."""
    name = map_legacy(name)
    entry = folder_names_and_paths.get(name)
    if entry is None:
        folder_names_and_paths[name] = ([path], set())
        return
    dirs = entry[0]
    if path in dirs:
        if is_default:
            dirs.remove(path)
            dirs.insert(0, path)
    elif is_default:
        dirs.insert(0, path)
    else:
        dirs.append(path)


def filter_files_extensions(files: Iterable[str], extensions: Iterable[str]) -> list[str]:
    """Files whose extension (any case) is in `extensions`; an empty set keeps every file."""
    wanted = {e.lower() for e in extensions}
    return sorted(f for f in files if not wanted or os.path.splitext(f)[1].lower() in wanted)


def filter_files_content_types(files: Iterable[str], content_types: Iterable[str]) -> list[str]:
    """Files whose guessed MIME major type (`image`, `video`, ...) is one of `content_types`."""
    kinds = set(content_types)
    kept = []
    for f in files:
        mime = mimetypes.guess_type(f, strict=False)[0]
        if mime is not None and mime.split("/", 1)[0] in kinds:
            kept.append(f)
    return kept


def _walk_files(root: str) -> list[str]:
    """Every file under `root`, relative, `/`-separated; symlinked folders are followed."""
    found = []
    for here, _dirs, names in os.walk(root, followlinks=True):
        rel = os.path.relpath(here, root)
        for n in names:
            found.append(n if rel == "." else os.path.join(rel, n).replace(os.sep, "/"))
    return found


def get_filename_list(name: str) -> list[str]:
    dirs, exts = folder_names_and_paths[map_legacy(name)]
    seen: set[str] = set()
    for d in dirs:
        if os.path.isdir(d):
            seen.update(_walk_files(d))
    return filter_files_extensions(seen, exts)


def get_full_path(name: str, filename: str) -> str | None:
    entry = folder_names_and_paths.get(map_legacy(name))
    if entry is None:
        return None
    # a name can never climb out of its folder: it is resolved as if rooted at "/"
    rel = os.path.relpath(os.path.join("/", filename), "/")
    for d in entry[0]:
        candidate = os.path.join(d, rel)
        if os.path.isfile(candidate):
            return candidate
    return None


def get_full_path_or_raise(name: str, filename: str) -> str:
    found = get_full_path(name, filename)
    if found is None:
        raise FileNotFoundError(f"Model in folder '{name}' with filename '{filename}' not found.")
    return found


def _root_getter(kind: str) -> Callable[[], str]:
    def getter() -> str:
        return _roots[kind]

    getter.__name__ = getter.__qualname__ = f"get_{kind}_directory"
    return getter


get_input_directory = _root_getter("input")
get_output_directory = _root_getter("output")
get_temp_directory = _root_getter("temp")
get_user_directory = _root_getter("user")


def get_directory_by_type(kind: str) -> str | None:
    """The folder of `output`, `input` or `temp`; None for anything else (`user` included)."""
    return _roots.get(kind) if kind in ("output", "input", "temp") else None


def annotated_filepath(text: str) -> tuple[str, str | None]:
    """`"x.png [input]"` -> `("x.png", <input dir>)`; a plain name -> `(name, None)`.

    Like the real host, the tag is cut together with the one character before it, which is
    meant to be the space: `"x.png[input]"` names `"x.pn"` in input/.
    """
    for kind in ("output", "input", "temp"):
        tag = f"[{kind}]"
        if text.endswith(tag):
            return text[: -len(tag) - 1], get_directory_by_type(kind)
    return text, None


def get_annotated_filepath(name: str, default_dir: str | None = None) -> str:
    plain, folder = annotated_filepath(name)
    return os.path.join(folder or default_dir or _roots["input"], plain)


def exists_annotated_filepath(name: str) -> bool:
    return os.path.exists(get_annotated_filepath(name))


def _expand_prefix(prefix: str, width: int, height: int) -> str:
    """SaveImage's server-side placeholders; anything else (`%date:...%`) stays as written."""
    now = time.localtime()
    values = {"width": width, "height": height, "year": now.tm_year, "month": f"{now.tm_mon:02d}",
              "day": f"{now.tm_mday:02d}", "hour": f"{now.tm_hour:02d}", "minute": f"{now.tm_min:02d}",
              "second": f"{now.tm_sec:02d}"}
    for key, value in values.items():
        prefix = prefix.replace(f"%{key}%", str(value))
    return prefix


def _number_after(entry: str, stem: str) -> int:
    """The counter of `<stem>_<n>_...`: the text between `<stem>_` and the next `_`, if an int."""
    head = stem + "_"
    if not entry.startswith(head):
        return 0
    try:
        return int(entry[len(head):].split("_", 1)[0])
    except ValueError:
        return 0


def get_save_image_path(filename_prefix: str, output_dir: str, image_width: int = 0,
                        image_height: int = 0) -> tuple[str, str, int, str, str]:
    """(folder, file stem, next counter, subfolder, expanded prefix) for `<stem>_<NNNNN>_.png`.

    The counter is one more than the highest number any entry of the folder carries (any
    extension); a prefix that leaves `output_dir` raises.
    """
    filename_prefix = _expand_prefix(filename_prefix, image_width, image_height)
    subfolder, stem = os.path.split(os.path.normpath(filename_prefix))
    folder = os.path.join(output_dir, subfolder)
    if not _is_within(output_dir, folder):
        raise Exception(f"SaveImage: the prefix {filename_prefix!r} points outside {output_dir} ({folder}); refusing to save there.")
    highest = 0
    if os.path.isdir(folder):
        highest = max((_number_after(e, stem) for e in os.listdir(folder)), default=0)
    return folder, stem, max(highest, 0) + 1, subfolder, filename_prefix


def _is_within(root: str, path: str) -> bool:
    root = os.path.abspath(root)
    return os.path.commonpath((root, os.path.abspath(path))) == root
