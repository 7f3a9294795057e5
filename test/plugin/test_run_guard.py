"""run_guard.py: on the host's prompt worker thread, a running prompt of a user who does not see
everything touches nothing inside another per-user folder, whatever path it computed: real
files in a temp dir, real opens, listings, renames, copies and symlinks, through the guarded
functions installed for real (os, io, builtins, and what pathlib, shutil and glob call). Other
threads, administrators' prompts and one's own or shared files are untouched."""
from __future__ import annotations

import glob
import io
import sqlite3  # noqa: F401 - loaded before the guard, as in the host
import tarfile  # noqa: F401
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import types
import unittest
from typing import Any, Callable

from .support import plugin_module

run_guard = plugin_module("run_guard")


class _NativeSafeOpen:
    """Stands for safetensors' Rust reader (``safetensors.safe_open``): it opens the file without any
    Python function the guard replaces (``io.FileIO`` here), as the real one does."""

    def __init__(self, filename: str, framework: str = "pt", device: str = "cpu") -> None:
        with io.FileIO(filename) as f:
            self.data = f.read()


# loaded before the guard is installed, as the host loads it at start
if "safetensors" not in sys.modules:
    _fake = types.ModuleType("safetensors")
    _fake.safe_open = _NativeSafeOpen  # type: ignore[attr-defined]
    sys.modules["safetensors"] = _fake

ALICE = "u_0a1b2c3d-0000-4000-8000-00000000000a"
BOB = "u_0a1b2c3d-0000-4000-8000-00000000000b"
GUEST = "o_0123456789abcdef"


class Queue:
    """ComfyUI's prompt queue as far as the guard uses it: `put` of (number, id, prompt, extra, outputs)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.items.append(item)

    def get(self, timeout: float | None = None) -> None:
        return None  # the host's worker blocks here for the next prompt


class Server:
    """What the guard reads of ComfyUI's PromptServer."""

    def __init__(self) -> None:
        self.last_prompt_id: Any = None
        self.prompt_queue = Queue()

    def queue(self, prompt_id: Any, extra: Any) -> None:
        self.prompt_queue.put((1, prompt_id, {}, extra, []))


_installed: dict[str, Any] = {}


def guard_for_tests() -> tuple[Any, Server, str]:
    """One guard per test process (the functions stay guarded), installed for real."""
    if not _installed:
        base = tempfile.mkdtemp(prefix="run-guard-")
        roots = [os.path.join(base, t) for t in ("input", "output", "temp")]
        server = Server()
        guard = run_guard.RunGuard(
            server, lambda: roots, lambda: _installed.get("model_folders", {}),
            private=lambda: _installed.get("private", ()), code=lambda: _installed.get("code", ()),
            host_code=lambda: _installed.get("host_code", ()), writable=lambda: _installed.get("writable", ()),
        )
        guard.install()
        _installed.update(guard=guard, server=server, base=base)
    return _installed["guard"], _installed["server"], _installed["base"]


def on_worker(fn: Callable[[], Any]) -> Any:
    """Runs `fn` on the worker thread: the one that took a prompt off the queue (`get`)."""
    out: dict[str, Any] = {}

    def prompt_worker() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    # the guard learns the worker's identity once, as in the host where the worker never ends
    if "worker" not in _installed:
        _installed["worker"] = _Worker()
    worker = _installed["worker"]
    return worker.run(prompt_worker, out)


