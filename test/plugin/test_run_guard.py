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
import unittest
from typing import Any, Callable

from .support import plugin_module

run_guard = plugin_module("run_guard")

ALICE = "u_0a1b2c3d-0000-4000-8000-00000000000a"
BOB = "u_0a1b2c3d-0000-4000-8000-00000000000b"
GUEST = "o_0123456789abcdef"


class Server:
    """What the guard reads of ComfyUI's PromptServer."""

    def __init__(self) -> None:
        self.last_prompt_id: Any = None
        self.handlers: list[Callable[[Any], Any]] = []

    def add_on_prompt_handler(self, handler: Callable[[Any], Any]) -> None:
        self.handlers.append(handler)


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
    """Runs `fn` on a thread named as ComfyUI's prompt worker (`Thread-N (prompt_worker)`)."""
    out: dict[str, Any] = {}

    def prompt_worker() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    # the guard learns the worker's identity once, as in the host where the worker never ends
    worker = _installed.setdefault("worker", _Worker())
    return worker.run(prompt_worker, out)


class _Worker:
    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], None], threading.Event]] = []
        self.cv = threading.Condition()
        threading.Thread(target=self._loop, name="Thread-99 (prompt_worker)", daemon=True).start()

    def _loop(self) -> None:
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
        for handler in self.server.handlers:
            handler({"prompt_id": "bob-1", "prompt": {}, "extra_data": {"authsvc_folder": BOB}})
            handler({"prompt_id": "admin-1", "prompt": {}, "extra_data": {"authsvc_folder": None}})
            handler({"prompt_id": "guest-1", "prompt": {}, "extra_data": {"authsvc_folder": GUEST}})
            handler({"prompt_id": "unstamped", "prompt": {}, "extra_data": {}})
            handler({"prompt_id": "bad-stamp", "prompt": {}, "extra_data": {"authsvc_folder": 7}})

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
        ]
        for what, fn in rows:
            self.assert_refused("bob-1", fn, what)
        self.assertEqual(read(self.hers), b"hers")
        self.assertEqual(sorted(os.listdir(her_dir)), ["a_00001_.png"], "nothing was planted, moved or copied in")
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

    def test_admins_prompts_and_other_threads_are_not_judged(self) -> None:
        self.assertEqual(self.running("admin-1", lambda: read(self.hers)), b"hers")
        self.server.last_prompt_id = "bob-1"
        self.assertEqual(read(self.hers), b"hers", "the server's own thread (GET /view for alice) while bob's prompt runs")

    def test_a_prompt_without_a_record_or_with_a_bad_stamp_has_no_folder(self) -> None:
        for prompt_id in ("never-recorded", "unstamped", "bad-stamp", None):
            self.assert_refused(prompt_id, lambda: read(self.hers), str(prompt_id))  # type: ignore[arg-type]
            self.assertEqual(self.running(prompt_id, lambda: read(self.shared)), b"shared")  # type: ignore[arg-type]

    def test_on_prompt_returns_the_body_and_keeps_a_bounded_record(self) -> None:
        guard = run_guard.RunGuard(Server(), lambda: [])
        guard.on_prompt({"prompt_id": "a", "extra_data": {"authsvc_folder": None}})
        self.assertFalse(guard._guarding, "administrators' prompts alone replace no function")
        body = {"prompt_id": "p", "extra_data": {"authsvc_folder": BOB}}
        self.assertIs(guard.on_prompt(body), body)
        self.assertEqual(guard.folder_of("p"), BOB)
        self.assertIsNone(guard.on_prompt(None))
        self.assertEqual(guard.on_prompt({"extra_data": {"authsvc_folder": BOB}}), {"extra_data": {"authsvc_folder": BOB}})
        guard.on_prompt({"prompt_id": 12, "extra_data": "x"})
        self.assertEqual(guard.folder_of("12"), "", "a stamp that is not an object: no folder")
        old = run_guard.KEPT
        run_guard.KEPT = 3
        try:
            for i in range(5):
                guard.on_prompt({"prompt_id": f"n{i}", "extra_data": {"authsvc_folder": None}})
        finally:
            run_guard.KEPT = old
        self.assertEqual([guard.folder_of(f"n{i}") for i in range(5)], ["", "", None, None, None])


if __name__ == "__main__":
    unittest.main()
