"""Install or update authsvc's sidecar: what ComfyUI-Manager and the Comfy CLI run after every
install and update, with ComfyUI's own Python, from any working directory.

    python install.py [--quiet]

Idempotent: npm dependencies are installed only when they do not match package-lock.json,
and the sidecar is rebuilt only when its build stamp does not match the sources (see
host-plugin/install_state.py); a second run changes nothing and takes about a second.
A build goes to a fresh folder and replaces sidecar/dist only once complete and stamped,
so an interrupted run never leaves a build that looks usable. Runs are serialised by a
lock, so the plugin's own background install and the Manager's never build at once.
Exit status 0 when the sidecar is ready to run, 1 with one clear error line otherwise.
"""
from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from typing import Iterator

ROOT = os.path.dirname(os.path.abspath(__file__))
QUIET = "--quiet" in sys.argv[1:]


def _load_install_state():  # type: ignore[no-untyped-def]
    path = os.path.join(ROOT, "host-plugin", "install_state.py")
    spec = importlib.util.spec_from_file_location("authsvc_install_state", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


state = _load_install_state()


def say(message: str) -> None:
    if not QUIET:
        print(f"authsvc install: {message}", flush=True)


def fail(message: str, output: str = "") -> None:
    if output.strip():
        sys.stderr.write(output.rstrip()[-4000:] + "\n")
    sys.stderr.write(f"authsvc install: ERROR: {message}\n")
    sys.stderr.flush()
    sys.exit(1)


@contextlib.contextmanager
def install_lock() -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: the plugin does not run there yet (docs/platforms.md); nothing to race with
        yield
        return
    with open(os.path.join(ROOT, ".install.lock"), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another install of this package is running; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def npm_command(node: str) -> list[str]:
    """npm as shipped beside this node, run by this node: never another Node found on PATH."""
    node_dir = os.path.dirname(os.path.realpath(node))
    for cli in (os.path.join(node_dir, "..", "lib", "node_modules", "npm", "bin", "npm-cli.js"),
                os.path.join(node_dir, "node_modules", "npm", "bin", "npm-cli.js")):
        if os.path.isfile(cli):
            return [node, os.path.normpath(cli)]
    npm = shutil.which("npm")
    if npm is None:
        fail("npm was not found (it comes with Node.js); install Node.js 20 or newer with npm, "
             "or set AUTHSVC_NODE to a node binary that has npm beside it")
    return [npm]


def run(command: list[str], what: str, env: dict[str, str]) -> None:
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        fail(f"{what} failed (exit status {result.returncode}); the output is above", result.stdout + result.stderr)


def install_dependencies(node: str, env: dict[str, str]) -> None:
    say("installing npm dependencies from package-lock.json (npm ci; a minute or two)")
    # --prefer-offline: the lockfile pins every integrity hash, so npm's cache needs no revalidation
    run(npm_command(node) + ["ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefer-offline"], "npm ci", env)
    if not state.deps_current(ROOT):
        fail("npm ci finished but node_modules still does not match package-lock.json")


def install_classifier(node: str, env: dict[str, str]) -> None:
    """The NSFW classifier's optional packages, into their own folder with their own lockfile
    (sidecar/nsfw-classifier; docs/decisions.md "NSFW classifier"): only when nsfw.enabled."""
    say("installing the NSFW classifier's packages (nsfw.enabled; about 370 MB)")
    folder = os.path.join(ROOT, state.CLASSIFIER_DIR)
    # no install scripts: each package ships what it runs (the model, the wasm backend, sharp's prebuilt libvips)
    command = npm_command(node) + ["ci", "--no-audit", "--no-fund", "--loglevel=error", "--prefer-offline", "--ignore-scripts"]
    result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        fail(f"npm ci of the NSFW classifier failed (exit status {result.returncode}); the output is above", result.stdout + result.stderr)
    if not state.classifier_current(ROOT):
        fail("npm ci finished but the NSFW classifier's packages still do not match their package-lock.json")


def build_sidecar(node: str, env: dict[str, str]) -> None:
    say("building the sidecar (tsc)")
    stamp = state.expected_stamp(ROOT)  # taken before compiling: a source edited meanwhile makes it stale, not wrongly fresh
    sidecar = os.path.join(ROOT, "sidecar")
    fresh = os.path.join(sidecar, f"dist.new-{os.getpid()}")
    old = os.path.join(sidecar, f"dist.old-{os.getpid()}")
    for leftover in glob.glob(os.path.join(sidecar, "dist.new-*")) + glob.glob(os.path.join(sidecar, "dist.old-*")):
        shutil.rmtree(leftover, ignore_errors=True)  # from a run that was killed; we hold the lock, so none is live
    tsc = os.path.join(ROOT, "node_modules", "typescript", "bin", "tsc")
    try:
        run([node, tsc, "-p", os.path.join(sidecar, "tsconfig.json"), "--outDir", fresh], "the sidecar build (tsc)", env)
        state.write_stamp(fresh, stamp)
        dist = os.path.join(sidecar, "dist")
        if os.path.exists(dist):
            os.rename(dist, old)
        os.rename(fresh, dist)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def main() -> None:
    started = time.monotonic()
    problem = state.node_problem()
    if problem is not None:
        fail(f"{problem.what}. To fix: {state.NODE_HELP}, then run install.py again")
    node = state.find_node()
    assert node is not None
    env = dict(os.environ)
    # npm's own scripts and native builds start "node" from PATH: make it this one
    env["PATH"] = os.path.dirname(os.path.realpath(node)) + os.pathsep + env.get("PATH", "")
    with install_lock():
        changed = False
        if not state.deps_current(ROOT):
            install_dependencies(node, env)
            changed = True
        if state.classifier_wanted(ROOT) and not state.classifier_current(ROOT):
            install_classifier(node, env)
            changed = True
        if state.build_problem(ROOT) is not None:
            build_sidecar(node, env)
            changed = True
        problem = state.build_problem(ROOT)
        if problem is not None:
            fail(f"{problem.what} after the build (were files changed during it?); run install.py again")
    if changed:
        # the plugin runs this itself when it finds the install unfinished, and starts the sidecar after it
        restart = "" if os.environ.get("AUTHSVC_INSTALL_BY_PLUGIN") == "1" else "; restart ComfyUI if it is running"
        say(f"done in {time.monotonic() - started:.0f} s{restart}")
    else:
        say("already installed and up to date; nothing to do")


if __name__ == "__main__":
    main()