class _Worker:
    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], None], threading.Event]] = []
        self.cv = threading.Condition()
        threading.Thread(target=self._loop, name="test-worker", daemon=True).start()

    def _loop(self) -> None:
        _installed["server"].prompt_queue.get(timeout=0)  # as the host's worker does: that makes it the worker
        while True:
            with self.cv:
                while not self.jobs:
                    self.cv.wait()
                job, done = self.jobs.pop(0)
            job()
            done.set()

    def run(self, job: Callable[[], None], out: dict[str, Any]) -> Any:
        done = threading.Event()
        with self.cv:
            self.jobs.append((job, done))
            self.cv.notify()
        assert done.wait(10), "the worker did not run the job"
        if "error" in out:
            raise out["error"]
        return out.get("value")


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class RunGuardTest(unittest.TestCase):
    def setUp(self) -> None:
        self.guard, self.server, base = guard_for_tests()
        # the guard's roots are fixed per process: rebuild their content per test
        for t in ("input", "output", "temp"):
            shutil.rmtree(os.path.join(base, t), ignore_errors=True)
            for owner in (ALICE, BOB, GUEST):
                os.makedirs(os.path.join(base, t, owner))
        self.root = base
        self.hers = os.path.join(base, "output", ALICE, "a_00001_.png")
        self.his = os.path.join(base, "output", BOB, "b_00001_.png")
        self.shared = os.path.join(base, "input", "shared.png")
        for path, data in ((self.hers, b"hers"), (self.his, b"his"), (self.shared, b"shared")):
            with open(path, "wb") as f:
                f.write(data)
        # queued again for every test: a record goes once the worker has moved on to another prompt
        self.server.queue("bob-1", {"authsvc_folder": BOB})
        self.server.queue("admin-1", {"authsvc_folder": None, "authsvc_models": None})
        self.server.queue("guest-1", {"authsvc_folder": GUEST})
        self.server.queue("unstamped", {})
        self.server.queue("bad-stamp", {"authsvc_folder": 7})

    def tearDown(self) -> None:
        self.server.last_prompt_id = "admin-1"  # the hook stays installed: leave it inert

    def running(self, prompt_id: str, fn: Callable[[], Any]) -> Any:
        self.server.last_prompt_id = prompt_id
        return on_worker(fn)

    def assert_refused(self, prompt_id: str, fn: Callable[[], Any], what: str) -> None:
        with self.assertRaisesRegex(PermissionError, "authsvc: this prompt may not use another user's files", msg=what):
            self.running(prompt_id, fn)

    def test_a_refusal_keeps_its_reason_and_is_never_taken_for_a_lock_held_elsewhere(self) -> None:
        """A refusal says why even once a caller sets its file name (shutil.rmtree does on 3.13), and
        has no errno: filelock on Windows reads EACCES as "another process holds it" and retries for
        ever (huggingface_hub's lock waits on it with no timeout), which would stop the host's only
        prompt worker on a refused lock file."""
        with self.assertRaises(PermissionError) as caught:
            self.running("bob-1", lambda: os.open(self.hers, os.O_RDONLY))
        refusal = caught.exception
        self.assertIsNone(refusal.errno)
        refusal.filename = self.hers
        self.assertEqual(str(refusal), f"authsvc: this prompt may not use another user's files (os.open): {self.hers!r}")

    def test_bob_touches_nothing_of_hers_whatever_the_operation(self) -> None:
        her_dir = os.path.dirname(self.hers)
        os.symlink(self.shared, os.path.join(her_dir, "out.lnk"))
        link = os.path.join(self.root, "output", BOB, "link.png")
        os.symlink(self.hers, link)
        rows: list[tuple[str, Callable[[], Any]]] = [
            ("open for reading", lambda: read(self.hers)),
            ("open through ..", lambda: read(os.path.join(self.root, "output", BOB, "..", ALICE, "a_00001_.png"))),
            ("open as bytes", lambda: read(os.fsencode(self.hers))),  # type: ignore[arg-type]
            ("a symlink in his own folder", lambda: read(link)),
            ("a file that does not exist yet", lambda: open(os.path.join(her_dir, "planted.txt"), "w")),
            ("the folder name in capitals", lambda: read(os.path.join(self.root, "output", ALICE.upper(), "a_00001_.png"))),
            ("a listing", lambda: os.listdir(her_dir)),
            ("a scan", lambda: list(os.scandir(her_dir))),
            ("a rename into her folder", lambda: os.rename(self.his, os.path.join(her_dir, "moved.png"))),
            ("a removal", lambda: os.remove(self.hers)),
            ("a copy out", lambda: shutil.copyfile(self.hers, os.path.join(self.root, "output", BOB, "copy.png"))),
            ("a copy in", lambda: shutil.copyfile(self.his, os.path.join(her_dir, "copy.png"))),
            ("a symlink made to her file", lambda: os.symlink(self.hers, os.path.join(self.root, "output", BOB, "l2.png"))),
            ("her input folder", lambda: os.listdir(os.path.join(self.root, "input", ALICE))),
            ("her temp folder", lambda: open(os.path.join(self.root, "temp", ALICE, "p.png"), "wb")),
            ("a guest's folder", lambda: os.listdir(os.path.join(self.root, "input", GUEST))),
            ("open by keyword", lambda: open(file=self.hers, mode="rb")),
            ("io.open", lambda: io.open(self.hers, "rb")),
            ("os.open", lambda: os.open(self.hers, os.O_RDONLY)),
            ("pathlib", lambda: pathlib.Path(self.hers).read_bytes()),
            ("pathlib, a listing", lambda: list(pathlib.Path(her_dir).iterdir())),
            ("os.replace", lambda: os.replace(self.his, os.path.join(her_dir, "moved.png"))),
            ("a whole tree removed", lambda: shutil.rmtree(her_dir)),
            ("os.makedirs inside", lambda: os.makedirs(os.path.join(her_dir, "new", "deep"))),
            # the kernel walks u_<her id>/x to get back out: whether x exists would show
            ("through her folder and out again", lambda: read(os.path.join(self.root, "output", ALICE, "a_00001_.png", "..", "..", "..", "input", "shared.png"))),
            ("through a folder of hers that does not exist", lambda: read(os.path.join(self.root, "input", ALICE, "nope", "..", "..", "shared.png"))),
            ("relative, through her folder", lambda: read(os.path.relpath(self.root) + f"/output/{ALICE}/x/../../{BOB}/b_00001_.png")),
            ("stat", lambda: os.stat(self.hers)),
            ("lstat", lambda: os.lstat(self.hers)),
            ("access", lambda: os.access(self.hers, os.R_OK)),
            ("chdir", lambda: os.chdir(her_dir)),
            ("a FIFO in her folder", lambda: os.mkfifo(os.path.join(her_dir, "fifo"))),
            ("a symlink of his whose relative target is hers", lambda: os.symlink(os.path.join("..", ALICE, "a_00001_.png"), os.path.join(self.root, "output", BOB, "rel.png"))),
            ("removing a link inside her folder that points out of it", lambda: os.unlink(os.path.join(her_dir, "out.lnk"))),
        ]
        for what, fn in rows:
            self.assert_refused("bob-1", fn, what)
        self.assertEqual(read(self.hers), b"hers")
        self.assertEqual(sorted(os.listdir(her_dir)), ["a_00001_.png", "out.lnk"], "nothing was planted, moved, copied in or removed")
        self.assertFalse(os.path.exists(os.path.join(self.root, "output", BOB, "copy.png")))
        self.assertTrue(os.path.exists(self.his), "his file was not moved")
        # os.walk skips what it may not list (its onerror): her folder's files are not among what it found
        walked = self.running("bob-1", lambda: [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(self.root, "output")) for f in fs])
        self.assertIn(self.his, walked)
        self.assertNotIn(self.hers, walked)
        # so does glob: it finds nothing in her folder, and his file in his
        self.assertEqual(self.running("bob-1", lambda: glob.glob(os.path.join(her_dir, "*"))), [])
        self.assertEqual(self.running("bob-1", lambda: glob.glob(os.path.join(self.root, "output", BOB, "b_*"))), [self.his])

    def test_his_own_files_the_shared_ones_and_other_places_work(self) -> None:
        self.assertEqual(self.running("bob-1", lambda: read(self.his)), b"his")
        self.assertEqual(self.running("bob-1", lambda: read(self.shared)), b"shared")
        self.assertEqual(self.running("bob-1", lambda: sorted(os.listdir(os.path.join(self.root, "output", BOB)))), ["b_00001_.png"])
        self.running("bob-1", lambda: shutil.copyfile(self.his, os.path.join(self.root, "output", BOB, "copy.png")))
        self.assertEqual(self.running("bob-1", lambda: read(__file__)[:3]), b'"""', "files outside the host's folders")
        self.assertEqual(self.running("guest-1", lambda: os.listdir(os.path.join(self.root, "input", GUEST))), [])
        self.server.queue("bob-1", {"authsvc_folder": BOB})  # queued again: the worker has run guest-1 since
        # the existence checks custom nodes make say "missing" for her file, "there" for his
        self.assertEqual(self.running("bob-1", lambda: (os.path.exists(self.hers), os.path.isfile(self.his))), (False, True))
        # his own link to her file is his to remove (the call acts on the link, not on her file)
        own_link = os.path.join(self.root, "output", BOB, "to-hers.lnk")
        os.symlink(self.hers, own_link)
        self.running("bob-1", lambda: os.unlink(own_link))
        self.assertEqual(read(self.hers), b"hers")
        # a path the kernel refuses as too long is the kernel's to refuse
        with self.assertRaises(OSError) as caught:
            self.running("bob-1", lambda: read(os.path.join(self.root, "output", ALICE) + "/." * 3000 + "/a_00001_.png"))
        self.assertNotIsInstance(caught.exception, PermissionError)

    def test_admins_prompts_and_other_threads_are_not_judged(self) -> None:
        self.assertEqual(self.running("admin-1", lambda: read(self.hers)), b"hers")
        self.server.last_prompt_id = "bob-1"
        self.assertEqual(read(self.hers), b"hers", "the server's own thread (GET /view for alice) while bob's prompt runs")
        # a thread named like ComfyUI's worker is not the worker: only the one that takes prompts is
        out: dict[str, bytes] = {}
        namesake = threading.Thread(target=lambda: out.update(read=read(self.hers)), name="Thread-7 (prompt_worker)")
        namesake.start()
        namesake.join()
        self.assertEqual(out, {"read": b"hers"})

    def test_a_prompt_without_a_record_or_with_a_bad_stamp_has_no_folder(self) -> None:
        for prompt_id in ("never-recorded", "unstamped", "bad-stamp", None):
            self.assert_refused(prompt_id, lambda: read(self.hers), str(prompt_id))  # type: ignore[arg-type]
            self.assertEqual(self.running(prompt_id, lambda: read(self.shared)), b"shared")  # type: ignore[arg-type]

    def test_records_come_from_the_queue_and_go_once_the_worker_moved_on(self) -> None:
        server = Server()
        guard = run_guard.RunGuard(server, lambda: [])
        guard.install()
        server.queue("a", {"authsvc_folder": None, "authsvc_models": None})
        self.assertFalse(guard._guarding, "administrators' prompts alone replace no function")
        self.assertEqual(server.prompt_queue.items, [(1, "a", {}, {"authsvc_folder": None, "authsvc_models": None}, [])], "the host's queue gets the item unchanged")
        server.queue("no-models-key", {"authsvc_folder": None})
        self.assertTrue(guard._guarding, "a stamp without authsvc_models grants no model: the guard is on")
        self.assertEqual(guard.record_of("no-models-key"), (None, {}), "a missing models stamp is no model")
        server.queue("p", {"authsvc_folder": BOB})
        server.queue(12, "not an object")
        self.assertEqual((guard.folder_of("p"), guard.folder_of("12")), (BOB, ""), "a stamp that is not an object: no folder")
        self.assertEqual(guard.folder_of("p"), "", "p's record went when the worker moved on to 12")
        # an owner may queue one prompt_id again: each run has its record, even with another prompt run between
        for prompt_id in ("dup", "mid", "dup"):
            server.queue(prompt_id, {"authsvc_folder": BOB, "authsvc_models": None})
        self.assertEqual([guard.record_of(i) for i in ("dup", "mid", "dup")], [(BOB, None)] * 3)
        self.assertEqual(guard.record_of("n-other"), ("", {}), "and then it is gone")
        self.assertEqual(guard.record_of("dup"), ("", {}))
        old = run_guard.KEPT
        run_guard.KEPT = 3
        try:
            for i in range(5):
                server.queue(f"n{i}", {"authsvc_folder": None, "authsvc_models": None})
        finally:
            run_guard.KEPT = old
        self.assertEqual([guard.folder_of(f"n{i}") for i in (2, 3, 4)], [None, None, None])
        self.assertEqual(guard.folder_of("n0"), "", "beyond the bound, the oldest went first")


