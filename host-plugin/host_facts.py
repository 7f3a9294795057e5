"""Host facts the sidecar needs (model folders, directories, version, model inputs), as plain data.

Facts are read twice: at import (the first hello) and again at the app's startup, once every
custom node has been imported (ComfyUI imports them all before it starts the server), so
folders other packages add to ``folder_paths.folder_names_and_paths`` and their loader nodes
are in. The startup facts replace the hello's (every later hello carries them) and are sent
at once as a ``host_facts`` event; they say so (``all_nodes_loaded``), even when reading them
again failed and the first hello's stay.

``model_inputs`` says which node inputs list a model folder's files. It is read from the host's
own ``GET /object_info`` handler while ``folder_paths.get_filename_list`` adds one marker item
per folder to every list it returns: an input whose options hold the marker of folder F lists
F's files, whatever the node is called and even while F is empty. No policy here: the sidecar
decides what the facts mean.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, Callable

log = logging.getLogger("authsvc")

# Ends like a model file so that loaders that filter their list by extension keep it.
_MARKER = "\u0000authsvc-probe/{folder}.safetensors"
_LEGACY_NAMES = ("unet", "clip")  # folder_paths.map_legacy's names in ComfyUI 0.3.x


def collect() -> dict[str, Any]:
    try:
        import folder_paths  # ComfyUI's module; absent outside ComfyUI
    except ImportError:
        return {}
    entries = getattr(folder_paths, "folder_names_and_paths", {})
    facts: dict[str, Any] = {
        "model_folders": {name: list(entry[0]) for name, entry in entries.items()},
        "model_folder_extensions": {name: sorted(str(e) for e in entry[1]) for name, entry in entries.items()},
        # how the host resolves a name inside a folder (os.path.relpath(os.path.join("/", name), "/"))
        "model_paths": {
            "sep": os.sep,
            "case_insensitive": os.path.normcase("A") == "a" or sys.platform == "darwin",
        },
    }
    map_legacy = getattr(folder_paths, "map_legacy", None)
    if callable(map_legacy):
        facts["legacy_folders"] = {name: map_legacy(name) for name in _LEGACY_NAMES if map_legacy(name) != name}
    for key, getter in (
        ("output_dir", "get_output_directory"),
        ("input_dir", "get_input_directory"),
        ("temp_dir", "get_temp_directory"),
        ("user_dir", "get_user_directory"),
    ):
        fn = getattr(folder_paths, getter, None)
        if callable(fn):
            facts[key] = fn()
    try:
        import comfyui_version  # present in ComfyUI >= 0.3

        facts["comfyui_version"] = comfyui_version.__version__
    except ImportError:
        pass
    return facts


def _options(spec: Any) -> list[Any] | None:
    """The option list of one input of /object_info: ``[[...], {...}]`` or ``["COMBO", {"options": [...]}]``."""
    if not isinstance(spec, (list, tuple)) or not spec:
        return None
    if isinstance(spec[0], (list, tuple)):
        return list(spec[0])
    if spec[0] == "COMBO" and len(spec) > 1 and isinstance(spec[1], dict) and isinstance(spec[1].get("options"), list):
        return list(spec[1]["options"])
    return None


def model_inputs_of(object_info: dict[str, Any], real_lists: Callable[[str], list[str]]) -> dict[str, Any]:
    """class -> input -> {folders, extras} from an /object_info taken with the markers in place."""
    out: dict[str, Any] = {}
    for cls, info in object_info.items():
        sections = info.get("input") if isinstance(info, dict) else None
        if not isinstance(sections, dict):
            continue
        for section in sections.values():
            if not isinstance(section, dict):
                continue
            for name, spec in section.items():
                options = _options(spec)
                if not options:
                    continue
                folders = [o[len("\u0000authsvc-probe/"):-len(".safetensors")] for o in options
                           if isinstance(o, str) and o.startswith("\u0000authsvc-probe/")]
                if not folders:
                    continue
                files = {f for folder in folders for f in real_lists(folder)}
                extras = [o for o in options if isinstance(o, str) and not o.startswith("\u0000") and o not in files]
                out.setdefault(cls, {})[name] = {"folders": folders, "extras": extras}
    return out


def writer_inputs_of(object_info: dict[str, Any]) -> dict[str, list[str]]:
    """class -> its text inputs that name where an output node writes: ``filename_prefix``, and any other
    STRING input of an output node whose name ends in ``prefix`` (SaveLoRANode's ``prefix``)."""
    out: dict[str, list[str]] = {}
    for cls, info in object_info.items():
        if not isinstance(info, dict) or info.get("output_node") is not True:
            continue
        sections = info.get("input")
        for section in (sections.values() if isinstance(sections, dict) else ()):
            for name, spec in (section.items() if isinstance(section, dict) else ()):
                if isinstance(spec, (list, tuple)) and spec and spec[0] == "STRING" and name.endswith("prefix"):
                    out.setdefault(cls, []).append(name)
    return out


async def probe_model_inputs(prompt_server: Any) -> dict[str, Any]:
    """Runs the host's /object_info handler with one marker per folder in every file list."""
    import folder_paths

    handler = next((r.handler for r in prompt_server.routes
                    if getattr(r, "method", None) == "GET" and getattr(r, "path", None) == "/object_info"), None)
    if handler is None:
        log.warning("authsvc: this host has no GET /object_info handler; model inputs are found from /object_info answers only")
        return {}
    real = folder_paths.get_filename_list
    map_legacy = getattr(folder_paths, "map_legacy", lambda name: name)

    def marked(folder_name: str) -> list[str]:
        return [*real(folder_name), _MARKER.format(folder=map_legacy(folder_name))]

    # Nothing else runs meanwhile: this is the event loop's thread before the site listens,
    # and the prompt worker has nothing queued yet.
    folder_paths.get_filename_list = marked
    try:
        response = await handler(None)
    finally:
        folder_paths.get_filename_list = real
    object_info = json.loads(response.text)
    _last_writer_inputs.clear()
    _last_writer_inputs.update(writer_inputs_of(object_info))
    return model_inputs_of(object_info, real)


# the writer inputs read with the last probe (the same /object_info answer)
_last_writer_inputs: dict[str, list[str]] = {}


def install(app: Any, prompt_server: Any, hello: dict[str, Any], send_event: Callable[[dict[str, Any]], None]) -> None:
    """At the app's startup: facts again (every custom node loaded), into later hellos and as an event."""
    import time

    async def refresh(_app: Any) -> None:
        try:
            facts = collect()
        except Exception:  # facts must never stop the host from starting
            log.exception("authsvc: reading the host facts again failed; the first hello's facts stay")
            facts = dict(hello.get("host") or {})
            # every node did load (downloads go on), but these facts may lack what they added: the
            # grants of downloads are not judged on them (sidecar models/host-grant-files.ts)
            facts["facts_incomplete"] = True
        else:
            try:
                facts["model_inputs"] = await probe_model_inputs(prompt_server)
                facts["writer_inputs"] = dict(_last_writer_inputs)
            except Exception:
                # the sidecar then finds model lists from the folders' files alone (see the module doc)
                log.exception("authsvc: reading the host's model inputs failed")
        # what the sidecar's download queue waits for before any job runs (the import-time facts
        # lack the folders and paths later custom nodes add)
        facts["all_nodes_loaded"] = True
        hello["host"] = facts
        send_event({"name": "host_facts", "t": time.time(), "data": facts})

    app.on_startup.append(refresh)
