"""Run-time guard: a running prompt touches nothing in another owner's folder, whatever name it computes.

The sidecar judges every literal name a prompt gives a node before the host sees the prompt
(``behaviours/prompt-files.ts``). Two things cannot be judged then: a name computed while the
prompt runs (a text node's output linked into another package's node that opens paths), and a
file that appears after the prompt was queued. They are judged here, when the file is touched.

- The gate stamps each prompt's ``extra_data`` with ``authsvc_folder``: its owner's folder name
  (``u_<user id>``, ``o_<16 hex>``) for callers who do not see everything, ``null`` for those who
  do. An ``on_prompt`` handler (ComfyUI's public hook for custom nodes) records it per
  ``prompt_id`` as the host accepts the prompt. A missing stamp records ``""``: no folder is its.
- The functions by which Python code touches a path (``open``, ``os.open``, listing, scanning,
  removing, renaming, linking, making folders, ``chmod``, ``utime``, ``truncate``; ``shutil``,
  ``pathlib``, ``glob`` and ``os.walk`` call these) are replaced by guarded ones, with the first
  prompt that has a folder (a server whose only prompts are administrators' is left as it was).
  On the host's prompt worker thread (``Thread-N (prompt_worker)``, where nodes run), for the
  prompt the worker announced last (``PromptServer.last_prompt_id``), a path whose real path
  (symlinks followed) lies inside a per-user folder at the top of ``input/``, ``output/`` or
  ``temp/`` that is not the prompt's own is refused with ``PermissionError`` before the call:
  the node fails, the prompt ends with the host's ``execution_error``, and nothing was read or
  written. On any other thread a guarded function costs one thread-id comparison. A prompt this
  module has no record of is treated as having no folder.

Not an audit hook (``sys.addaudithook``), which sees every way of opening a file: once one is
installed, CPython calls it for every audit event of the process, ``id()`` included, and the
real ComfyUI's ``/object_info`` took 13-16 % longer with the lightest hook that could do this
work (measured in docs/decisions.md).

No policy beyond the folder names: the shared area (files from before per-user folders, shared
inputs) is judged by the sidecar on literal names only. Not covered: threads a node starts
itself, paths relative to a directory descriptor, functions a module bound to a name of its own
before the guard was installed (``from os import listdir``), and files opened by native code.
"""
from __future__ import annotations

import builtins
import functools
import io
import logging
import os
import re
import threading
from collections import OrderedDict
from typing import Any, Callable

log = logging.getLogger("authsvc")

FOLDER = re.compile(r"^(u_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|o_[0-9a-f]{16})$", re.IGNORECASE)
WORKER_SUFFIX = "(prompt_worker)"
KEPT = 100_000  # prompts remembered; the oldest are forgotten first

# the functions that touch a path: (module, name, (position, keyword) of each path argument)
_PATH = ((0, "path"),)
GUARDED: tuple[tuple[Any, str, tuple[tuple[int, str], ...]], ...] = (
    (builtins, "open", ((0, "file"),)),
    (io, "open", ((0, "file"),)),
    (os, "open", _PATH),
    (os, "listdir", _PATH),
    (os, "scandir", _PATH),
    (os, "remove", _PATH),
    (os, "unlink", _PATH),
    (os, "rmdir", _PATH),
    (os, "mkdir", _PATH),
    (os, "rename", ((0, "src"), (1, "dst"))),
    (os, "replace", ((0, "src"), (1, "dst"))),
    (os, "link", ((0, "src"), (1, "dst"))),
    (os, "symlink", ((0, "src"), (1, "dst"))),
    (os, "truncate", _PATH),
    (os, "chmod", _PATH),
    (os, "utime", _PATH),
)

_UNKNOWN = ""  # a prompt without a record: no per-user folder is its


