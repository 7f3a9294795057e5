"""Issue 14 in the plugin: the 503 page for browsers (JSON for everyone else), the unsupported
platform, the build checks, and a supervisor that reports a lasting cause once and retries it slowly.

The supervisor runs the real node on a small package made here: a ``sidecar/dist/main.js``
that records each start (a timestamp per line) and fails the way a broken sidecar does.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import unittest
from typing import Any, Iterator
from unittest import mock

from .support import LOGS, ROOT, PluginCase, load_plugin, unload_plugin, wait_for

NODE = shutil.which("node")
NAVIGATE = {"Sec-Fetch-Mode": "navigate", "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def assert_json_503(case: unittest.TestCase, status: int, headers: Any, body: bytes) -> None:
    case.assertEqual(status, 503)
    case.assertTrue(headers.get("Content-Type", "").startswith("application/json"), headers.get("Content-Type"))
    case.assertEqual(json.loads(body)["code"], "AUTHSVC_UNAVAILABLE")


class Page(PluginCase):
    async def test_navigation_gets_the_page_api_clients_the_json(self) -> None:
        s = await self.start(sidecar=False, wait=False)
        status, headers, body = await s.get("/prompt", headers=NAVIGATE)
        self.assertEqual(status, 503)
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        self.assertIn(b"authsvc is starting", body)
        self.assertIn(b'<meta http-equiv="refresh"', body)
        # Accept alone decides when there is no Sec-Fetch-Mode (SPEC §1)
        status, headers, body = await s.get("/", headers={"Accept": "text/html"})
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        for api in ({}, {"Accept": "application/json"}, {"Accept": "text/html, application/json"},
                    {"Sec-Fetch-Mode": "cors", "Accept": "*/*"}):
            assert_json_503(self, *(await s.get("/prompt", headers=api)))
        self.assertEqual(sum(s.host.calls.values()), 0, s.host.calls)

    async def test_setup_failure_page_names_the_log_line(self) -> None:
        s = await self.start(sidecar=False, wait=False, env={"AUTHSVC_DECISION_TIMEOUT_MS": "soon"})
        status, _, body = await s.get("/", headers=NAVIGATE)
        self.assertEqual(status, 503)
        self.assertIn(b"authsvc could not start", body)
        self.assertIn(b"authsvc: setup failed", body)
        assert_json_503(self, *(await s.get("/prompt")))

    async def test_unsupported_platform_fails_closed_with_the_page_and_one_line(self) -> None:
        # sys.platform is read only while the plugin loads: the server itself runs as usual
        original_load = load_plugin

        def load_on_windows(app: Any, env: Any) -> Any:
            with mock.patch.object(sys, "platform", "win32"):
                return original_load(app, env)

        with mock.patch(f"{__package__}.support.load_plugin", load_on_windows):
            s = await self.start(sidecar=False, wait=False)
        status, _, body = await s.get("/", headers=NAVIGATE)
        self.assertEqual(status, 503)
        self.assertIn(b"does not run on this platform yet (win32", body)
        self.assertIn(b"docs/platforms.md", body)
        self.assertNotIn(b'http-equiv="refresh"', body)  # nothing will change by itself
        assert_json_503(self, *(await s.get("/prompt")))
        errors = LOGS.lines(logging.ERROR)
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("does not run on this platform", errors[0])
        self.assertFalse(any(r.exc_info for r in LOGS.records), "a stack trace was logged")
        self.assertEqual(sum(s.host.calls.values()), 0)


# --------------------------------------------------------------------------- a small package


def _state() -> Any:
    """install_state as the plugin loads it (stdlib only, so by path is fine)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("authsvc_test_install_state", os.path.join(ROOT, "host-plugin", "install_state.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


STATE = _state()


def make_package(root: str, main_js: str, *, built: bool = True) -> None:
    os.makedirs(os.path.join(root, "sidecar", "src"), exist_ok=True)
    os.makedirs(os.path.join(root, "node_modules"), exist_ok=True)
    with open(os.path.join(root, "package.json"), "w") as f:
        json.dump({"name": "pkg", "version": "1.0.0"}, f)
    lock = {"name": "pkg", "version": "1.0.0", "lockfileVersion": 3, "packages": {
        "": {"name": "pkg", "version": "1.0.0"},
        "node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"},
        "node_modules/a-linux-only": {"version": "1.0.0", "integrity": "sha512-b", "optional": True},
    }}
    with open(os.path.join(root, "package-lock.json"), "w") as f:
        json.dump(lock, f)
    with open(os.path.join(root, "node_modules", ".package-lock.json"), "w") as f:
        json.dump({"packages": {"node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"}}}, f)
    with open(os.path.join(root, "sidecar", "tsconfig.json"), "w") as f:
        f.write("{}")
    with open(os.path.join(root, "sidecar", "src", "main.ts"), "w") as f:
        f.write("export {}\n")
    if built:
        dist = os.path.join(root, "sidecar", "dist")
        os.makedirs(dist, exist_ok=True)
        with open(os.path.join(dist, "main.js"), "w") as f:
            f.write(main_js)
        STATE.write_stamp(dist, STATE.expected_stamp(root))


