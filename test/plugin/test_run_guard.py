"""run_guard.py: on the host's prompt worker thread, a running prompt of a user who does not see
everything touches nothing inside another per-user folder, whatever path it computed: real
files in a temp dir, real opens, listings, renames, copies and symlinks, through the guarded
functions installed for real (os, io, builtins, and what pathlib, shutil and glob call). Other
threads, administrators' prompts and one's own or shared files are untouched."""
from __future__ import annotations

import glob
import io
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
        guard = run_guard.RunGuard(server, lambda: roots)
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
        self.server.queue("admin-1", {"authsvc_folder": None})
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
        server.queue("a", {"authsvc_folder": None})
        self.assertFalse(guard._guarding, "administrators' prompts alone replace no function")
        self.assertEqual(server.prompt_queue.items, [(1, "a", {}, {"authsvc_folder": None}, [])], "the host's queue gets the item unchanged")
        server.queue("p", {"authsvc_folder": BOB})
        server.queue(12, "not an object")
        self.assertEqual((guard.folder_of("p"), guard.folder_of("12")), (BOB, ""), "a stamp that is not an object: no folder")
        self.assertEqual(guard.folder_of("p"), "", "p's record went when the worker moved on to 12")
        old = run_guard.KEPT
        run_guard.KEPT = 3
        try:
            for i in range(5):
                server.queue(f"n{i}", {"authsvc_folder": None})
        finally:
            run_guard.KEPT = old
        self.assertEqual([guard.folder_of(f"n{i}") for i in (2, 3, 4)], [None, None, None])
        self.assertEqual(guard.folder_of("n0"), "", "beyond the bound, the oldest went first")


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