class RunGuard:
    def __init__(self, prompt_server: Any, roots: Any) -> None:
        """`roots()` gives the host's input, output and temp folders (its folder_paths getters)."""
        self._server = prompt_server
        self._roots = roots
        self._folders: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()
        self._worker: int | None = None
        self._busy = threading.local()
        self._real_roots: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self._guarding = False

    # ------------------------------------------------------------------ records
    def on_prompt(self, json_data: Any) -> Any:
        """ComfyUI's on_prompt handler: note the prompt's folder; the body goes on unchanged."""
        try:
            if isinstance(json_data, dict) and "prompt_id" in json_data:
                extra = json_data.get("extra_data")
                folder = extra.get("authsvc_folder", _UNKNOWN) if isinstance(extra, dict) else _UNKNOWN
                if folder is not None and not isinstance(folder, str):
                    folder = _UNKNOWN
                if folder is not None:
                    self._guard_once()
                with self._lock:
                    key = str(json_data["prompt_id"])
                    self._folders[key] = folder
                    self._folders.move_to_end(key)
                    while len(self._folders) > KEPT:
                        self._folders.popitem(last=False)
        except Exception:  # a handler that raises makes the host refuse every prompt
            log.exception("authsvc: run guard could not record a prompt")
        return json_data

    def folder_of(self, prompt_id: Any) -> str | None:
        with self._lock:
            return self._folders.get(str(prompt_id), _UNKNOWN)

    # ------------------------------------------------------------------ the guard
    def _on_worker(self) -> bool:
        ident = threading.get_ident()
        if self._worker is not None:
            return ident == self._worker
        if threading.current_thread().name.endswith(WORKER_SUFFIX):
            self._worker = ident
            return True
        return False

    def _roots_real(self) -> tuple[str, ...]:
        raw = tuple(self._roots())
        if raw != self._real_roots[0]:
            self._real_roots = (raw, tuple(os.path.realpath(r) for r in raw if isinstance(r, str) and r))
        return self._real_roots[1]

    def refused(self, path: Any, own: str) -> str | None:
        """The per-user folder `path` lands in when it is not `own`, else None."""
        if isinstance(path, int) or path is None:
            return None
        try:
            real = os.path.realpath(os.fsdecode(os.fspath(path)))
        except (TypeError, ValueError, OSError):
            return None  # not a path; the call itself fails
        for root in self._roots_real():
            if real.startswith(root + os.sep):
                first = real[len(root) + 1:].split(os.sep, 1)[0]
                if FOLDER.match(first) and first.lower() != own.lower():
                    return first
        return None

    def check(self, name: str, paths: tuple[tuple[int, str], ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before a guarded call on the worker thread: PermissionError for a path in another's folder."""
        if getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            own = self.folder_of(getattr(self._server, "last_prompt_id", None))
            if own is None:
                return  # a prompt of someone who sees everything
            for position, keyword in paths:
                path = args[position] if position < len(args) else kwargs.get(keyword)
                if self.refused(path, own) is not None:
                    raise PermissionError(f"authsvc: this prompt may not use another user's files ({name})")
        finally:
            self._busy.on = False

    def install(self) -> None:
        """The on_prompt handler now; the guarded functions with the first prompt that has a folder."""
        self._server.add_on_prompt_handler(self.on_prompt)

    def _guard_once(self) -> None:
        if self._guarding:
            return
        self._guarding = True
        for module, name, paths in GUARDED:
            original = getattr(module, name, None)
            if callable(original) and getattr(original, "__authsvc_guarded__", False) is not True:
                setattr(module, name, self._guarded(original, f"{module.__name__}.{name}", paths))

    def _guarded(self, original: Callable[..., Any], name: str, paths: tuple[tuple[int, str], ...]) -> Callable[..., Any]:
        on_worker, check = self._on_worker, self.check

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if on_worker():
                check(name, paths, args, kwargs)
            return original(*args, **kwargs)

        guarded.__authsvc_guarded__ = True  # type: ignore[attr-defined]
        return guarded


def install(prompt_server: Any) -> RunGuard | None:
    """The guard, installed; None (with a warning) on a host without ComfyUI's on_prompt handlers or
    folder_paths, where the sidecar's checks of literal names are all there is."""
    try:
        import folder_paths  # ComfyUI's module
    except ImportError:
        folder_paths = None
    if folder_paths is None or not callable(getattr(prompt_server, "add_on_prompt_handler", None)):
        log.warning("authsvc: this host has no folder_paths or on_prompt handlers; names computed while a prompt runs are not judged")
        return None
    guard = RunGuard(prompt_server, lambda: (folder_paths.get_input_directory(), folder_paths.get_output_directory(), folder_paths.get_temp_directory()))
    guard.install()
    return guard
