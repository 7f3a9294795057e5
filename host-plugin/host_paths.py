"""Which file the host will open for a name: resolved here, inside ComfyUI, with its own functions.

The sidecar decides who may read or write a file on the path the host will really open, never
on its own re-reading of a name (issue 21). It sends a ``resolve`` message naming what a request
or a prompt names; each item is resolved with ``folder_paths`` and the same ``os.path`` steps
the host's handler or node takes, and then to its real path (symlinks followed). No policy here:
the answer says where a name lands and what is there, the sidecar says whether that is allowed.

Items (``op``):

- ``view``: ``GET /view``'s reading of its raw ``query`` (parsed by yarl, as the handler's
  ``rel_url.query``) for ``filename``, ``type``, ``subfolder``: an annotation picks
  the folder, then type (``output`` by default); a name that starts with ``/`` or holds ``..``,
  an unknown type, or a subfolder whose join leaves the folder is the host's own 400/403; only
  the base name of ``filename`` is kept.
  A file's answer adds ``size`` and ``mtime_ms`` (the NSFW tags' key), and ``opened`` (the path the
  handler opens) with its ``stamp`` (``file_stamp``) when that path names the same file: a pass may
  be kept on it (kept_decisions.py). With ``head: true`` (a view the content-safety policy checks)
  it adds the file's first ``HEAD_BYTES`` bytes, base64 (``head``), read from the file in the very
  state of that stamp (none when it changed while they were read), so the sidecar can tell what
  kind of file it is without reading the disk.
- ``mask_ref``: the original image of ``POST /upload/mask`` (``original_ref``): as ``view``, but
  the whole name is kept and an empty subfolder is no subfolder.
- ``upload``: where ``POST /upload/image`` and ``/upload/mask`` store ``filename`` for ``type``
  (``input`` by default) and ``subfolder`` (normalised, joined, then the file name joined).
- ``name``: a string a prompt gives a node: the places a node may open it at, whether or not
  something is there yet: the annotated path (``get_annotated_filepath``, input by default), the
  name joined to the output and temp folders, and the name as the process reads a relative path;
  and for each, the folders directly under input/output/temp its walk enters on the way
  (``entered``). A name of 4096 bytes or more gets no place (the kernel refuses it).

- ``list``: the files of one folder of ``input/`` (``folder``, a per-user folder), all the way
  down, as ``input/``-relative names with ``/``, kept by ``folder_paths.filter_files_content_types``
  for ``content_types`` (what LoadImage and its kin list): ``{"files": [...]}``. The host's own
  lists show only the top of ``input/``, where per-user folders keep nothing.

- ``userdata``: one path of the host's user folder (``path``, absolute, as the sidecar joined it
  from the host's ``user_dir``: a user's workflows, or the shared set in ``user/default/``), looked
  at so that no decision reads the disk in the sidecar (DESIGN §2, issue 25): ``file``, ``dir`` and
  ``exists`` (symlinks followed, as a stat does); with ``list: "files"`` its files as ``GET
  /userdata`` lists them (``listed``: ``{rel, size, modified, created}``, hidden names skipped,
  ``recurse`` or not), with ``list: "v2"`` its entries as ``GET /v2/userdata`` does (``entries``,
  paths relative to ``base``); with ``read`` a file's text (UTF-8, invalid bytes replaced); with
  ``remove`` the file is deleted (an administrator's delete of a shared workflow, which the host
  would look for in the admin's own folder) and ``removed`` says so. Walks visit names in byte
  order, as the sidecar's own listing did. Not realpath'd: the path is the one the sidecar names.

Every answer names ``path`` (real), ``file`` and ``dir``; or ``status`` (the host answers that
itself, whatever exists). The answer also carries ``roots``: the real paths of the three folders.
"""
from __future__ import annotations

import base64
import os
import stat
import time
from typing import Any

from yarl import URL


def _folder_paths() -> Any:
    import folder_paths  # ComfyUI's module

    return folder_paths


def _real(path: str) -> dict[str, Any]:
    try:
        real = os.path.realpath(path)
    except (ValueError, OSError):
        return {"status": 400}
    return {"path": real, "file": os.path.isfile(real), "dir": os.path.isdir(real)}


