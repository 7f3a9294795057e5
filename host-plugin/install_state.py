"""Is this package's sidecar installed, built from these very sources, and runnable here?

Shared by ``install.py`` (which makes the answer yes) and the plugin (which checks it at
import and before every sidecar start). Stdlib only and free of relative imports: install.py
loads this file by path, without aiohttp and without the plugin package.

Guarantees:
- a build counts only with its stamp (``sidecar/dist/.build-stamp.json``), which the build
  writes last; the stamp records the package version and SHA-256 digests of package-lock.json
  and of the sidecar's sources (``sidecar/src``, ``sidecar/tsconfig.json``), and a build whose
  stamp does not match the files on disk now is stale: an interrupted build, a plain clone or
  an update that was never built never runs;
- installed npm dependencies count only when npm's own record of them
  (``node_modules/.package-lock.json``, written when an install completes) matches the
  lockfile entry by entry, which is what ``npm ci`` would install;
- every ``Problem`` says what is wrong and what to do, in words fit for a log line and for
  the page a browser gets; none carries a secret.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Mapping
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

MIN_NODE_MAJOR = 20
STAMP_NAME = ".build-stamp.json"
NODE_HELP = (
    "install Node.js 20 or newer (https://nodejs.org, or your system's package manager) "
    "or set AUTHSVC_NODE to the path of a node binary"
)


@dataclass(frozen=True)
class Problem:
    """Why the sidecar cannot run. ``installable``: ``install.py`` would fix it (Node is fine)."""

    kind: str  # unsupported_platform | no_node | old_node | no_deps | no_build | stale_build, or the supervisor's
    what: str  # for the log and the page: no path, no value of a setting
    fix: str
    installable: bool = False
    detail: str = ""  # for the log only (a path, a version string)

    def log_line(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.what}{detail}. To fix: {self.fix}"


def package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def install_command(root: str) -> str:
    """The command to type, named the way the owner sees the package: custom_nodes/<folder>."""
    return f"python {os.path.basename(root)}/install.py (in ComfyUI's custom_nodes folder, with ComfyUI's Python)"


# ----------------------------------------------------------------------------- platform


def platform_problem(platform: str | None = None) -> Problem | None:
    """The plugin drives a Unix socket with loop.add_reader: Windows has neither (docs/platforms.md)."""
    platform = platform or sys.platform
    if platform == "win32" or not hasattr(socket, "AF_UNIX"):
        return Problem(
            "unsupported_platform",
            f"authsvc does not run on this platform yet ({platform}: no Unix sockets for the sidecar)",
            "run ComfyUI on Linux or macOS, or under WSL2; see docs/platforms.md in the package",
        )
    return None


# ----------------------------------------------------------------------------- Node.js

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
_node_cache: dict[tuple[str, float, int], str | None] = {}


def find_node() -> str | None:
    """AUTHSVC_NODE, else ``node`` on PATH; read each time, the environment is the configuration."""
    configured = os.environ.get("AUTHSVC_NODE")
    if configured:
        return configured
    return shutil.which("node")


def node_version(node: str) -> str | None:
    """``node --version``, cached per binary (path, mtime, size): the check runs before every start."""
    try:
        st = os.stat(node)
    except OSError:
        return None
    key = (node, st.st_mtime, st.st_size)
    if key not in _node_cache:
        try:
            out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20, check=False)
            _node_cache[key] = out.stdout.strip() if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            _node_cache[key] = None
    return _node_cache[key]


def node_problem() -> Problem | None:
    node = find_node()
    if node is None:
        return Problem("no_node", "Node.js >= 20 is needed and was not found (no node on PATH, AUTHSVC_NODE not set)",
                       f"{NODE_HELP}, then restart ComfyUI")
    version = node_version(node)
    if version is None:
        source = "AUTHSVC_NODE" if os.environ.get("AUTHSVC_NODE") else "node on PATH"
        return Problem("no_node", f"Node.js >= 20 is needed; the {source} does not run",
                       f"{NODE_HELP}, then restart ComfyUI", detail=node)
    match = _VERSION.match(version)
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        return Problem("old_node", f"Node.js >= 20 is needed; the node found is {version[:40]}",
                       f"{NODE_HELP}, then restart ComfyUI", detail=node)
    return None


# ----------------------------------------------------------------------------- digests


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sources_digest(root: str) -> str:
    """One digest over the sidecar's sources: relative path and content of each file, in path order."""
    files = [os.path.join(root, "sidecar", "tsconfig.json")]
    src = os.path.join(root, "sidecar", "src")
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        files.extend(os.path.join(dirpath, name) for name in filenames)
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: os.path.relpath(p, root).replace(os.sep, "/")):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        digest.update(f"{rel}\0{_sha256_file(path)}\n".encode())
    return digest.hexdigest()


def package_version(root: str) -> str:
    with open(os.path.join(root, "package.json"), encoding="utf-8") as f:
        return str(json.load(f)["version"])


def expected_stamp(root: str) -> dict[str, str]:
    return {
        "version": package_version(root),
        "lockfile_sha256": _sha256_file(os.path.join(root, "package-lock.json")),
        "sources_sha256": sources_digest(root),
    }


