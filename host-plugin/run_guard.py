"""Run-time guard: a running prompt touches nothing in another owner's folder, whatever name it computes.

The sidecar judges every literal name a prompt gives a node before the host sees the prompt
(``isolation/behaviours/prompt-files.ts``). Two things cannot be judged then: a name computed while the
prompt runs (a text node's output linked into another package's node that opens paths), and a
file that appears after the prompt was queued. They are judged here, when the file is touched.

- The gate stamps each prompt's ``extra_data`` with ``authsvc_folder``: its owner's folder name
  (``u_<user id>``, ``o_<16 hex>``) for callers who do not see everything, ``null`` for those who
  do. It is recorded per ``prompt_id`` when the host queues the prompt (its queue's ``put``,
  wrapped on the instance: a prompt the host refuses leaves no record), and forgotten once the
  worker has moved on to another prompt. A missing stamp records ``""``: no folder is its.
- The functions by which Python code touches a path (``open``, ``os.open``, ``stat``/``lstat``/
  ``access`` (so ``os.path.exists`` and kin say "missing"), ``chdir``, listing, scanning, removing,
  renaming, linking, making folders and FIFOs, ``chmod``, ``chown``, ``utime``, ``truncate``,
  extended attributes; ``shutil``, ``pathlib``, ``glob`` and ``os.walk`` call these) are replaced
  by guarded ones, with the first prompt that has a folder (a server whose only prompts are
  administrators' is left as it was). On the host's prompt worker thread (where nodes run: the
  thread that takes prompts off the queue with its ``get``, wrapped like ``put``), for the prompt
  the worker announced last (``PromptServer.last_prompt_id``), a path whose real path (symlinks
  followed; for calls that act on a link itself, its folder's real path and its name), or whose
  spelling passes through such a folder on the way (``u_<id>/x/../../a.png``, which the kernel
  walks), inside ``input/``, ``output/`` or ``temp/`` and not the prompt's own, is refused with
  ``PermissionError`` before the call: the node fails, the prompt ends with the host's
  ``execution_error``, and nothing was read or written. On any other thread a guarded function costs one thread-id comparison. A prompt this
  module has no record of is treated as having no folder.

Not an audit hook (``sys.addaudithook``), which sees every way of opening a file: once one is
installed, CPython calls it for every audit event of the process, ``id()`` included, and the
real ComfyUI's ``/object_info`` took 13-16 % longer with the lightest hook that could do this
work (measured in docs/decisions.md).

No policy beyond the folder names: the shared area (files from before per-user folders, shared
inputs) is judged by the sidecar on literal names only. Not covered: threads a node starts
itself or subprocesses it runs, paths relative to a directory descriptor, functions a module
bound to a name of its own before the guard was installed (``from os import listdir``), and
files opened by native code (OpenCV, ffmpeg, safetensors, a video pack's loaders): for those the
sidecar's judgement of literal names is all there is. A path of 4096 bytes or more is left to the
kernel, which refuses it.
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

from . import host_paths
from typing import Any, Callable

log = logging.getLogger("authsvc")

FOLDER = re.compile(r"^(u_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|o_[0-9a-f]{16})$", re.IGNORECASE)
KEPT = 1_000_000  # queued prompts remembered at most; the oldest are forgotten first

# the functions that touch a path: (module, name, (position, keyword, how) of each path argument);
# how: "follow" (the real path), "link" (the call acts on the last component itself), "target" (a
# symlink's target, read from the link's own folder)
_PATH = ((0, "path", "follow"),)
_LINK = ((0, "path", "link"),)
GUARDED: tuple[tuple[Any, str, tuple[tuple[int, str, str], ...]], ...] = (
    (builtins, "open", ((0, "file", "follow"),)),
    (io, "open", ((0, "file", "follow"),)),
    (os, "open", _PATH),
    (os, "stat", _PATH),
    (os, "lstat", _LINK),
    (os, "access", _PATH),
    (os, "chdir", _PATH),
    (os, "listdir", _PATH),
    (os, "scandir", _PATH),
    (os, "remove", _LINK),
    (os, "unlink", _LINK),
    (os, "rmdir", _LINK),
    (os, "mkdir", _LINK),
    (os, "mkfifo", _LINK),
    (os, "mknod", _LINK),
    (os, "rename", ((0, "src", "link"), (1, "dst", "link"))),
    (os, "replace", ((0, "src", "link"), (1, "dst", "link"))),
    (os, "link", ((0, "src", "follow"), (1, "dst", "link"))),
    (os, "symlink", ((0, "src", "target"), (1, "dst", "link"))),
    (os, "truncate", _PATH),
    (os, "chmod", _PATH),
    (os, "chown", _PATH),
    (os, "lchown", _LINK),
    (os, "utime", _PATH),
    (os, "setxattr", _PATH),
    (os, "removexattr", _PATH),
    (os, "getxattr", _PATH),
    (os, "listxattr", _PATH),
)
_UNKNOWN = ""  # a prompt without a record: no per-user folder is its


def _first_under(real: str, root: str) -> str | None:
    """The first component of `real` below `root` (compared without case), or None."""
    if len(real) > len(root) and real[len(root)] == os.sep and real[: len(root)].lower() == root.lower():
        return real[len(root) + 1:].split(os.sep, 1)[0]
    return None


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
        self._running: str | None = None

    # ------------------------------------------------------------------ records
    def record(self, prompt_id: Any, extra_data: Any) -> None:
        """A prompt the host queues: note its folder."""
        folder = extra_data.get("authsvc_folder", _UNKNOWN) if isinstance(extra_data, dict) else _UNKNOWN
        if folder is not None and not isinstance(folder, str):
            folder = _UNKNOWN
        if folder is not None:
            self._guard_once()
        with self._lock:
            key = str(prompt_id)
            self._folders[key] = folder
            self._folders.move_to_end(key)
            while len(self._folders) > KEPT:
                self._folders.popitem(last=False)

    def _wrap_queue(self, queue: Any) -> None:
        """Records from the queue's ``put``; the worker is the thread that calls its ``get``."""
        put, get = queue.put, queue.get

        @functools.wraps(put)
        def recording_put(item: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                self.record(item[1], item[3])
            except Exception:  # never stop the host from queueing; an unrecorded prompt has no folder
                log.exception("authsvc: run guard could not record a prompt")
            return put(item, *args, **kwargs)

        @functools.wraps(get)
        def worker_get(*args: Any, **kwargs: Any) -> Any:
            self._worker = threading.get_ident()
            return get(*args, **kwargs)

        queue.put = recording_put
        queue.get = worker_get

    def folder_of(self, prompt_id: Any) -> str | None:
        """The running prompt's folder; the records of prompts run before it are dropped."""
        key = str(prompt_id)
        with self._lock:
            if key != self._running:
                if self._running is not None:
                    self._folders.pop(self._running, None)
                self._running = key
            return self._folders.get(key, _UNKNOWN)

    # ------------------------------------------------------------------ the guard
    def _on_worker(self) -> bool:
        return threading.get_ident() == self._worker

    def _roots_real(self) -> tuple[str, ...]:
        raw = tuple(self._roots())
        if raw != self._real_roots[0]:
            given = [r for r in raw if isinstance(r, str) and r]
            # real paths, and the folders as configured (a lexical walk meets those when one is a link)
            self._real_roots = (raw, tuple(dict.fromkeys([*(os.path.realpath(r) for r in given), *(os.path.abspath(r) for r in given)])))
        return self._real_roots[1]

    def refused(self, path: Any, own: str, how: str = "follow", link: Any = None) -> str | None:
        """The per-user folder `path` lands in or passes through when it is not `own`, else None."""
        if isinstance(path, int):
            return None  # a descriptor: judged when it was opened
        try:
            text = "." if path is None else os.fsdecode(os.fspath(path))
            if len(os.fsencode(text)) >= host_paths.MAX_PATH:
                return None  # the kernel refuses it as given
            if how == "target" and link is not None and not os.path.isabs(text):
                text = os.path.join(os.path.dirname(os.fsdecode(os.fspath(link))), text)
            if how == "link":
                head, tail = os.path.split(os.path.abspath(text))
                real = os.path.join(os.path.realpath(head), tail)
            else:
                real = os.path.realpath(text)
        except (TypeError, ValueError, OSError):
            return None  # not a path; the call itself fails
        lexical = text if os.path.isabs(text) else os.path.join(os.getcwd(), text)  # `..` kept: the kernel walks it
        own_l = own.lower()
        for root in self._roots_real():
            for folder in (_first_under(real, root), *host_paths.entered(lexical, root)):
                if folder is not None and FOLDER.match(folder) and folder.lower() != own_l:
                    return folder
        return None

    def check(self, name: str, paths: tuple[tuple[int, str, str], ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before a guarded call on the worker thread: PermissionError for a path in another's folder."""
        if getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            own = self.folder_of(getattr(self._server, "last_prompt_id", None))
            if own is None:
                return  # a prompt of someone who sees everything
            given = [args[position] if position < len(args) else kwargs.get(keyword) for position, keyword, _ in paths]
            for (_, _, how), path in zip(paths, given):
                if path is None and how != "follow":
                    continue
                if self.refused(path, own, how, given[-1]) is not None:
                    raise PermissionError(f"authsvc: this prompt may not use another user's files ({name})")
        finally:
            self._busy.on = False

    def install(self) -> None:
        """Records and the worker from the host's queue now; the guarded functions with the first prompt that has a folder."""
        self._wrap_queue(self._server.prompt_queue)

    def _guard_once(self) -> None:
        if self._guarding:
            return
        self._guarding = True
        for module, name, paths in GUARDED:
            original = getattr(module, name, None)
            if callable(original) and getattr(original, "__authsvc_guarded__", False) is not True:
                setattr(module, name, self._guarded(original, f"{module.__name__}.{name}", paths))

    def _guarded(self, original: Callable[..., Any], name: str, paths: tuple[tuple[int, str, str], ...]) -> Callable[..., Any]:
        on_worker, check = self._on_worker, self.check

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if on_worker():
                check(name, paths, args, kwargs)
            return original(*args, **kwargs)

        guarded.__authsvc_guarded__ = True  # type: ignore[attr-defined]
        return guarded


def install(prompt_server: Any) -> RunGuard | None:
    """The guard, installed; None (with a warning) on a host without ComfyUI's prompt queue or
    folder_paths, where the sidecar's checks of literal names are all there is."""
    try:
        import folder_paths  # ComfyUI's module
    except ImportError:
        folder_paths = None
    queue = getattr(prompt_server, "prompt_queue", None)
    if folder_paths is None or not callable(getattr(queue, "put", None)) or not callable(getattr(queue, "get", None)):
        log.warning("authsvc: this host has no folder_paths or prompt queue; names computed while a prompt runs are not judged")
        return None
    guard = RunGuard(prompt_server, lambda: (folder_paths.get_input_directory(), folder_paths.get_output_directory(), folder_paths.get_temp_directory()))
    guard.install()
    return guard
