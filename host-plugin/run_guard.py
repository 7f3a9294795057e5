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

Models (issue: names computed at run time, docs/decisions.md). The gate also stamps
``extra_data.authsvc_models``: ``null`` for a caller who sees every model, else the models granted
to the owner (by host folder, the granted names). For such a prompt, on the worker thread, a path
that names a model the host lists (a file whose extension its folder takes, every file of a
folder that lists none, a Diffusers folder and what is in it) in any folder of the host's
``folder_paths.folder_names_and_paths`` (``custom_nodes`` aside), by its spelling or by its real
path, must be a granted one, or it is refused the same way: ``os.path.isfile`` says "missing" (so
``get_full_path`` finds nothing and ``load_embed`` skips the embedding) and an open fails. This is
what holds an ``embedding:`` built by string nodes, or a loader fed a computed name, to the grants
the sidecar checked the literal names against. Listing a model folder is not refused. A stamp
that is missing or unreadable grants no model (fail closed).

No policy beyond the folder names and the grants: the shared area (files from before per-user folders, shared
inputs) is judged by the sidecar on literal names only. Not covered: threads a node starts
itself or subprocesses it runs, paths relative to a directory descriptor, functions a module
bound to a name of its own before the guard was installed (``from os import listdir``), and
files opened by native code (OpenCV, ffmpeg, safetensors, a video pack's loaders): for those the
sidecar's judgement of literal names is all there is. A path of 4096 bytes or more is left to the
kernel, which refuses it.
"""
from __future__ import annotations

import _io
import builtins
import functools
import io
import logging
import os
import re
import sys
import threading
from collections import OrderedDict

from . import host_paths
from typing import Any, Callable, Dict, FrozenSet, Optional

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
    (_io, "open", ((0, "file", "follow"),)),
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

# the models of a prompt: by host folder, the granted items (host-path form); None: every model
Models = Optional[Dict[str, FrozenSet[str]]]
_NO_MODEL: dict[str, frozenset[str]] = {}  # a prompt without a record, or a stamp it cannot read: no model
_NO_MODELS = object()  # no authsvc_models key in the stamp
_NOT_MODEL_FOLDERS = frozenset(("custom_nodes",))  # as the sidecar's model cache (NOT_MODEL_FOLDERS)
_FOLDER_MODELS = frozenset(("folder",))  # ComfyUI's extension set for a folder of Diffusers models
_FOLDER_MODEL_MARKER = "model_index.json"
_DOWNLOAD_STAGING = ".authsvc-partial"  # where downloads arrive (the sidecar's DOWNLOAD_STAGING_DIR)
_CASE_INSENSITIVE = os.path.normcase("A") == "a" or sys.platform == "darwin"  # as host_facts reports it


def _models_of(stamp: Any) -> Models:
    """``extra_data.authsvc_models``: null is every model; an object of folder → granted names is
    those; anything else (missing, malformed) is none (fail closed)."""
    if stamp is None:
        return None
    if not isinstance(stamp, dict):
        return _NO_MODEL
    out: dict[str, frozenset[str]] = {}
    for folder, items in stamp.items():
        if isinstance(folder, str) and isinstance(items, list):
            out[folder] = frozenset(i for i in items if isinstance(i, str))
    return out


def _sqlite_uri_path(uri: str) -> str:
    """The file a sqlite `file:` URI opens (its authority, query and fragment dropped, escapes decoded)."""
    from urllib.parse import unquote

    rest = uri[len("file:"):].split("?", 1)[0].split("#", 1)[0].split("%00", 1)[0]
    if rest.startswith("//"):
        rest = "/" + rest[2:].split("/", 1)[1] if "/" in rest[2:] else "/"
    return unquote(rest)


def _fd_path(fd: int) -> str:
    """The path a descriptor was opened on (Linux: /proc/self/fd); OSError where it cannot be told."""
    target = os.readlink(f"/proc/self/fd/{fd}")
    if not os.path.isabs(target):
        raise OSError(f"descriptor {fd} names no path")
    return target


def _resolved(path: Any, how: str, link: Any, dir_fd: Any = None) -> tuple[str, str] | None:
    """`path` as the kernel will walk it: (its absolute spelling, ``..`` kept; its real path, or
    for a call on a link itself its folder's real path and its name); a descriptor as the path it
    was opened on, and a relative name given with a ``dir_fd`` from that folder (``shutil.rmtree``
    walks so); None for a value that is not a path, or one the kernel refuses for its length.
    PermissionError when a descriptor cannot be told (judged as refused, not as nothing)."""
    try:
        if isinstance(path, int):
            try:
                target = _fd_path(path)
            except OSError:
                return None  # a pipe, a socket, or no /proc: judged when it was opened, if by a path
            return target, os.path.realpath(target)
        text = "." if path is None else os.fsdecode(os.fspath(path))
        if len(os.fsencode(text)) >= host_paths.MAX_PATH:
            return None  # the kernel refuses it as given
        if isinstance(dir_fd, int) and not os.path.isabs(text):
            text = os.path.join(_fd_path(dir_fd), text)
        if how == "target" and link is not None and not os.path.isabs(text):
            text = os.path.join(os.path.dirname(os.fsdecode(os.fspath(link))), text)
        if how == "link":
            head, tail = os.path.split(os.path.abspath(text))
            real = os.path.join(os.path.realpath(head), tail)
        else:
            real = os.path.realpath(text)
    except OSError as err:
        if isinstance(path, int) or isinstance(dir_fd, int):
            raise GuardRefusal(f"authsvc: a descriptor this guard cannot follow ({err})") from None
        return None  # not a path; the call itself fails
    except (TypeError, ValueError):
        return None  # not a path; the call itself fails
    lexical = text if os.path.isabs(text) else os.path.join(os.getcwd(), text)  # `..` kept: the kernel walks it
    return lexical, real


class GuardRefusal(PermissionError):
    """A refusal of the run guard: a PermissionError whose text stays its reason when a caller sets
    its file name (``shutil.rmtree`` does on Python 3.13; a bare PermissionError then prints as
    ``[Errno None] None: '<path>'``). No errno, on purpose: code that reads EACCES as "held by someone
    else, try again" (filelock on Windows, and huggingface_hub's lock that waits for ever on it)
    would poll a refused path for good and stop the host's only prompt worker."""

    def __str__(self) -> str:
        reason = str(self.args[0]) if self.args else "authsvc: refused"
        return reason if self.filename is None else f"{reason}: {self.filename!r}"


def _below(path: str, root: str) -> str | None:
    """`path` relative to `root` with `/`, when strictly inside it (without case where the host's
    names have none); else None."""
    if root.endswith(os.sep):
        root = root.rstrip(os.sep)  # "/" itself: every absolute path but "/" is inside it
        if not root:
            return path[1:].replace(os.sep, "/") if len(path) > 1 and path[0] == os.sep else None
    n = len(root)
    if len(path) <= n + 1 or path[n] != os.sep:
        return None
    head, rel = path[:n], path[n + 1:]
    if _CASE_INSENSITIVE:
        if head.lower() != root.lower():
            return None
        rel = rel.lower()
    elif head != root:
        return None
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


def _model_item(root: str, rel: str, extensions: frozenset[str] | None) -> str | None:
    """The model a file `rel` under a model folder path belongs to, as the host lists it (the
    sidecar's model cache: itemOf), in the sidecar's host-path form, else None. A folder is never
    one: the host walks and dates its folders (``get_filename_list``), inside a Diffusers model
    too, and what a model is made of are its files."""
    if extensions is None:
        # a Diffusers model is the folder holding model_index.json: the nearest such folder above the file
        parts = rel.split("/")
        for end in range(len(parts) - 1, -1, -1):
            inside = "/".join(parts[:end])
            if os.path.isfile(os.path.join(root, inside, _FOLDER_MODEL_MARKER)):
                return inside  # the folder itself is "." to the host, "" in host-path form
        return None
    if not extensions or os.path.splitext(rel)[1].lower() in extensions:
        return rel
    return None


_READS = frozenset((
    "os.stat", "os.lstat", "os.access", "os.chdir", "os.listdir", "os.scandir", "os.getxattr", "os.listxattr",
    "safetensors.safe_open", "safetensors.torch.safe_open", "io.open_code",
))
_OPENS = frozenset(("builtins.open", "io.open", "_io.open", "tarfile.bltn_open", "tokenize._builtin_open"))
# what a process's /proc files give away: its environment (AUTHSVC_SECRET on a shared store), its memory
_PROCESS_SECRETS = re.compile(r"^/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/(?:environ|mem)$")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# the keyword naming the folder descriptor a path argument is relative to (else "dir_fd")
_DIR_FD = {
    ("os.rename", "src"): "src_dir_fd", ("os.rename", "dst"): "dst_dir_fd",
    ("os.replace", "src"): "src_dir_fd", ("os.replace", "dst"): "dst_dir_fd",
    ("os.link", "src"): "src_dir_fd", ("os.link", "dst"): "dst_dir_fd",
}


def _writes(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a guarded call can change what it names: an open for writing, or any call but the
    reads (stat, access, listing, attributes read, a native read)."""
    try:
        if name == "sqlite3.connect":
            # creates and writes its file unless opened read-only (a `file:` URI's mode=ro or immutable=1)
            database = os.fsdecode(os.fspath(args[0] if args else kwargs.get("database", "")))
            query = database.split("?", 1)[1] if database.startswith("file:") and "?" in database else ""
            return not re.search(r"(?:^|&)(?:mode=ro|immutable=1)(?:&|$)", query)
        if name in _OPENS:
            mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
            return not isinstance(mode, str) or any(c in mode for c in "wax+")
        if name == "os.open":
            flags = args[1] if len(args) > 1 else kwargs.get("flags", 0)
            return not isinstance(flags, int) or bool(flags & _WRITE_FLAGS)
    except Exception:
        return True
    return name not in _READS


def _inside_any(where: tuple[str, str], roots: tuple[str, ...]) -> bool:
    """Whether the path (as spelled, ``..`` taken lexically, or its real path) is one of `roots` or inside one."""
    lexical, real = where
    for spelled in (os.path.normpath(lexical), real):
        for root in roots:
            if spelled == root or _below(spelled, root) is not None:
                return True
    return False


def _holds_any(where: tuple[str, str], roots: tuple[str, ...]) -> bool:
    """Whether one of `roots` is inside the path (moving or removing it moves or removes the root)."""
    lexical, real = where
    for spelled in (os.path.normpath(lexical), real):
        for root in roots:
            if _below(root, spelled) is not None:
                return True
    return False


def _unexempt(where: tuple[str, str], roots: tuple[str, ...], exempt: tuple[str, ...]) -> bool:
    """Whether a spelling of the path (as spelled, or its real path) is inside `roots` and that same
    spelling is not inside `exempt` (a link in an exempt folder does not exempt where it leads)."""
    lexical, real = where
    for spelled in (os.path.normpath(lexical), real):
        if _inside_any((spelled, spelled), roots) and not _inside_any((spelled, spelled), exempt):
            return True
    return False


# the calls that move or remove what they name (and so a folder holding a protected one)
_MOVES = frozenset(("os.rename", "os.replace", "os.remove", "os.unlink", "os.rmdir"))


def _forms(folders: Any) -> tuple[str, ...]:
    """Each folder as configured and as its real path; one that is not a path leaves out only itself."""
    out: list[str] = []
    for folder in folders:
        try:
            text = os.fsdecode(os.fspath(folder))
            if text and "\0" not in text:
                out.extend((os.path.abspath(text), os.path.realpath(text)))
        except Exception:
            continue
    return tuple(dict.fromkeys(out))


def _entries_real(folders: tuple[str, ...]) -> tuple[str, ...]:
    """The real path of every entry of these folders (a custom node pack may be a link to elsewhere)."""
    out: list[str] = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        out.extend(os.path.realpath(os.path.join(folder, n)) for n in names)
    return tuple(dict.fromkeys(out))


def _entry_key(entry: Any) -> Any:
    """What a folder entry's judgement depends on, cheap to compare; the entry itself when it has another shape."""
    try:
        return (tuple(entry[0]), tuple(entry[1]))
    except Exception:
        return id(entry)


def _first_under(real: str, root: str) -> str | None:
    """The first component of `real` below `root` (compared without case), or None."""
    if len(real) > len(root) and real[len(root)] == os.sep and real[: len(root)].lower() == root.lower():
        return real[len(root) + 1:].split(os.sep, 1)[0]
    return None


class RunGuard:
    def __init__(
        self, prompt_server: Any, roots: Any, model_folders: Callable[[], Any] = dict,
        private: Callable[[], Any] = tuple, code: Callable[[], Any] = tuple,
        host_code: Callable[[], Any] = tuple, writable: Callable[[], Any] = tuple,
    ) -> None:
        """`roots()` gives the host's input, output and temp folders (its folder_paths getters);
        `model_folders()` the host's model folders, by name: (paths, extensions), as ComfyUI's
        ``folder_paths.folder_names_and_paths`` holds them; `private()` the folders of authsvc's
        own (its data dir with the store and the signing secret, its socket folder), which no
        prompt touches; `code()` the folders the host imports code from (custom nodes, this
        package), which no prompt changes; `host_code()` folders whose files the host runs or reads
        as its configuration (ComfyUI's own folder and base folder, its user folder, Python's
        packages), which no prompt changes outside `writable()` (the input, output, temp and model
        folders inside them)."""
        self._server = prompt_server
        self._roots = roots
        self._private = private
        self._code = code
        self._host_code = host_code
        self._writable = writable
        # resolved forms of those folders, by what they were resolved from
        self._forms: dict[str, tuple[Any, tuple[str, ...]]] = {}
        self._model_folders = model_folders
        self._model_roots: tuple[Any, tuple[tuple[str, str, frozenset[str] | None], ...]] = (None, ())
        self._bad_folders: set[str] = set()
        # per queued prompt: its folder, the models granted to its owner (None: every model), and
        # how many times it is queued (an owner may queue one prompt_id again: each run has its record)
        self._folders: OrderedDict[str, tuple[str | None, Models, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._worker: int | None = None
        self._busy = threading.local()
        self._guarding = False
        self._running: str | None = None

    # ------------------------------------------------------------------ records
    def record(self, prompt_id: Any, extra_data: Any) -> None:
        """A prompt the host queues: note its folder and its owner's models."""
        folder = extra_data.get("authsvc_folder", _UNKNOWN) if isinstance(extra_data, dict) else _UNKNOWN
        if folder is not None and not isinstance(folder, str):
            folder = _UNKNOWN
        models = _models_of(extra_data.get("authsvc_models", _NO_MODELS) if isinstance(extra_data, dict) else _NO_MODELS)
        if folder is not None or models is not None:
            self._guard_once()
        with self._lock:
            key = str(prompt_id)
            queued = self._folders.get(key)
            self._folders[key] = (folder, models, 1 if queued is None else queued[2] + 1)
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
        return self.record_of(prompt_id)[0]

    def record_of(self, prompt_id: Any) -> tuple[str | None, Models]:
        """The running prompt's folder and models; the records of prompts run before it are dropped.
        A prompt without a record has no folder and no model."""
        key = str(prompt_id)
        with self._lock:
            if key != self._running:
                if self._running is not None:
                    ran = self._folders.get(self._running)
                    if ran is not None and ran[2] > 1:
                        self._folders[self._running] = (ran[0], ran[1], ran[2] - 1)
                    else:
                        self._folders.pop(self._running, None)
                self._running = key
            record = self._folders.get(key)
            return (_UNKNOWN, _NO_MODEL) if record is None else (record[0], record[1])

    # ------------------------------------------------------------------ the guard
    def _on_worker(self) -> bool:
        return threading.get_ident() == self._worker

    def _roots_real(self) -> tuple[str, ...]:
        # real paths, and the folders as configured (a lexical walk meets those when one is a link)
        return self._folder_forms("roots", self._roots)

    def refused(self, path: Any, own: str, how: str = "follow", link: Any = None) -> str | None:
        """The per-user folder `path` lands in or passes through when it is not `own`, else None."""
        where = _resolved(path, how, link)
        return None if where is None else self._other_folder(where, own)

    def _other_folder(self, where: tuple[str, str], own: str) -> str | None:
        lexical, real = where
        own_l = own.lower()
        for root in self._roots_real():
            for folder in (_first_under(real, root), *host_paths.entered(lexical, root)):
                if folder is not None and FOLDER.match(folder) and folder.lower() != own_l:
                    return folder
        return None

    def model_refused(self, path: Any, models: dict[str, frozenset[str]], how: str = "follow", link: Any = None) -> str | None:
        """The model (``folder/item``) `path` names that is not among `models`, else None.

        A model is what the host lists in a model folder: a file whose extension the folder takes
        (every file when it lists none), or for a folder of folder models (Diffusers) the folder
        holding ``model_index.json`` and everything in it. `path` is judged by its spelling
        (``..`` taken lexically) and by its real path (links followed): each way it names a model,
        that model must be granted, so a link never turns a granted name into another model."""
        where = _resolved(path, how, link)
        return None if where is None else self._model_named(where, models)

    def _model_named(self, where: tuple[str, str], models: dict[str, frozenset[str]]) -> str | None:
        lexical, real = where
        roots = self._model_roots_now()
        for spelled in {os.path.normpath(lexical), real}:
            # each way the path is spelled must name nothing but granted models: a spelling is
            # granted when any folder that lists it grants it (a file of `ultralytics/bbox/` is
            # also `ultralytics_bbox`'s), as the sidecar's check of literal names reads it
            refused: str | None = None
            granted = False
            is_dir: bool | None = None
            for root, folder, extensions in roots:
                rel = _below(spelled, root)
                if rel is None:
                    continue
                if _DOWNLOAD_STAGING in rel.split("/"):
                    return f"{folder}/{rel}"  # a download still arriving: never a model to a limited prompt
                if is_dir is None:
                    is_dir = os.path.isdir(spelled)
                if is_dir:
                    break
                item = _model_item(root, rel, extensions)
                if item is None:
                    continue
                if item in models.get(folder, frozenset()):
                    granted = True
                    break
                refused = refused or f"{folder}/{item or '.'}"
            if refused is not None and not granted:
                return refused
        return None

    def _model_roots_now(self) -> tuple[tuple[str, str, frozenset[str] | None], ...]:
        """(root, folder, extensions) of every model folder path, as configured and as its real
        path; extensions lower-case, None for a folder of folder models. Rebuilt when they change."""
        try:
            # taken on every call (a few µs): custom nodes replace or add to a folder's extensions and paths at any time
            folders = list(self._model_folders().items())
            key = tuple((name, _entry_key(entry)) for name, entry in folders)
        except Exception:  # the map itself is not one (or changed while read): the last list read stands
            return self._model_roots[1]
        if key != self._model_roots[0]:
            out: list[tuple[str, str, frozenset[str] | None]] = []
            for name, entry in folders:
                if not isinstance(name, str) or name in _NOT_MODEL_FOLDERS:
                    continue
                try:
                    paths = [os.fsdecode(os.fspath(p)) for p in entry[0]]
                    lowered = frozenset(str(e).lower() for e in entry[1])
                    kinds = None if lowered == _FOLDER_MODELS else lowered
                    for path in paths:
                        if path and "\0" not in path:
                            for root in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
                                out.append((root, name, kinds))
                except Exception:  # this folder's entry has a shape the host would not use: it alone is left out
                    if name not in self._bad_folders:
                        self._bad_folders.add(name)
                        log.error("authsvc: model folder %r has an entry this guard cannot read; its files are not judged", name)
            self._model_roots = (key, tuple(out))
        return self._model_roots[1]

    def _folder_forms(self, kind: str, given: Callable[[], Any], packs: bool = False) -> tuple[str, ...]:
        """The resolved forms of a set of folders, again only when what they come from changed
        (with `packs`, the real path of each entry too, again when a folder's listing changed)."""
        cached = self._forms.get(kind)
        try:
            raw = tuple(given())
            key: Any = raw
            if packs:
                key = (raw, tuple(os.stat(f).st_mtime_ns for f in raw if isinstance(f, str) and os.path.isdir(f)))
        except Exception:
            # the folders cannot be read now: the last ones read stand (never none at all)
            return cached[1] if cached is not None else ()
        if cached is not None and cached[0] == key:
            return cached[1]
        forms = _forms(raw)
        if packs:
            # only the packs that lead elsewhere: the others are inside a folder already listed
            forms = tuple(dict.fromkeys((*forms, *(r for r in _entries_real(forms) if not _inside_any((r, r), forms)))))
        self._forms[kind] = (key, forms)
        return forms

    def _refusal(self, where: tuple[str, str], writes: bool, moves: bool = True) -> str | None:
        """Why no judged prompt may make this call on this path, or None."""
        private = self._folder_forms("private", self._private)
        if _inside_any(where, private) or (moves and _holds_any(where, private)):
            return "may not use authsvc's own files"
        if any(_PROCESS_SECRETS.match(p) for p in (os.path.normpath(where[0]), where[1])):
            return "may not read a process's environment or memory"
        if writes:
            code = self._folder_forms("code", self._code, packs=True)
            if _inside_any(where, code) or (moves and _holds_any(where, code)):
                return "may not change the host's custom nodes"
            host = self._folder_forms("host_code", self._host_code)
            if _unexempt(where, host, self._folder_forms("writable", self._writable)) or (moves and _holds_any(where, host)):
                return "may not change the host's code or configuration"
        return None

    def check(self, name: str, paths: tuple[tuple[int, str, str], ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before a guarded call on the worker thread: PermissionError for a path in another's
        folder, or one that names a model not granted to the prompt's owner."""
        if getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            own, models = self.record_of(getattr(self._server, "last_prompt_id", None))
            if own is None and models is None:
                return  # a prompt of someone who sees everything
            given = [args[position] if position < len(args) else kwargs.get(keyword) for position, keyword, _ in paths]
            writes = _writes(name, args, kwargs)
            for (_, keyword, how), path in zip(paths, given):
                if path is None and how != "follow":
                    continue
                if name == "sqlite3.connect" and path is not None and not isinstance(path, int):
                    try:
                        text = os.fsdecode(os.fspath(path))
                    except Exception:
                        text = ""
                    if text.startswith("file:"):
                        path = _sqlite_uri_path(text)  # `file:/x/store?mode=ro` opens /x/store
                where = _resolved(path, how, given[-1], kwargs.get(_DIR_FD.get((name, keyword), "dir_fd")))
                if where is None:
                    continue
                # authsvc's own files (the signing secret and the store would make anyone an
                # administrator), code the host runs at its next start: no judged prompt's
                # an existing folder is not made again: the call raises FileExistsError (what
                # `os.makedirs(exist_ok=True)` and `except FileExistsError` expect), nothing changes
                changes = writes and not (name == "os.mkdir" and os.path.lexists(where[1]))
                refusal = self._refusal(where, changes, changes and name in _MOVES)
                if refusal is not None:
                    raise GuardRefusal(f"authsvc: this prompt {refusal} ({name})")
                if own is not None and self._other_folder(where, own) is not None:
                    raise GuardRefusal(f"authsvc: this prompt may not use another user's files ({name})")
                if models is not None:
                    model = self._model_named(where, models)
                    if model is not None:
                        raise GuardRefusal(f"authsvc: this prompt's owner may not use the model {model} ({name})")
        finally:
            self._busy.on = False

    def install(self) -> None:
        """Records and the worker from the host's queue now; the guarded functions with the first prompt that has a folder."""
        self._wrap_queue(self._server.prompt_queue)

    def _guard_once(self) -> None:
        if self._guarding:
            return
        self._guarding = True
        # native readers the host's model loading calls by module attribute (comfy.utils.load_torch_file:
        # `safetensors.safe_open`; `safetensors.torch.load_file` looks up its module's `safe_open`),
        # when loaded by now (the host imports them at start, before any prompt)
        native = tuple((module, "safe_open", ((0, "filename", "follow"),)) for module in (sys.modules.get("safetensors"), sys.modules.get("safetensors.torch")) if module is not None)
        # openers modules took a copy of at import (`bltn_open = open`), and sqlite's own open
        captured = tuple(
            (module, attr, ((0, keyword, "follow"),))
            for module_name, attr, keyword in (("tarfile", "bltn_open", "file"), ("tokenize", "_builtin_open", "file"), ("sqlite3", "connect", "database"))
            if (module := sys.modules.get(module_name)) is not None
        )
        native = (*native, *captured, (io, "open_code", ((0, "path", "follow"),)))
        for module, name, paths in (*GUARDED, *native):
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


def install(prompt_server: Any, private: tuple[str, ...] = (), package_root: str | None = None) -> RunGuard | None:
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
    host_code = _host_code(folder_paths)  # fixed once the host runs: taken once, not on every write
    guard = RunGuard(
        prompt_server,
        lambda: (folder_paths.get_input_directory(), folder_paths.get_output_directory(), folder_paths.get_temp_directory()),
        lambda: getattr(folder_paths, "folder_names_and_paths", {}),
        private=lambda: private,
        code=lambda: (*_custom_node_folders(folder_paths), *((package_root,) if package_root else ())),
        host_code=lambda: host_code,
        writable=lambda: _writable(folder_paths),
    )
    guard.install()
    return guard


def _custom_node_folders(folder_paths: Any) -> tuple[str, ...]:
    try:
        return tuple(folder_paths.get_folder_paths("custom_nodes"))
    except Exception:
        return ()


def _host_code(folder_paths: Any) -> tuple[str, ...]:
    """ComfyUI's own folder (its code, `extra_model_paths.yaml`), its base folder, its user folder
    (startup scripts of other packages, everyone's settings) and Python's package folders (`.pth`)."""
    import site

    out: list[str] = [os.path.dirname(os.path.abspath(getattr(folder_paths, "__file__", "") or "."))]
    for getter in ("base_path",):
        value = getattr(folder_paths, getter, None)
        if isinstance(value, str):
            out.append(value)
    try:
        out.append(folder_paths.get_user_directory())
    except Exception:
        pass
    for getter in (site.getsitepackages, lambda: [site.getusersitepackages()]):
        try:
            out.extend(getter())
        except Exception:
            pass
    return tuple(out)


def _writable(folder_paths: Any) -> tuple[str, ...]:
    """Where a prompt writes inside the host's folders: input, output, temp and the model folders
    (first-use downloads), but never a model folder inside a custom nodes folder's reach."""
    out: list[str] = []
    for getter in ("get_input_directory", "get_output_directory", "get_temp_directory"):
        try:
            out.append(getattr(folder_paths, getter)())
        except Exception:
            pass
    try:
        for name, entry in list(getattr(folder_paths, "folder_names_and_paths", {}).items()):
            if name != "custom_nodes":
                out.extend(entry[0])
    except Exception:
        pass
    models_dir = getattr(folder_paths, "models_dir", None)
    if isinstance(models_dir, str):
        out.append(models_dir)  # first-use downloads into a folder no pack registered (models/LLM, models/insightface)
    return tuple(out)