def stamp_path(dist: str) -> str:
    return os.path.join(dist, STAMP_NAME)


def write_stamp(dist: str, stamp: dict[str, str]) -> None:
    tmp = stamp_path(dist) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(stamp, f, indent=2)
        f.write("\n")
    os.replace(tmp, stamp_path(dist))


def read_stamp(dist: str) -> dict[str, Any] | None:
    try:
        with open(stamp_path(dist), encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# ----------------------------------------------------------------------------- dependencies and build


CLASSIFIER_DIR = os.path.join("sidecar", "nsfw-classifier")


def classifier_wanted(root: str, env: dict[str, str] | None = None) -> bool:
    """The NSFW classifier's optional packages are wanted: the data dir's config.json (the same
    data dir the plugin and the sidecar use) sets ``nsfw.enabled`` with the bundled classifier
    (not the test suites' ``"test"`` one, which needs none)."""
    env = os.environ if env is None else env
    return any(_wants_classifier(d) for d in _data_dir_candidates(root, env))


def _data_dir_candidates(root: str, env: Mapping[str, str]) -> list[str]:
    """Where the data dir may be, seen from outside ComfyUI (install.py runs without it):
    AUTHSVC_DATA_DIR; else ComfyUI's default user directory's ``authsvc/`` when the package sits
    in ``custom_nodes`` (the plugin's choice, data_dir.py; a ``--user-directory`` elsewhere needs
    AUTHSVC_DATA_DIR here), and the package's own ``users/`` (the stand-in demo, an older install)."""
    if env.get("AUTHSVC_DATA_DIR"):
        return [env["AUTHSVC_DATA_DIR"]]
    package = os.path.abspath(root)
    candidates = []
    if os.path.basename(os.path.dirname(package)) == "custom_nodes":
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(package)), "user", "authsvc"))
    candidates.append(os.path.join(package, "users"))
    return candidates


def _wants_classifier(data_dir: str) -> bool:
    try:
        with open(os.path.join(data_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    nsfw = config.get("nsfw") if isinstance(config, dict) else None
    return isinstance(nsfw, dict) and nsfw.get("enabled") is True and nsfw.get("classifier", "nsfwjs") == "nsfwjs"


def classifier_current(root: str) -> bool:
    """The classifier's packages are installed as its own lockfile says (sidecar/nsfw-classifier)."""
    return deps_current(os.path.join(root, CLASSIFIER_DIR))


def deps_current(root: str) -> bool:
    """npm's hidden lockfile holds exactly the lockfile's packages (optional ones may be absent:
    npm skips those for other platforms, e.g. esbuild's 25 native builds)."""
    try:
        with open(os.path.join(root, "package-lock.json"), encoding="utf-8") as f:
            wanted = json.load(f).get("packages", {})
        with open(os.path.join(root, "node_modules", ".package-lock.json"), encoding="utf-8") as f:
            installed = json.load(f).get("packages", {})
    except (OSError, ValueError, AttributeError):
        return False
    if not isinstance(wanted, dict) or not isinstance(installed, dict):
        return False
    for path, entry in wanted.items():
        if path == "" or not isinstance(entry, dict):
            continue
        have = installed.get(path)
        if have is None:
            if entry.get("optional"):
                continue
            return False
        if not isinstance(have, dict) or any(have.get(k) != entry.get(k) for k in ("version", "integrity", "link")):
            return False
    return all(path in wanted for path in installed)


def build_problem(root: str) -> Problem | None:
    fix = f"run {install_command(root)}, then restart ComfyUI"
    if not deps_current(root):
        return Problem("no_deps", "the sidecar's npm dependencies are not installed or do not match package-lock.json",
                       fix, installable=True)
    dist = os.path.join(root, "sidecar", "dist")
    stamp = read_stamp(dist)
    if stamp is None or not os.path.isfile(os.path.join(dist, "main.js")):
        return Problem("no_build", "the sidecar is not built (a plain clone or an interrupted install)", fix, installable=True)
    try:
        expected = expected_stamp(root)
    except (OSError, ValueError, KeyError) as exc:
        return Problem("broken_package", "the package's files are incomplete (package.json, package-lock.json or "
                       "the sidecar's sources cannot be read)",
                       "reinstall authsvc (a fresh git clone, or reinstall it in ComfyUI-Manager), then restart ComfyUI",
                       detail=f"{type(exc).__name__}: {exc}")
    if {k: stamp.get(k) for k in ("version", "lockfile_sha256", "sources_sha256")} != expected:
        return Problem("stale_build", "the sidecar build is older than this package's sources (an update that was not installed)",
                       fix, installable=True)
    if classifier_wanted(root) and not classifier_current(root):
        return Problem("no_classifier", "the NSFW policy is enabled but its classifier's packages are not installed",
                       fix, installable=True)
    return None


def check(root: str | None = None) -> Problem | None:
    """Everything that keeps the sidecar from starting and that no restart would fix, first cause first."""
    root = root or package_root()
    problem = platform_problem() or node_problem()
    if problem is not None:
        return problem
    return build_problem(root)