def _type_dir(fp: Any, kind: Any) -> str | None:
    if not isinstance(kind, str):
        return None
    return fp.get_directory_by_type(kind)


def _inside(root: str, path: str) -> bool:
    try:
        return os.path.commonpath((os.path.abspath(path), root)) == root
    except ValueError:
        return False


def _view(fp: Any, item: dict[str, Any], whole: bool) -> dict[str, Any]:
    filename = item.get("filename")
    if filename is None and not whole:
        return {"status": 404}  # GET /view without a file name: the handler's 404
    if not isinstance(filename, str):
        return {"status": 400}
    name, folder = fp.annotated_filepath(filename)
    if not name or name[0] == "/" or ".." in name:
        return {"status": 400}
    if folder is None:
        folder = _type_dir(fp, item["type"] if "type" in item else "output")
    if folder is None:
        return {"status": 400}
    subfolder = item.get("subfolder")
    if isinstance(subfolder, str) and (subfolder != "" or not whole):
        joined = os.path.join(folder, subfolder)
        if not _inside(folder, joined):
            return {"status": 403}
        folder = joined
    opened = os.path.join(folder, name if whole else os.path.basename(name))
    place = _real(opened)
    if not whole and place.get("file"):
        # the content-safety policy keys its tags on the file as it is now (sidecar/src/nsfw/tags.ts)
        try:
            st = os.stat(place["path"])
            place["size"] = st.st_size
            place["mtime_ms"] = st.st_mtime_ns // 1_000_000
            # the very file the handler opens by its own path (no link in it moved since the realpath):
            # a pass decided on it may be kept while that path still names this file, unchanged
            if _same(os.stat(opened), st):
                place["opened"] = opened
                place["stamp"] = file_stamp(st)
            # only for the very file the handler opens (the head describes what it will serve)
            if item.get("head") is True and "stamp" in place:
                head = _head(place["path"], st)
                if head is not None:
                    place["head"] = head
        except OSError:
            pass
    return place


HEAD_BYTES = 512