class ModelGrantsAtRunTimeTest(unittest.TestCase):
    """A prompt whose owner is limited to granted models (``authsvc_models``) loads no other model,
    whatever name it computed: real model folders in a temp dir, named by the host's folder map."""

    def setUp(self) -> None:
        self.guard, self.server, base = guard_for_tests()
        m = os.path.join(base, "models")
        shutil.rmtree(m, ignore_errors=True)
        shutil.rmtree(os.path.join(base, "nas"), ignore_errors=True)
        self.m = m
        files = {
            "loras/granted.safetensors": b"granted", "loras/secret.safetensors": b"secret", "loras/notes.txt": b"notes",
            "loras/sub/deep.safetensors": b"deep", "embeddings/ok.pt": b"ok", "embeddings/private/hidden.pt": b"hidden",
            "diffusers/pipe_ok/model_index.json": b"{}", "diffusers/pipe_ok/unet/w.safetensors": b"ok-w",
            "diffusers/pipe_no/model_index.json": b"{}", "diffusers/pipe_no/unet/w.safetensors": b"no-w",
            "anything/x.bin": b"any", "anything/sub/y.bin": b"any-y", "custom/x.safetensors": b"node",
            "pipes/model_index.json": b"{}", "pipes/unet/w.safetensors": b"root-w",
            "loras/.authsvc-partial/job1.authsvc-partial": b"arriving",
        }
        for rel, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(m, rel)), exist_ok=True)
            with open(os.path.join(m, rel), "wb") as f:
                f.write(data)
        os.makedirs(os.path.join(base, "nas"))
        with open(os.path.join(base, "nas", "far.safetensors"), "wb") as f:
            f.write(b"far")
        os.symlink(os.path.join(base, "nas"), os.path.join(m, "loras", "nas"))  # a folder kept elsewhere, linked in
        os.symlink(os.path.join(m, "loras", "secret.safetensors"), os.path.join(m, "loras", "alias.safetensors"))
        self.mine = os.path.join(base, "output", BOB, "mine.safetensors")
        os.makedirs(os.path.dirname(self.mine), exist_ok=True)
        if os.path.lexists(self.mine):
            os.remove(self.mine)
        os.symlink(os.path.join(m, "loras", "secret.safetensors"), self.mine)  # bob's own link to a model
        _installed["model_folders"] = {
            "loras": ([os.path.join(m, "loras")], {".safetensors", ".PT"}),
            "embeddings": ([os.path.join(m, "embeddings")], {".pt", ".safetensors", ".bin"}),
            "diffusers": ([os.path.join(m, "diffusers")], {"folder"}),
            "anything": ([os.path.join(m, "anything")], set()),
            "custom_nodes": ([os.path.join(m, "custom")], set()),
            # a folder nested in another (as ultralytics and ultralytics_bbox are)
            "loras_sub": ([os.path.join(m, "loras", "sub")], {".safetensors"}),
            # a Diffusers model that is the folder itself (the host lists it as ".")
            "pipes": ([pathlib.Path(m, "pipes")], {"folder"}),
        }
        grants = {"loras": ["granted.safetensors", "alias.safetensors"], "embeddings": ["ok.pt"], "diffusers": ["pipe_ok"]}
        self.server.queue("limited", {"authsvc_folder": BOB, "authsvc_models": grants})
        self.server.queue("limited-no-folder", {"authsvc_folder": None, "authsvc_models": grants})
        self.server.queue("every-model", {"authsvc_folder": BOB, "authsvc_models": None})
        self.server.queue("no-models-key", {"authsvc_folder": BOB})
        self.server.queue("models-not-an-object", {"authsvc_folder": BOB, "authsvc_models": ["loras"]})
        self.server.queue("admin-1", {"authsvc_folder": None, "authsvc_models": None})
        # a subfolder's model granted in the outer folder, or in the nested one; the folder-model granted ("" is "." in host-path form)
        self.server.queue("nested-outer", {"authsvc_folder": BOB, "authsvc_models": {"loras": ["sub/deep.safetensors"], "pipes": [""]}})
        self.server.queue("nested-inner", {"authsvc_folder": BOB, "authsvc_models": {"loras_sub": ["deep.safetensors"]}})

    def tearDown(self) -> None:
        self.server.last_prompt_id = "admin-1"
        _installed.pop("model_folders", None)

    def running(self, prompt_id: str, fn: Callable[[], Any]) -> Any:
        self.server.last_prompt_id = prompt_id
        return on_worker(fn)

    def p(self, rel: str) -> str:
        return os.path.join(self.m, rel)

    def test_granted_models_and_files_that_are_not_models_are_read(self) -> None:
        for rel, data in (("loras/granted.safetensors", b"granted"), ("loras/notes.txt", b"notes"), ("embeddings/ok.pt", b"ok"),
                          ("diffusers/pipe_ok/unet/w.safetensors", b"ok-w"), ("custom/x.safetensors", b"node")):
            with self.subTest(rel=rel):
                self.assertEqual(self.running("limited", lambda: read(self.p(rel))), data)  # type: ignore[misc]
        self.assertIn("secret.safetensors", self.running("limited", lambda: os.listdir(self.p("loras"))), "listing a model folder is not refused")
        # folders are never models: the host walks and dates them (get_filename_list), Diffusers models' too
        self.assertEqual(sorted(self.running("limited", lambda: os.listdir(self.p("diffusers/pipe_no")))), ["model_index.json", "unet"])
        self.assertTrue(self.running("limited", lambda: os.path.isdir(self.p("diffusers/pipe_no"))))
        self.assertGreater(self.running("limited", lambda: os.path.getmtime(self.p("anything/sub"))), 0)

    def test_a_model_is_granted_by_any_folder_that_lists_it(self) -> None:
        for prompt_id in ("nested-outer", "nested-inner"):
            with self.subTest(prompt_id=prompt_id):
                self.assertEqual(self.running(prompt_id, lambda: read(self.p("loras/sub/deep.safetensors"))), b"deep")
        self.assertEqual(self.running("nested-outer", lambda: read(self.p("pipes/unet/w.safetensors"))), b"root-w", "the folder-model granted as \".\"")
        with self.assertRaises(PermissionError):
            self.running("nested-inner", lambda: read(self.p("pipes/unet/w.safetensors")))

    def test_a_folder_entry_the_guard_cannot_read_leaves_out_itself_only(self) -> None:
        secret = self.p("loras/secret.safetensors")
        folders = _installed["model_folders"]
        for name, entry in (("broken", ([self.p("anything")],)), ("nul", (["/tmp/x\0y"], {".bin"})), ("none", ([self.p("custom")], None))):
            folders[name] = entry  # type: ignore[assignment]
            with self.subTest(entry=name), self.assertRaises(PermissionError):
                self.running("limited", lambda: read(secret))
        self.assertEqual(self.running("limited", lambda: read(self.p("loras/notes.txt"))), b"notes", "nothing else fails")

    def test_a_model_not_granted_is_missing_and_cannot_be_opened_or_written(self) -> None:
        rows: list[tuple[str, Callable[[], Any]]] = [
            ("open", lambda: read(self.p("loras/secret.safetensors"))),
            ("a subfolder's model", lambda: read(self.p("loras/sub/deep.safetensors"))),
            ("an extension in another case", lambda: read(self.p("loras/secret.safetensors").replace(".safetensors", ".pt"))),
            ("spelled through another folder and ..", lambda: read(os.path.join(self.root_input(), "..", "models", "loras", "secret.safetensors"))),
            ("relative to the working folder", lambda: read(os.path.relpath(self.p("loras/secret.safetensors")))),
            ("pathlib", lambda: pathlib.Path(self.p("loras/secret.safetensors")).read_bytes()),
            ("io.open", lambda: io.open(self.p("loras/secret.safetensors"), "rb").read()),
            ("os.open", lambda: os.open(self.p("loras/secret.safetensors"), os.O_RDONLY)),
            ("the owner's own link to it", lambda: read(self.mine)),
            ("a granted link to it in the folder", lambda: read(self.p("loras/alias.safetensors"))),
            ("a linked-in folder's model", lambda: read(self.p("loras/nas/far.safetensors"))),
            ("an embedding in a subfolder", lambda: read(self.p("embeddings/private/hidden.pt"))),
            ("a Diffusers folder's file", lambda: read(self.p("diffusers/pipe_no/unet/w.safetensors"))),
            ("a Diffusers folder's marker", lambda: read(self.p("diffusers/pipe_no/model_index.json"))),
            ("a Diffusers model that is its folder itself", lambda: read(self.p("pipes/unet/w.safetensors"))),
            ("a download still arriving (any extension)", lambda: read(self.p("loras/.authsvc-partial/job1.authsvc-partial"))),
            ("a native safetensors open", lambda: sys.modules["safetensors"].safe_open(self.p("loras/secret.safetensors"), framework="pt")),
            ("a file of a folder that takes every file", lambda: read(self.p("anything/x.bin"))),
            ("a new model written into a folder", lambda: open(self.p("loras/planted.safetensors"), "wb")),
            ("a model renamed into a folder", lambda: os.rename(self.p("loras/notes.txt"), self.p("loras/notes.safetensors"))),
            ("a model copied out", lambda: shutil.copyfile(self.p("loras/secret.safetensors"), self.p("loras/copy.txt"))),
        ]
        for what, fn in rows:
            with self.subTest(what=what):
                with self.assertRaises(PermissionError) as caught:
                    self.running("limited", fn)
                self.assertIn("may not use the model", str(caught.exception))
        self.assertFalse(os.path.exists(self.p("loras/planted.safetensors")), "nothing was written")
        self.assertTrue(os.path.exists(self.p("loras/notes.txt")), "nothing was renamed")
        # how the host finds a model (folder_paths.get_full_path, load_embed): the file is missing
        for rel in ("loras/secret.safetensors", "embeddings/private/hidden.pt", "diffusers/pipe_no/unet/w.safetensors"):
            with self.subTest(missing=rel):
                self.assertFalse(self.running("limited", lambda: os.path.exists(self.p(rel))))  # type: ignore[misc]
        self.assertTrue(self.running("limited", lambda: os.path.isfile(self.p("embeddings/ok.pt"))))

    def root_input(self) -> str:
        return os.path.join(_installed["base"], "input")

    def test_the_stamp_decides_and_other_threads_are_untouched(self) -> None:
        secret = self.p("loras/secret.safetensors")
        self.assertEqual(self.running("every-model", lambda: read(secret)), b"secret", "null: every model")
        self.assertEqual(self.running("admin-1", lambda: read(secret)), b"secret")
        for prompt_id in ("limited-no-folder", "no-models-key", "models-not-an-object"):
            with self.subTest(prompt_id=prompt_id), self.assertRaises(PermissionError):
                self.running(prompt_id, lambda: read(secret))
        self.assertEqual(self.running("models-not-an-object", lambda: read(self.p("loras/notes.txt"))), b"notes")
        # a package adds an extension to a folder after start (as GGUF loaders do): its files are models from then on
        with open(self.p("loras/late.gguf"), "wb") as f:
            f.write(b"late")
        self.assertEqual(self.running("limited", lambda: read(self.p("loras/late.gguf"))), b"late", "not a model yet")
        _installed["model_folders"]["loras"][1].add(".gguf")
        with self.assertRaises(PermissionError):
            self.running("limited", lambda: read(self.p("loras/late.gguf")))
        self.server.last_prompt_id = "limited"
        self.assertEqual(read(secret), b"secret", "the host's other threads read it")