class BuildChecks(unittest.TestCase):
    def setUp(self) -> None:
        self.root = tempfile.mkdtemp(prefix="as-pkg-")
        self.addCleanup(shutil.rmtree, self.root, True)
        make_package(self.root, "")

    def edit(self, path: str, transform: Any) -> None:
        full = os.path.join(self.root, path)
        with open(full) as f:
            data = json.load(f)
        transform(data)
        with open(full, "w") as f:
            json.dump(data, f)

    def test_a_stamped_build_of_these_sources_is_usable(self) -> None:
        self.assertIsNone(STATE.build_problem(self.root))

    def test_a_changed_source_makes_the_build_stale(self) -> None:
        with open(os.path.join(self.root, "sidecar", "src", "new.ts"), "w") as f:
            f.write("export const x = 1\n")
        self.assertEqual(STATE.build_problem(self.root).kind, "stale_build")

    def test_a_lockfile_or_version_change_makes_the_build_stale(self) -> None:
        self.edit("package.json", lambda d: d.update(version="1.0.1"))
        self.assertEqual(STATE.build_problem(self.root).kind, "stale_build")

    def test_no_stamp_is_no_build(self) -> None:
        os.remove(STATE.stamp_path(os.path.join(self.root, "sidecar", "dist")))
        self.assertEqual(STATE.build_problem(self.root).kind, "no_build")

    def test_dependencies_must_match_the_lockfile_entry_by_entry(self) -> None:
        self.assertTrue(STATE.deps_current(self.root), "an optional package of another platform may be absent")
        self.edit("package-lock.json", lambda d: d["packages"]["node_modules/a"].update(version="2.0.0"))
        self.assertFalse(STATE.deps_current(self.root))
        self.assertEqual(STATE.build_problem(self.root).kind, "no_deps")

    def test_a_removed_dependency_still_installed_is_not_current(self) -> None:
        self.edit("node_modules/.package-lock.json",
                  lambda d: d["packages"].update({"node_modules/gone": {"version": "1.0.0"}}))
        self.assertFalse(STATE.deps_current(self.root))

    def test_an_interrupted_npm_install_is_not_current(self) -> None:
        os.remove(os.path.join(self.root, "node_modules", ".package-lock.json"))
        self.assertFalse(STATE.deps_current(self.root))


# --------------------------------------------------------------------------- the supervisor

FAILS_WITH_CONFIG = """
const fs = require('fs')
fs.appendFileSync(process.env.STARTS, Date.now() + '\\n')
console.log(JSON.stringify({ level: 60, msg: 'invalid configuration; not starting', problems: ['no_such_key'] }))
process.exit(2)
"""
FAILS_AT_START = """
const fs = require('fs')
fs.appendFileSync(process.env.STARTS, Date.now() + '\\n')
process.stderr.write('sidecar boom: cannot open the store\\n')
process.exit(1)
"""