def _head(path: str, st: os.stat_result) -> str | None:
    """The first HEAD_BYTES bytes of the file ``st`` describes, base64; None when the file at ``path``
    is not that file in that state before and after the read (a rewrite meanwhile), or is no
    regular file (never an open that waits: a FIFO put there meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode) or file_stamp(before) != file_stamp(st):
            return None
        data = os.read(fd, HEAD_BYTES)
        if file_stamp(os.fstat(fd)) != file_stamp(st):
            return None
    except OSError:
        return None
    finally:
        os.close(fd)
    return base64.b64encode(data).decode("ascii")


def file_stamp(st: os.stat_result) -> str:
    """Which file this is and the state it is in: device, inode, size, mtime and ctime (ns).
    A write, a truncation, a rename over it or a link in its path moved, a chmod: each changes it
    (ctime is the kernel's, no writer sets it). Text, so a 64-bit inode travels through JSON intact.
    A kept /view decision is reused only while its file's stamp is the same (kept_decisions.py)."""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_dev == b.st_dev and a.st_ino == b.st_ino


def _query_item(raw: Any) -> dict[str, Any]:
    """The first value of each field of a raw query string, read as the host's handler reads it."""
    if not isinstance(raw, str):
        return {}
    query = URL.build(path="/", query_string=raw, encoded=True).query
    return {key: query[key] for key in ("filename", "type", "subfolder") if key in query}


def _upload(fp: Any, item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type") or "input"
    if kind not in ("input", "temp", "output"):
        return {"status": 500}  # the host's handler fails on a type it does not know
    folder = fp.get_directory_by_type(kind)
    filename, subfolder = item.get("filename"), item.get("subfolder") or ""
    if not isinstance(filename, str) or not filename or not isinstance(subfolder, str):
        return {"status": 400}
    try:
        target = os.path.abspath(os.path.join(os.path.join(folder, os.path.normpath(subfolder)), filename))
    except ValueError:
        return {"status": 400}
    if not _inside(folder, target):
        return {"status": 400}
    return _real(target)


MAX_PATH = 4096  # the kernel refuses a path of this many bytes or more (ENAMETOOLONG)


def entered(path: str, root: str) -> list[str]:
    """The names directly under ``root`` that the walk of ``path``'s components goes through on its
    way (not the last one: that is the place itself), ``..`` applied as the kernel applies it
    (``root/u_x/a/../../b`` goes through ``u_x``: the kernel needs ``u_x/a`` to exist to get to
    ``b``). Compared without case; symlinks are not followed here."""
    root_parts = [p.lower() for p in root.rstrip(os.sep).split(os.sep)]
    depth = len(root_parts)
    stack: list[str] = []
    names: list[str] = []
    for i, part in enumerate(path.split(os.sep)):
        if i == 0:
            stack.append(part)  # "" for an absolute path
            continue
        if part in ("", "."):
            continue
        # the walk goes on from a name directly under root: the kernel looks that name up as a folder
        if len(stack) == depth + 1 and [p.lower() for p in stack[:depth]] == root_parts:
            names.append(stack[depth])
        if part == "..":
            if len(stack) > 1:
                stack.pop()
        else:
            stack.append(part)
    return list(dict.fromkeys(names))


def _name(fp: Any, item: dict[str, Any], roots: dict[str, str]) -> dict[str, Any]:
    """``roots``: the real paths of the three folders (the answer's ``roots``)."""
    name = item.get("name")
    if not isinstance(name, str):
        return {"places": []}
    candidates = [
        ("annotated", fp.get_annotated_filepath(name)),
        ("output", os.path.join(fp.get_output_directory(), name)),
        ("temp", os.path.join(fp.get_temp_directory(), name)),
        ("cwd", os.path.join(os.getcwd(), name)),  # a node that opens the name as given (relative to the working folder)
    ]
    # a walk meets a folder as configured (when it is a link) or as its real path
    walked = [(lexical, real) for kind, real in roots.items() for lexical in (os.path.abspath(fp.get_directory_by_type(kind)), real)]
    places: list[dict[str, Any]] = []
    seen: set[str] = set()
    for via, candidate in candidates:
        try:
            if len(os.fsencode(candidate)) >= MAX_PATH:
                continue  # the kernel refuses it as given; a node that shortens it meets the run-time guard
        except ValueError:
            continue
        # the place itself, then the folders the kernel walks through on the way (nothing is there
        # for the sidecar: only whose folder it is counts; a place already named keeps what is there)
        passed = [{"path": os.path.join(real, entry), "file": False, "dir": False} for lexical, real in walked for entry in entered(candidate, lexical)]
        for place in [_real(candidate), *passed]:
            path = place.get("path")
            if path is None or path in seen:
                continue
            seen.add(path)
            places.append({**place, "via": via})
    return {"places": places}


def _list(fp: Any, item: dict[str, Any]) -> dict[str, Any]:
    folder, kinds = item.get("folder"), item.get("content_types")
    if not isinstance(folder, str) or not folder or "/" in folder or folder in (".", "..") or not isinstance(kinds, list):
        return {"status": 400}
    root = fp.get_input_directory()
    top = os.path.join(root, folder)
    if os.path.realpath(top) != os.path.join(os.path.realpath(root), folder):
        return {"files": []}  # a symlink: not a folder of the gate's making
    names: list[str] = []
    for here, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(here, d)))
        for name in files:
            names.append(os.path.relpath(os.path.join(here, name), root).replace(os.sep, "/"))
    return {"files": sorted(fp.filter_files_content_types(names, [str(k) for k in kinds]))}


def _walk(folder: str, visit: Any) -> None:
    """Every entry under ``folder``, depth first, names in byte order, with its stat (symlinks
    followed); unreadable folders and entries are skipped. ``visit`` returns False to keep out of
    a folder."""
    try:
        names = sorted(os.listdir(folder), key=os.fsencode)
    except OSError:
        return
    for name in names:
        full = os.path.join(folder, name)
        try:
            st = os.stat(full)
        except (OSError, ValueError):
            continue
        if visit(full, name, st) is not False and stat.S_ISDIR(st.st_mode):
            _walk(full, visit)


def _rel(path: str, base: str) -> str:
    return os.path.relpath(path, base).replace(os.sep, "/")