class AuthsvcOwnFilesAndCodeTest(unittest.TestCase):
    """No prompt of a user who does not see everything touches authsvc's own files (the store, the
    signing secret, the sockets: reading the secret makes anyone an administrator) or changes the
    code the host imports at its next start (custom nodes, this package), whatever path it computed."""

    def setUp(self) -> None:
        self.guard, self.server, base = guard_for_tests()
        self.data = os.path.join(base, "user", "authsvc")
        self.nodes = os.path.join(base, "custom_nodes")
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.rmtree(self.nodes, ignore_errors=True)
        os.makedirs(self.data)
        os.makedirs(os.path.join(self.nodes, "some_pack"))
        self.secret = os.path.join(self.data, "authsvc_secret.key")
        with open(self.secret, "wb") as f:
            f.write(b"the signing secret")
        self.node = os.path.join(self.nodes, "some_pack", "__init__.py")
        with open(self.node, "w") as f:
            f.write("NODE_CLASS_MAPPINGS = {}\n")
        link = os.path.join(base, "output", BOB, "key-link")
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(self.secret, link)
        self.link = link
        _installed["private"] = (self.data,)
        _installed["code"] = (self.nodes,)
        # the host's own folder (its code, extra_model_paths.yaml) with its writable folders inside
        _installed["host_code"] = (base,)
        _installed["writable"] = tuple(os.path.join(base, t) for t in ("input", "output", "temp", "models"))
        os.makedirs(os.path.join(base, "models", "loras"), exist_ok=True)
        # a pack that is a link to elsewhere
        self.elsewhere = os.path.join(base, "elsewhere_pack")
        shutil.rmtree(self.elsewhere, ignore_errors=True)
        os.makedirs(self.elsewhere)
        os.symlink(self.elsewhere, os.path.join(self.nodes, "linked_pack"))
        self.server.queue("bob-x", {"authsvc_folder": BOB, "authsvc_models": None})
        self.server.queue("limited-x", {"authsvc_folder": None, "authsvc_models": {}})
        self.server.queue("admin-1", {"authsvc_folder": None, "authsvc_models": None})

    def tearDown(self) -> None:
        self.server.last_prompt_id = "admin-1"
        for key in ("private", "code", "host_code", "writable"):
            _installed.pop(key, None)

    def running(self, prompt_id: str, fn: Callable[[], Any]) -> Any:
        self.server.last_prompt_id = prompt_id
        return on_worker(fn)

    def test_authsvc_own_files_are_nobody_s_but_the_administrators(self) -> None:
        base = _installed["base"]
        rows: list[tuple[str, Callable[[], Any]]] = [
            ("read the secret", lambda: read(self.secret)),
            ("through a link in his own folder", lambda: read(self.link)),
            ("spelled through another folder and ..", lambda: read(os.path.join(base, "input", "..", "user", "authsvc", "authsvc_secret.key"))),
            ("list the data dir", lambda: os.listdir(self.data)),
            ("overwrite the store", lambda: open(os.path.join(self.data, "authsvc.sqlite"), "wb")),
            ("remove the secret", lambda: os.remove(self.secret)),
            ("a native read", lambda: sys.modules["safetensors"].safe_open(self.secret)),
            ("copy it out", lambda: shutil.copyfile(self.secret, os.path.join(base, "output", BOB, "copy.txt"))),
            ("relative to a descriptor of its parent", lambda: os.open("authsvc/authsvc_secret.key", os.O_RDONLY, dir_fd=os.open(os.path.join(base, "user"), os.O_RDONLY))),
            ("its parent moved away, to read it there", lambda: os.rename(os.path.join(base, "user"), os.path.join(base, "output", BOB, "moved"))),
            ("its parent removed", lambda: shutil.rmtree(os.path.join(base, "user"))),
            ("the store opened by sqlite", lambda: sys.modules["sqlite3"].connect(os.path.join(self.data, "authsvc.sqlite"))),
            ("the store by a file: URI", lambda: sys.modules["sqlite3"].connect(f"file:{self.data}/authsvc.sqlite?mode=ro", uri=True)),
        ]
        for prompt_id in ("bob-x", "limited-x"):
            for what, fn in rows:
                with self.subTest(prompt_id=prompt_id, what=what):
                    with self.assertRaises(PermissionError) as caught:
                        self.running(prompt_id, fn)
                    self.assertIn("authsvc's own files", str(caught.exception))
            self.assertFalse(self.running(prompt_id, lambda: os.path.exists(self.secret)), "to a prompt, it is not there")
        self.assertEqual(read(self.secret), b"the signing secret", "nothing changed")
        self.assertEqual(self.running("admin-1", lambda: read(self.secret)), b"the signing secret", "an administrator's prompt is not judged")
        self.server.last_prompt_id = "bob-x"
        self.assertEqual(read(self.secret), b"the signing secret", "the host's other threads (the plugin itself) read it")

    def test_custom_nodes_are_read_but_never_changed(self) -> None:
        pack = os.path.join(self.nodes, "some_pack")
        self.assertEqual(self.running("bob-x", lambda: read(self.node)), b"NODE_CLASS_MAPPINGS = {}\n", "reading a node's files is not refused")
        self.assertIn("__init__.py", self.running("bob-x", lambda: os.listdir(pack)))
        rows: list[tuple[str, Callable[[], Any]]] = [
            ("open for writing", lambda: open(self.node, "w")),
            ("open for appending", lambda: open(self.node, "a")),
            ("open to read and write", lambda: open(self.node, "r+")),
            ("a new file", lambda: open(os.path.join(pack, "evil.py"), "x")),
            ("io.open", lambda: io.open(self.node, mode="wb")),
            ("os.open for writing", lambda: os.open(self.node, os.O_WRONLY)),
            ("os.open creating", lambda: os.open(os.path.join(pack, "evil.py"), os.O_CREAT | os.O_RDONLY)),
            ("a new pack", lambda: os.mkdir(os.path.join(self.nodes, "evil_pack"))),
            ("a file renamed in", lambda: os.rename(os.path.join(_installed["base"], "input", "shared.png"), os.path.join(pack, "x.py"))),
            ("a link made in", lambda: os.symlink("/etc/passwd", os.path.join(pack, "x.py"))),
            ("removed", lambda: os.remove(self.node)),
            ("pathlib", lambda: pathlib.Path(pack, "evil.py").write_text("import os")),
            ("shutil", lambda: shutil.copyfile(self.node, os.path.join(pack, "copy.py"))),
            ("relative to a descriptor of the folder", lambda: os.open("evil2.py", os.O_CREAT | os.O_WRONLY, dir_fd=os.open(pack, os.O_RDONLY))),
            ("the folder removed, the way rmtree walks it", lambda: shutil.rmtree(pack)),
            ("the folder moved away", lambda: os.rename(self.nodes, os.path.join(_installed["base"], "output", BOB, "nodes"))),
            ("a pack that is a link, through its real path", lambda: open(os.path.join(self.elsewhere, "__init__.py"), "w")),
            ("an archive extracted into it", lambda: self.extract_into(pack)),
        ]
        for what, fn in rows:
            with self.subTest(what=what):
                with self.assertRaises(PermissionError) as caught:
                    self.running("bob-x", fn)
                self.assertIn("may not change the host's custom nodes", str(caught.exception))
        self.assertEqual(sorted(os.listdir(pack)), ["__init__.py"])
        self.assertEqual(read(self.node), b"NODE_CLASS_MAPPINGS = {}\n")
        fd = self.running("admin-1", lambda: os.open(os.path.join(pack, "admins.py"), os.O_CREAT | os.O_WRONLY))
        os.close(fd)

    def extract_into(self, folder: str) -> None:
        import tarfile

        archive = os.path.join(_installed["base"], "output", BOB, "pack.tar")
        with tarfile.open(archive, "w") as tar:
            tar.add(self.node, arcname="evil.py")
        with tarfile.open(archive) as tar:
            tar.extractall(folder)

    def test_the_host_s_code_and_configuration_are_never_changed_its_data_folders_are_written(self) -> None:
        base = _installed["base"]
        for what, fn in (
            ("extra_model_paths.yaml (a custom_nodes entry pointing at his folder)", lambda: open(os.path.join(base, "extra_model_paths.yaml"), "w")),
            ("a file of the host's code", lambda: open(os.path.join(base, "main.py"), "a")),
            ("the user folder (other packages' startup scripts)", lambda: os.makedirs(os.path.join(base, "user", "default", "startup-scripts"))),
        ):
            with self.subTest(what=what), self.assertRaises(PermissionError) as caught:
                self.running("bob-x", fn)
            self.assertIn("may not change the host's code or configuration", str(caught.exception))
        self.assertFalse(os.path.exists(os.path.join(base, "extra_model_paths.yaml")))
        # its data folders: his own outputs, a first-use download into a model folder
        def writes() -> None:
            with open(os.path.join(base, "output", BOB, "mine.txt"), "w") as f:
                f.write("ok")
            with open(os.path.join(base, "models", "loras", "downloaded.bin"), "wb") as f:
                f.write(b"weights")
        self.running("bob-x", writes)
        self.assertTrue(os.path.exists(os.path.join(base, "models", "loras", "downloaded.bin")))

    def test_a_process_s_environment_and_memory_are_not_read(self) -> None:
        for path in ("/proc/self/environ", f"/proc/{os.getpid()}/environ", "/proc/thread-self/environ", "/proc/self/mem"):
            with self.subTest(path=path), self.assertRaises(PermissionError):
                self.running("bob-x", lambda: read(path))
        self.assertIn(b"MemTotal", self.running("bob-x", lambda: read("/proc/meminfo")), "what psutil reads stays readable")
        self.assertTrue(self.running("bob-x", lambda: read("/proc/self/cmdline")), "and a process's arguments (psutil's cmdline)")

    def test_what_a_prompt_does_legitimately_still_works(self) -> None:
        import subprocess
        import tempfile

        base = _installed["base"]
        # pipes: a descriptor that names no path (subprocess opens its pipes with io.open(fd))
        self.assertEqual(self.running("bob-x", lambda: subprocess.run(["echo", "hi"], capture_output=True).stdout), b"hi\n")
        # a temporary file where a protected folder lives below (the socket folder in /tmp)
        _installed["private"] = (self.data, os.path.join(tempfile.gettempdir(), "authsvc-test-sockets"))
        with self.running("bob-x", lambda: tempfile.TemporaryFile()) as f:
            f.write(b"x")
        # a first-use download into a model folder no pack registered
        _installed["writable"] = (*_installed["writable"], os.path.join(base, "models"))
        self.running("bob-x", lambda: os.makedirs(os.path.join(base, "models", "insightface", "buffalo_l"), exist_ok=True))
        # an existing folder made again: FileExistsError, as code that catches it expects
        with self.assertRaises(FileExistsError):
            self.running("bob-x", lambda: os.mkdir(base))
        # sqlite in memory, and a read-only open of his own file
        self.assertEqual(self.running("bob-x", lambda: sys.modules["sqlite3"].connect(":memory:").execute("select 1").fetchone()), (1,))

    def test_a_link_in_a_writable_folder_does_not_exempt_where_it_leads(self) -> None:
        base = _installed["base"]
        out = os.path.join(base, "output", BOB)
        for name, target in (("root", "/"), ("up", "../../../../../../../..")):
            link = os.path.join(out, name)
            if os.path.lexists(link):
                os.remove(link)
            self.running("bob-x", lambda: os.symlink(target, link))
            with self.subTest(target=target), self.assertRaises(PermissionError):
                self.running("bob-x", lambda: open(link + os.path.join(base, "extra_model_paths.yaml"), "w"))
        self.assertFalse(os.path.exists(os.path.join(base, "extra_model_paths.yaml")))

    def test_sqlite_spellings_of_the_store(self) -> None:
        db = os.path.join(self.data, "authsvc.sqlite")
        sqlite3 = sys.modules["sqlite3"]
        for what, fn in (
            ("%00 ends the path for sqlite", lambda: sqlite3.connect(f"file:{db}%00x?mode=ro", uri=True)),
            ("a bytes URI", lambda: sqlite3.connect(os.fsencode(f"file:{db}?mode=ro"), uri=True)),
            ("a PathLike URI", lambda: sqlite3.connect(pathlib.Path(f"file:{db}?mode=ro"), uri=True)),
        ):
            with self.subTest(what=what), self.assertRaises(PermissionError):
                self.running("bob-x", fn)
        with self.assertRaises(PermissionError) as caught:
            self.running("bob-x", lambda: sqlite3.connect(os.path.join(self.nodes, "some_pack", "x.db")))
        self.assertIn("custom nodes", str(caught.exception), "a new database is a write")


