"""ComfyUI's `comfy.cli_args.args`, as far as the server looks at it (main.py fills it).

One object, as in ComfyUI: a custom node that changes `args.multi_user` at import time
changes what the server's user manager does from then on.
"""
from __future__ import annotations

import os
from types import SimpleNamespace

args = SimpleNamespace(
    multi_user=False,
    listen="127.0.0.1",
    port=8188,
    max_upload_size=100,
    front_end_root=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "web"),
)
