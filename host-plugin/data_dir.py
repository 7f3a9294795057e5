"""Where the data dir is (SPEC §10), and the one-time move of the old one.

- ``AUTHSVC_DATA_DIR`` (not empty) wins, always.
- Inside ComfyUI: ``<user_dir>/authsvc``, where ``user_dir`` is the host's own
  ``folder_paths.get_user_directory()`` (ComfyUI sets it from ``--user-directory`` before it
  imports custom nodes). It survives removing and re-cloning the package folder, which is how
  custom nodes are commonly repaired. ComfyUI serves only ``<user_dir>/<comfy-user>/`` over
  ``/userdata``, and the gate names every ``comfy-user`` itself (never ``authsvc``); the gate
  also refuses any userdata path that leaves the caller's own space (docs/decisions.md,
  "The data dir lives in ComfyUI's user directory").
- No host (a plain ``python -c 'import ...'``, a host without ``folder_paths``):
  ``<package>/users`` as before.

An existing ``<package>/users`` (the default before issue 28) is moved to the new place once,
atomically: one ``rename`` when both are on one filesystem; otherwise a copy into a temp sibling
of the target, every file and folder fsynced, one ``rename`` of the sibling, and only then the
old folder removed. One log line says what happened. When the new place already holds data the
old folder is left alone and a warning says so (nothing is merged or overwritten).
"""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import stat
from typing import Mapping, Optional

log = logging.getLogger("authsvc")

DIR_NAME = "authsvc"
LEGACY_NAME = "users"


def host_user_dir() -> Optional[str]:
    """ComfyUI's user directory (``--user-directory`` respected), or None outside ComfyUI."""
    try:
        import folder_paths  # ComfyUI's module
    except ImportError:
        return None
    getter = getattr(folder_paths, "get_user_directory", None)
    if not callable(getter):
        return None
    value = getter()
    return os.path.abspath(value) if isinstance(value, str) and value else None


def choose(env: Mapping[str, str], package_root: str, user_dir: Optional[str]) -> tuple[str, Optional[str]]:
    """(the data dir, the legacy dir to move into it or None)."""
    explicit = env.get("AUTHSVC_DATA_DIR")
    if explicit:
        return os.path.abspath(explicit), None
    legacy = os.path.join(os.path.abspath(package_root), LEGACY_NAME)
    if user_dir is None:
        return legacy, None
    return os.path.join(user_dir, DIR_NAME), legacy


def _has_entries(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except FileNotFoundError:
        return False


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_tree(src: str, dst: str) -> None:
    """Regular files and folders only (sockets and the like belong to a process, not to the data),
    modes kept, each file fsynced."""
    os.mkdir(dst, 0o700)
    with os.scandir(src) as it:
        entries = list(it)
    for entry in entries:
        target = os.path.join(dst, entry.name)
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            _copy_tree(entry.path, target)
        elif stat.S_ISREG(st.st_mode):
            with open(entry.path, "rb") as fin:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(st.st_mode) & 0o700)
                with os.fdopen(fd, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
                    fout.flush()
                    os.fsync(fout.fileno())
    os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode) & 0o700 or 0o700)
    _fsync_dir(dst)


def move_legacy(legacy: Optional[str], target: str) -> str:
    """Moves ``legacy`` to ``target`` once. Returns what happened: 'none' (nothing to move),
    'renamed', 'copied', or 'kept' (the target already holds data; the old folder stays)."""
    if legacy is None or os.path.realpath(legacy) == os.path.realpath(target) or not os.path.isdir(legacy):
        return "none"
    if not _has_entries(legacy):
        return "none"
    if _has_entries(target):
        log.warning("authsvc: the old data dir %s was not moved: the data dir %s already holds data and is used; "
                    "move or remove the old one yourself", legacy, target)
        return "kept"
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    try:
        os.rmdir(target)  # an empty target (made by hand, or by a start that failed) is replaced
    except FileNotFoundError:
        pass
    try:
        os.rename(legacy, target)
        _fsync_dir(parent)
        log.info("authsvc: moved the data dir from %s to %s (it now survives reinstalling the package)", legacy, target)
        return "renamed"
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    temp = os.path.join(parent, f".{DIR_NAME}.moving-{os.getpid()}")
    shutil.rmtree(temp, ignore_errors=True)
    try:
        _copy_tree(legacy, temp)
        os.rename(temp, target)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    shutil.rmtree(legacy, ignore_errors=True)
    if os.path.exists(legacy):
        log.warning("authsvc: copied the data dir from %s to %s, but could not remove the old one; remove it yourself", legacy, target)
    else:
        log.info("authsvc: moved the data dir from %s to %s (copied across filesystems; it now survives reinstalling the package)",
                    legacy, target)
    return "copied"


def prepare(env: Mapping[str, str], package_root: str) -> str:
    """The data dir to use, the old one moved into it if need be, created 0700."""
    data_dir, legacy = choose(env, package_root, host_user_dir())
    move_legacy(legacy, data_dir)
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    os.chmod(data_dir, 0o700)
    return data_dir


# sun_path holds 108 bytes on Linux (104 on macOS), the final NUL included; the sidecar's HTTP
# socket is this path with "-http" before ".sock" (5 more bytes), so 100 leaves room for both.
MAX_SOCKET_PATH = 100


def socket_path(data_dir: str) -> str:
    """The decision socket: in the data dir when the path fits in sun_path; else in a 0700 folder
    of this user under /tmp named by a hash of the data dir (a deep --user-directory), so two data
    dirs never share one (docs/decisions.md)."""
    path = os.path.join(data_dir, "authsvc.sock")
    if len(path.encode()) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.path.abspath(data_dir).encode()).hexdigest()[:12]
    short_dir = os.path.join("/tmp", f"authsvc-{os.getuid()}-{digest}")
    os.makedirs(short_dir, mode=0o700, exist_ok=True)
    st = os.lstat(short_dir)
    # /tmp is everyone's: a folder someone else made (or a link) there is never used
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise RuntimeError(f"{short_dir} is not a folder of this user; remove it, or set AUTHSVC_DATA_DIR to a shorter path")
    os.chmod(short_dir, 0o700)
    return os.path.join(short_dir, "authsvc.sock")
