"""Host facts the sidecar needs (model folders, directories, version), as plain data.

Read once at hello; the sidecar asks for a refresh by reconnecting.
"""
from __future__ import annotations

from typing import Any


def collect() -> dict[str, Any]:
    try:
        import folder_paths  # ComfyUI's module; absent outside ComfyUI
    except ImportError:
        return {}
    facts: dict[str, Any] = {
        "model_folders": {
            name: list(entry[0]) for name, entry in getattr(folder_paths, "folder_names_and_paths", {}).items()
        },
    }
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
