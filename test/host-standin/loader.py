"""Custom-node loading for the stand-in, matching what a package sees inside ComfyUI.

Guarantees:
* every `custom_nodes/<pkg>/prestartup_script.py` runs before the PromptServer exists;
* each package (a folder with `__init__.py`, or a single `.py` file) is imported by file
  path under a `sys.modules` key derived from that path (`.` -> `_x_`), so relative imports
  work and `import <pkg>` does not;
* a package that raises is logged with its traceback and `IMPORT FAILED: <path>`; the
  others still load and the server still starts;
* `NODE_CLASS_MAPPINGS` / `NODE_DISPLAY_NAME_MAPPINGS` are merged into `nodes`, the
  classes are tagged with `RELATIVE_PYTHON_MODULE = "custom_nodes.<pkg>"` (what
  `/object_info` reports as `python_module`), and `WEB_DIRECTORY` is recorded for
  `/extensions/<pkg>/`.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
import traceback
from types import ModuleType

import folder_paths

log = logging.getLogger("standin.loader")

# (seconds, package path, success) per package, in load order: the control API's /imports.
IMPORT_RESULTS: list[tuple[float, str, bool]] = []
# package folder name -> absolute web directory, served at /extensions/<pkg>/
EXTENSION_WEB_DIRS: dict[str, str] = {}
# sys.modules key -> folder of every package that loaded
LOADED_MODULE_DIRS: dict[str, str] = {}


def _package_entries() -> list[str]:
    """Absolute paths of the loadable entries of every custom_nodes folder, sorted by name."""
    found: list[str] = []
    for root in folder_paths.get_folder_paths("custom_nodes"):
        if not os.path.isdir(root):
            continue
        for name in sorted(os.listdir(root)):
            full = os.path.join(root, name)
            if name == "__pycache__" or name.endswith(".disabled") or name.startswith("."):
                continue
            if os.path.isdir(full) or name.endswith(".py"):
                found.append(full)
    return found


def _run_file(key: str, file: str, search: list[str] | None) -> ModuleType:
    """Import `file` as module `key`; registered in sys.modules first so relative imports resolve."""
    spec = importlib.util.spec_from_file_location(key, file, submodule_search_locations=search)
    if spec is None or spec.loader is None:
        raise ImportError(f"no loader for {file}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(key, None)
        raise
    return mod


def execute_prestartup_scripts() -> None:
    for entry in _package_entries():
        script = os.path.join(entry, "prestartup_script.py")
        if not os.path.isfile(script):
            continue
        started = time.perf_counter()
        try:
            _run_file(f"standin_prestartup_{abs(hash(script))}", script, None)
            ok = True
        except Exception:
            log.error("prestartup script %s raised:\n%s", script, traceback.format_exc())
            ok = False
        log.info("prestartup %.1f s%s: %s", time.perf_counter() - started, "" if ok else " (FAILED)", entry)


def _merge(pkg: str, module: ModuleType) -> None:
    import nodes

    classes = getattr(module, "NODE_CLASS_MAPPINGS")
    for class_name, cls in classes.items():
        # node_info() reads this to report python_module, as ComfyUI does for custom classes
        try:
            cls.RELATIVE_PYTHON_MODULE = f"custom_nodes.{pkg}"
        except (TypeError, AttributeError):
            pass
        nodes.NODE_CLASS_MAPPINGS[class_name] = cls
    nodes.NODE_DISPLAY_NAME_MAPPINGS.update(getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", None) or {})


def _load_one(path: str) -> bool:
    is_dir = os.path.isdir(path)
    if is_dir:
        init = os.path.join(path, "__init__.py")
        if not os.path.isfile(init):
            return False
        pkg, folder, file, search = os.path.basename(path), path, init, [path]
    else:
        pkg = os.path.splitext(os.path.basename(path))[0]
        folder, file, search = os.path.dirname(path), path, None
    key = (path if is_dir else os.path.splitext(path)[0]).replace(".", "_x_")
    try:
        module = _run_file(key, file, search)
    except Exception:
        log.warning("%s\nCannot import %s module for custom nodes", traceback.format_exc(), path)
        return False

    web = getattr(module, "WEB_DIRECTORY", None)
    if web is not None:
        web_dir = os.path.abspath(os.path.join(folder, web))
        if os.path.isdir(web_dir):
            EXTENSION_WEB_DIRS[pkg] = web_dir

    if getattr(module, "NODE_CLASS_MAPPINGS", None) is None:
        log.warning("Skipped %s: it defines no NODE_CLASS_MAPPINGS", path)
        return False
    _merge(pkg, module)
    LOADED_MODULE_DIRS[key] = os.path.abspath(folder)
    return True


def init_external_custom_nodes() -> None:
    import nodes

    nodes.EXTENSION_WEB_DIRS = EXTENSION_WEB_DIRS  # one shared dict, whoever reads it
    for path in _package_entries():
        started = time.perf_counter()
        ok = _load_one(path)
        IMPORT_RESULTS.append((time.perf_counter() - started, path, ok))
    if IMPORT_RESULTS:
        lines = ["Import times for custom nodes:"]
        for seconds, path, ok in sorted(IMPORT_RESULTS):
            lines.append(f"  {seconds:6.1f} seconds{'' if ok else ', IMPORT FAILED:'} {path}")
        log.info("\n".join(lines))