@unittest.skipIf(NODE is None, "node is not on PATH")
class QuietRestarts(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="as-sup-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.starts = os.path.join(self.tmp, "starts")
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data)
        LOGS.records.clear()
        from aiohttp import web

        app = web.Application()
        self.name, self.plugin = load_plugin(app, {"AUTHSVC_SOCKET": os.path.join(self.tmp, "none.sock"),
                                                   "AUTHSVC_DATA_DIR": self.data})
        self.addCleanup(unload_plugin, self.name)
        self.out = io.StringIO()
        self.err = io.StringIO()

    @contextlib.contextmanager
    def captured(self) -> Iterator[None]:
        with mock.patch.object(sys, "stdout", self.out), mock.patch.object(sys, "stderr", self.err), \
                mock.patch.dict(os.environ, {"STARTS": self.starts, "AUTHSVC_NODE": NODE or "",
                                             "FAKE_MAIN_JS": FAILS_WITH_CONFIG}):
            yield

    def start_times(self) -> list[float]:
        try:
            with open(self.starts) as f:
                return [int(line) / 1000 for line in f if line.strip()]
        except FileNotFoundError:
            return []

    async def supervise(self, main_js: str, slow_retry_s: float, *, built: bool = True) -> Any:
        """A supervisor for a package made here (not built: no dist at all)."""
        root = os.path.join(self.tmp, "pkg")
        make_package(root, main_js, built=built)
        sp = self.plugin.sidecar_process
        client = self.plugin.decision_client.DecisionClient(os.path.join(self.tmp, "none.sock"), 0.5, {}, 0)
        supervisor = sp.SidecarSupervisor(client, os.path.join(self.tmp, "none.sock"), self.data, root=root,
                                          slow_retry_s=slow_retry_s)
        await supervisor.start()
        self.addAsyncCleanup(supervisor.stop)
        return supervisor

    async def test_a_refused_config_is_reported_once_retried_slowly_and_named_on_the_page(self) -> None:
        with self.captured():
            await self.supervise(FAILS_WITH_CONFIG, slow_retry_s=1.0)
            await wait_for(lambda: len(self.start_times()) >= 3, timeout=15)
        times = self.start_times()
        gaps = [b - a for a, b in zip(times, times[1:])]
        self.assertTrue(all(g >= 0.9 for g in gaps), f"retried faster than the slow interval: {gaps}")
        reports = LOGS.lines(logging.ERROR, "refused its configuration")
        self.assertEqual(len(reports), 1, LOGS.lines())
        self.assertEqual(self.out.getvalue().count("invalid configuration; not starting"), 1, self.out.getvalue())
        outage = self.plugin.failsafe.OUTAGE.outage
        self.assertIn("refused its configuration", outage.what)

    async def test_a_config_change_is_tried_at_once(self) -> None:
        with self.captured():
            await self.supervise(FAILS_WITH_CONFIG, slow_retry_s=60.0)
            await wait_for(lambda: len(self.start_times()) == 1 and bool(LOGS.lines(logging.ERROR, "configuration")),
                           timeout=10)
            with open(os.path.join(self.data, "config.json"), "w") as f:
                f.write("{}")
            await wait_for(lambda: len(self.start_times()) == 2, timeout=10)
            # a changed config may fail differently: its output is shown again (once its pipe is read)
            await wait_for(lambda: self.out.getvalue().count("invalid configuration; not starting") == 2, timeout=10,
                           what=lambda: f"the second attempt's output in {self.out.getvalue()!r}")
        self.assertEqual(len(LOGS.lines(logging.ERROR, "refused its configuration")), 1, LOGS.lines())

    async def test_a_config_fixed_while_the_failing_attempt_still_runs_is_tried_at_once(self) -> None:
        # the owner's fix can land before the plugin has even seen the exit: it must not wait the slow interval
        fixes_then_fails = FAILS_WITH_CONFIG.replace(
            "process.exit(2)",
            f"fs.writeFileSync({json.dumps(os.path.join(self.data, 'config.json'))}, '{{}}'); process.exit(2)")
        with self.captured():
            await self.supervise(fixes_then_fails, slow_retry_s=60.0)
            await wait_for(lambda: len(self.start_times()) >= 2, timeout=10)

    async def test_a_line_longer_than_a_stream_reader_limit_is_passed_on_whole(self) -> None:
        # exitCode, not exit(): node drops what a pipe has not taken yet when exit() follows a large write
        long_line = FAILS_WITH_CONFIG.replace("console.log(", "console.log('x'.repeat(300000)); console.log(", 1) \
            .replace("process.exit(2)", "process.exitCode = 2")
        with self.captured():
            await self.supervise(long_line, slow_retry_s=60.0)
            await wait_for(lambda: bool(LOGS.lines(logging.ERROR, "refused its configuration")), timeout=10)
        self.assertIn("x" * 300000 + "\n", self.out.getvalue())
        self.assertIn("invalid configuration; not starting", self.out.getvalue())

    async def test_a_start_that_keeps_failing_the_same_way_is_reported_once_and_its_output_shown_once(self) -> None:
        with self.captured():
            await self.supervise(FAILS_AT_START, slow_retry_s=1.0)
            await wait_for(lambda: len(self.start_times()) >= 6, timeout=30)
        self.assertEqual(self.err.getvalue().count("sidecar boom"), 1, self.err.getvalue())
        errors = LOGS.lines(logging.ERROR)
        self.assertEqual(len([l for l in errors if "before it was ready" in l]), 1, errors)
        self.assertEqual(len([l for l in errors if "fails at start (exit status 1" in l]), 1, errors)
        self.assertEqual(len(errors), 2, errors)
        self.assertIn("fails at start", self.plugin.failsafe.OUTAGE.outage.what)

    async def test_no_build_never_starts_and_says_what_to_run(self) -> None:
        state = self.plugin.sidecar_process.install_state
        checks = mock.Mock(wraps=state.check)
        with self.captured(), mock.patch.dict(os.environ, {"AUTHSVC_AUTO_INSTALL": "0"}), \
                mock.patch.object(state, "check", checks):
            await self.supervise(FAILS_AT_START, slow_retry_s=0.2, built=False)
            # the check runs before every start: several slow rounds found the build missing
            await wait_for(lambda: checks.call_count >= 4, timeout=10)
        self.assertEqual(self.start_times(), [])
        errors = LOGS.lines(logging.ERROR)
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("the sidecar is not built", errors[0])
        self.assertIn("pkg/install.py", errors[0])
        page = self.plugin.failsafe.outage_page(self.plugin.failsafe.OUTAGE.outage)
        self.assertIn("python pkg/install.py", page)

    def write_install_py(self, body: str) -> None:
        root = os.path.join(self.tmp, "pkg")
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, "install.py"), "w") as f:
            f.write(INSTALL_PY_HEAD.format(state=os.path.join(ROOT, "host-plugin", "install_state.py")) + body)

    async def test_the_plugin_finishes_an_unbuilt_install_in_the_background_then_starts(self) -> None:
        self.write_install_py(INSTALL_PY_BUILDS)
        with self.captured():
            supervisor = await self.supervise(FAILS_WITH_CONFIG, slow_retry_s=60.0, built=False)
            self.assertEqual(self.plugin.failsafe.OUTAGE.outage.title, "authsvc is finishing its installation")
            await wait_for(lambda: len(self.start_times()) == 1, timeout=15, what=lambda: repr(LOGS.lines()))
        del supervisor
        self.assertEqual(len(LOGS.lines(logging.WARNING, "finishing the installation in the background")), 1)
        self.assertEqual(LOGS.lines(logging.INFO, "authsvc install: building the sidecar (fake)"),
                         ["authsvc install: building the sidecar (fake)"])
        self.assertEqual(len(LOGS.lines(logging.INFO, "installation finished; starting the sidecar")), 1)

    async def test_a_failed_background_install_is_reported_once_and_not_repeated_for_the_same_sources(self) -> None:
        self.write_install_py(INSTALL_PY_FAILS)
        state = self.plugin.sidecar_process.install_state
        checks = mock.Mock(wraps=state.check)
        with self.captured(), mock.patch.object(state, "check", checks):
            await self.supervise(FAILS_AT_START, slow_retry_s=0.2, built=False)
            await wait_for(lambda: checks.call_count >= 5, timeout=15)
        with open(os.path.join(self.tmp, "installs")) as f:
            self.assertEqual(f.read().count("x"), 1, "the same sources were installed twice")
        failed = LOGS.lines(logging.ERROR, "automatic installation failed")
        self.assertEqual(len(failed), 1, LOGS.lines())
        self.assertEqual(len(LOGS.lines(logging.ERROR)), 1, LOGS.lines())
        self.assertIn("pkg/install.py", failed[0])
        self.assertIn("automatic installation failed", self.plugin.failsafe.OUTAGE.outage.what)
        self.assertEqual(self.start_times(), [])


INSTALL_PY_HEAD = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("fake_install_state", {state!r})
state = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = state
spec.loader.exec_module(state)
ROOT = os.path.dirname(os.path.abspath(__file__))
"""
INSTALL_PY_BUILDS = """
print("authsvc install: building the sidecar (fake)", flush=True)
dist = os.path.join(ROOT, "sidecar", "dist")
os.makedirs(dist, exist_ok=True)
with open(os.path.join(dist, "main.js"), "w") as f:
    f.write(os.environ["FAKE_MAIN_JS"])
state.write_stamp(dist, state.expected_stamp(ROOT))
"""
INSTALL_PY_FAILS = """
with open(os.path.join(ROOT, "..", "installs"), "a") as f:
    f.write("x")
print("authsvc install: ERROR: npm ci failed (exit status 1); the output is above", file=sys.stderr)
sys.exit(1)
"""


if __name__ == "__main__":
    unittest.main()
