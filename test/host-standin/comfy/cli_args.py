"""The stand-in's `comfy.cli_args`: the one `args` object the server and custom nodes share.

main.py fills it from its own command line. It is a single shared object on purpose: a
custom node that flips `args.multi_user` while it is imported changes how the user routes
treat requests from then on, as it would inside ComfyUI.
"""
from __future__ import annotations

import os
import types

# Default web root: the small index.html + assets shipped next to the stand-in.
_STANDIN_WEB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "web")

args = types.SimpleNamespace(
    multi_user=False,          # --multi-user: trust the comfy-user header (for known users)
    listen="127.0.0.1",
    port=8188,
    max_upload_size=100,       # MiB; the app's client_max_size and /features report this
    front_end_root=_STANDIN_WEB,
)