if __name__ == "__main__":
    unittest.main()


class ResolveBudget(unittest.TestCase):
    """host_paths.resolve: a message that takes longer than its budget is an error (the sidecar
    refuses), and the folders a name's walk passes through are reported (not its last part)."""

    def test_over_budget_and_entered(self) -> None:
        host_paths = plugin_module("host_paths")
        saved = host_paths._folder_paths
        # folders nowhere: the budget is spent before the first item is resolved
        host_paths._folder_paths = lambda: types.SimpleNamespace(get_directory_by_type=lambda kind: None)
        try:
            with self.assertRaises(host_paths.OverBudget):
                host_paths.resolve([{"op": "view", "query": "filename=a.png"}] * 2, budget_s=-1)
        finally:
            host_paths._folder_paths = saved
        self.assertEqual(host_paths.entered("/r/input/u_a/x/../../b.png", "/r/input"), ["u_a"])
        self.assertEqual(host_paths.entered("/r/input/u_a", "/r/input"), [], "the place itself is not passed through")
        self.assertEqual(host_paths.entered("/r/INPUT/u_a/..", "/r/input"), ["u_a"], "without case; .. walks the folder too")
        self.assertEqual(host_paths.entered("/r/input/./b/../u_c/d.png", "/r/input"), ["b", "u_c"])