def _userdata(fp: Any, item: dict[str, Any]) -> dict[str, Any]:
    """Only inside the host's user folder, and a removal only of a shared workflow
    (``<user>/default/workflows/...``): the sidecar never asks for more, and a mistake in its
    joins (or a rogue peer on the decision socket) must not read or delete anything else."""
    path = item.get("path")
    getter = getattr(fp, "get_user_directory", None)
    named = getter() if callable(getter) else None
    user_dir = os.path.abspath(named) if isinstance(named, str) else None
    if not isinstance(path, str) or not os.path.isabs(path) or user_dir is None or not _inside(user_dir, path):
        return {"status": 400}
    base = item.get("base")
    if base is not None and (not isinstance(base, str) or not _inside(user_dir, base)):
        return {"status": 400}
    shared = os.path.join(user_dir, "default", "workflows")
    if item.get("remove") is True and (not _inside(shared, path) or os.path.abspath(path) == shared):
        return {"status": 400}
    out: dict[str, Any] = {"path": path, "file": os.path.isfile(path), "dir": os.path.isdir(path), "exists": os.path.exists(path)}
    listing = item.get("list")
    if listing == "files":
        recurse = item.get("recurse") is True
        listed: list[dict[str, Any]] = []

        def visit_file(full: str, name: str, st: os.stat_result) -> bool:
            if name.startswith("."):
                return False
            if stat.S_ISREG(st.st_mode):
                listed.append({"rel": _rel(full, path), "size": st.st_size, "modified": st.st_mtime, "created": st.st_ctime})
            return recurse

        _walk(path, visit_file)
        out["listed"] = listed
    elif listing == "v2":
        base = item.get("base")
        if not isinstance(base, str) or not os.path.isabs(base):
            return {"status": 400}
        entries: list[dict[str, Any]] = []

        def visit_entry(full: str, name: str, st: os.stat_result) -> None:
            if stat.S_ISDIR(st.st_mode):
                entries.append({"name": name, "path": _rel(full, base), "type": "directory"})
            else:
                entries.append({"name": name, "path": _rel(full, base), "type": "file", "size": st.st_size, "modified": st.st_mtime})

        _walk(path, visit_entry)
        out["entries"] = entries
    if item.get("read") is True and out["file"]:
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            out["text"] = f.read()
    if item.get("remove") is True and out["file"]:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        out["removed"] = True
    return out


def slow(items: Any) -> bool:
    """Whether answering ``items`` may take long: a folder walk (``list``, a ``userdata`` listing),
    a file read (a ``userdata`` text, a ``view``'s ``head``), or a prompt's strings (``name``: any
    number of them, each resolved four ways)."""
    return isinstance(items, list) and any(
        isinstance(i, dict) and (
            i.get("op") in ("list", "name")
            or (i.get("op") == "userdata" and (i.get("list") is not None or i.get("read") is True or i.get("remove") is True))
            or (i.get("op") == "view" and i.get("head") is True)
        )
        for i in items
    )


BUDGET_S = 2.0  # a message that takes longer is answered with an error: the sidecar refuses the request


class OverBudget(Exception):
    pass


def resolve(items: Any, budget_s: float = BUDGET_S) -> dict[str, Any]:
    """The answer to one ``resolve`` message: ``results`` in the order of ``items``, and ``roots``.
    OverBudget when answering takes longer than ``budget_s``."""
    fp = _folder_paths()
    roots = {}
    for kind in ("input", "output", "temp"):
        folder = fp.get_directory_by_type(kind)
        if isinstance(folder, str):
            roots[kind] = os.path.realpath(folder)
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + budget_s
    for item in items if isinstance(items, list) else []:
        if time.monotonic() > deadline:
            raise OverBudget(f"resolving took over {budget_s} s")
        op = item.get("op") if isinstance(item, dict) else None
        try:
            if op == "view":
                results.append(_view(fp, {**_query_item(item.get("query")), "head": item.get("head") is True}, whole=False))
            elif op == "mask_ref":
                results.append(_view(fp, item, whole=True))
            elif op == "upload":
                results.append(_upload(fp, item))
            elif op == "name":
                results.append(_name(fp, item, roots))
            elif op == "list":
                results.append(_list(fp, item))
            elif op == "userdata":
                results.append(_userdata(fp, item))
            else:
                results.append({"status": 400})
        except (TypeError, ValueError, OSError):
            results.append({"status": 400})
    return {"results": results, "roots": roots}
