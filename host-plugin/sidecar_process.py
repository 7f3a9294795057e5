"""Starts and supervises the sidecar process.

Guarantees:
- the sidecar is a child of this process and stops with it (SIGTERM on
  cleanup; it also exits by itself when its stdin pipe closes, so a crash of
  the host never leaves an orphan serving stale policy);
- it is started only from a build that matches this package's sources, on a
  Node.js >= 20 (install_state.check, before every cold start and before a standby
  is started; a standby whose build on disk changed since is not promoted): a plain clone, an
  interrupted install or an update that was not built never runs. When only the
  install is missing and Node is there, install.py runs in the background first
  (AUTHSVC_AUTO_INSTALL=0 turns that off) and the page says so;
- a cause that a restart will not fix (no build, no Node, a refused config, a
  start that keeps failing the same way) is logged once, names itself on the
  503 page, and is retried slowly (every ``slow_retry_s``, or as soon as one of
  the files it depends on changes); the sidecar's own output of the repeated
  failing attempts is dropped, so the log has one report per cause, not per retry;
- a sidecar that dies after it was ready is replaced at once, by a standby that has loaded
  everything but the store when there is one (requests that arrive meanwhile wait for it, up
  to the decision timeout); if it keeps dying within STABLE_RUN_S of its start, with
  exponential backoff (0.1 s doubling to 5 s, requests refused meanwhile); the decision
  client reconnects as soon as it answers the hello (polled every 10 ms while it starts);
- while it is down, the gate refuses every request (the client is not ready), except that a
  decision asked while a replacement is on its way waits for it, within the decision timeout;
- stop() ends the supervising task first, then every process it started (sidecar, standby).
"""
from __future__ import annotations

import asyncio
import codecs
import logging
import os
import sys
from typing import IO, Any

from . import install_state
from .connection import Unavailable
from .decision_client import DecisionClient
from .failsafe import STARTING, UNKNOWN, Outage, problem_page, set_outage
from .install_state import Problem

log = logging.getLogger("authsvc")

PACKAGE_ROOT = install_state.package_root()
CONFIG_EXIT_STATUS = 2  # sidecar/src/main.ts: invalid configuration
_EARLY_FAILURES_BEFORE_SLOW = 3
# A sidecar that ran this long before it died is replaced at once; one that dies sooner again
# is a crash loop, replaced after a growing pause (_longer_pause).
STABLE_RUN_S = 10.0
_MUTED_CHUNKS = 64  # of up to _CHUNK bytes: what a failing start prints, kept until we know it repeats
_CHUNK = 64 * 1024

INSTALLING = Outage(
    "authsvc is finishing its installation",
    "The authentication service of this ComfyUI server is installing its dependencies and building itself "
    "after an install or an update. This takes a minute or two; every request is refused until it is done.",
    reload_s=5,
)


def _longer_pause(pause: float) -> float:
    """The next pause of a crash loop: 0.1 s, then doubling, at most 5 s."""
    return min(max(pause * 2, 0.1), 5.0)


class _Run:
    """A sidecar process, the tasks copying its output, and the build it was started from."""

    def __init__(self, process: asyncio.subprocess.Process, pumps: list[asyncio.Future], build: object) -> None:
        self.process = process
        self.pumps = pumps
        self.build = build


def _build_id(root: str) -> object:
    """What tells one build of the sidecar from the next (the stamp install.py writes with it)."""
    try:
        st = os.stat(install_state.stamp_path(os.path.join(root, "sidecar", "dist")))
        return (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return None


async def _end(process: asyncio.subprocess.Process) -> None:
    """TERM, then KILL after 5 s; returns once it has exited."""
    if process.returncode is None:
        try:
            process.terminate()
            await asyncio.wait_for(process.wait(), 5)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
        except ProcessLookupError:
            pass


class SidecarSupervisor:
    def __init__(self, client: DecisionClient, socket_path: str, data_dir: str, root: str = PACKAGE_ROOT,
                 slow_retry_s: float = 30.0) -> None:
        self.client = client
        self.socket_path = socket_path
        self.data_dir = data_dir
        self.root = root
        self.slow_retry_s = slow_retry_s
        self.auto_install = os.environ.get("AUTHSVC_AUTO_INSTALL", "1") != "0"
        self.process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._stop_event: asyncio.Event | None = None
        self._reported: str | None = None  # the cause already in the log, so a retry says nothing new
        self._failed_installs: set[str] = set()  # sources the background install already failed on
        self._muted: list[tuple[IO[str], str]] | None = None
        self._last_early_status: int | None = None  # exit status of the last start that never got ready
        self._acted = False  # a watched file changed: the next failure may say something new
        self._ready_before = False  # the first ready writes the "gate ready" line, later ones "restarted"
        self._standby: _Run | None = None
        client.hold_while_restarting = True  # this supervisor replaces a dead sidecar at once
        self.standby_enabled = os.environ.get("AUTHSVC_STANDBY_SIDECAR", "1") != "0"
        # at import, so a broken install is in the log before ComfyUI even listens
        self.problem = install_state.check(root)
        if self.problem is not None:
            if self._will_install(self.problem):
                log.warning("authsvc: %s; finishing the installation in the background (install.py); every request "
                            "is refused (503) until it is done", self.problem.what)
                self._reported = self.problem.log_line()
                set_outage(INSTALLING)
            else:
                self._report(self.problem)

    def _will_install(self, problem: Problem) -> bool:
        return problem.installable and self.auto_install and self._inputs_key() not in self._failed_installs

    def _inputs_key(self) -> str:
        try:
            return repr(install_state.expected_stamp(self.root))
        except (OSError, ValueError, KeyError):
            return "unreadable"

    def _report(self, problem: Problem) -> None:
        """Logs a cause once per streak and puts it on the page."""
        self.client.stop_holding()  # no replacement is on its way: refuse at once, with the page
        set_outage(problem_page(problem))
        line = problem.log_line()
        if line != self._reported:
            self._reported = line
            log.error("authsvc: cannot start the sidecar: %s. Every request is refused (503) until then.", line)

    async def start(self, _app: Any = None) -> None:
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        backoff = 0.0
        early_failures: list[int] = []
        while not self._stopping:
            # taken before the attempt: a fix made while it runs (before its failure is even reported) counts
            watched = self._watched()
            # A waiting standby of the current build passed this check before it was started,
            # and it is what was running a moment ago: promoting it does not wait for the check
            # (it runs `node --version` and hashes the sources while every request waits). A
            # cold start checks first, off the event loop.
            promoted = await self._promote_standby()
            problem = None if promoted is not None else await asyncio.get_running_loop().run_in_executor(
                None, install_state.check, self.root)
            if problem is not None:
                if problem.installable and self.auto_install:
                    key = self._inputs_key()
                    if key not in self._failed_installs:
                        if await self._install():
                            continue
                        self._failed_installs.add(key)
                    # the same sources again: the page keeps saying that the install failed, not just "not built"
                    problem = Problem("install_failed", "the automatic installation failed (its output is in the log)",
                                      f"run {install_state.install_command(self.root)}, then restart ComfyUI")
                self._report(problem)
                await self._wait_slowly(watched)
                continue
            started = asyncio.get_running_loop().time()
            try:
                status, was_ready = await self._spawn_and_wait(promoted)
            except OSError as exc:  # node vanished or is not executable since the check: no restart fixes that
                self._report(Problem("spawn_failed", "the sidecar process could not be started",
                                     "check AUTHSVC_NODE or the node on PATH, then restart ComfyUI",
                                     detail=f"{type(exc).__name__}: {exc}"))
                await self._wait_slowly(watched)
                continue
            if self._stopping:
                break
            if was_ready:
                early_failures.clear()
                if asyncio.get_running_loop().time() - started >= STABLE_RUN_S:
                    backoff = 0.0
                set_outage(STARTING)
                log.error("authsvc: sidecar exited (status %s); restarting %s", status,
                          f"in {backoff:.1f} s (requests are refused meanwhile)" if backoff else "now (requests wait for it)")
                # requests wait for a replacement that starts now, not for one that backs off
                if backoff:
                    self.client.stop_holding()
                    await self._sleep(backoff)
                backoff = _longer_pause(backoff)
                continue
            early_failures.append(status)
            self.client.stop_holding()  # this one never got ready: the next try is not immediate
            if status == CONFIG_EXIT_STATUS:
                self._report(Problem("bad_config", "the sidecar refused its configuration (config.json in its data "
                                     "folder, or an AUTHSVC_ variable; its errors are in the log)",
                                     "correct the configuration; it is tried again as soon as config.json changes"))
                await self._wait_slowly(watched)
            elif len(early_failures) >= _EARLY_FAILURES_BEFORE_SLOW and len(set(early_failures[-3:])) == 1:
                self._report(Problem("start_failed", f"the sidecar fails at start (exit status {status}; its error "
                                     "is in the log)", "fix the cause the log names, then restart ComfyUI"))
                await self._wait_slowly(watched)
            else:
                if len(early_failures) == 1:
                    log.error("authsvc: sidecar exited before it was ready (status %s); retrying", status)
                set_outage(STARTING)
                await self._sleep(max(backoff, 0.1))
                backoff = _longer_pause(backoff)

    async def _install(self) -> bool:
        """install.py with this very Python (ComfyUI's), its lines in our log; True when the build is usable."""
        self.client.stop_holding()  # minutes, not a moment: refuse at once, with the page
        set_outage(INSTALLING)
        process = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(self.root, "install.py"), cwd=self.root,
            env={**os.environ, "AUTHSVC_INSTALL_BY_PLUGIN": "1"}, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        self.process = process
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                log.info("%s", line)
        status = await process.wait()
        if self._stopping:
            return False
        if status == 0 and install_state.check(self.root) is None:
            log.info("authsvc: installation finished; starting the sidecar")
            return True
        return False

    def _sidecar_env(self, standby: bool) -> dict[str, str]:
        env = dict(os.environ)
        env["AUTHSVC_SOCKET"] = self.socket_path
        env["AUTHSVC_DATA_DIR"] = self.data_dir
        env["AUTHSVC_EXIT_ON_STDIN_EOF"] = "1"
        if standby:
            env["AUTHSVC_STANDBY"] = "1"
        else:
            env.pop("AUTHSVC_STANDBY", None)
        return env

    async def _spawn(self, standby: bool) -> _Run:
        node = install_state.find_node()
        assert node is not None  # install_state.check passed just before
        build = _build_id(self.root)  # before the start: a build swapped in meanwhile is not this one
        process = await asyncio.create_subprocess_exec(
            node, os.path.join(self.root, "sidecar", "dist", "main.js"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=self._sidecar_env(standby),
        )
        pumps = [asyncio.ensure_future(self._pump(process.stdout, sys.stdout)),
                 asyncio.ensure_future(self._pump(process.stderr, sys.stderr))]
        return _Run(process, pumps, build)

    async def _promote_standby(self) -> _Run | None:
        """The standby, told to start, if it is alive and of the build a cold start would run;
        otherwise None (and an unusable standby is ended)."""
        run, self._standby = self._standby, None
        if run is None:
            return None
        self.process = run.process  # from here stop() ends it, whatever happens below
        if run.process.returncode is not None or run.build != _build_id(self.root) or run.process.stdin is None:
            await _end(run.process)
            return None
        try:
            run.process.stdin.write(b"go\n")
            await run.process.stdin.drain()
        except (ConnectionError, OSError):
            await _end(run.process)
            return None
        return run

    async def _keep_standby(self) -> None:
        """After a sidecar became ready: one more, loaded and waiting, for the moment it dies.
        Only of a build that passes the same check a cold start makes (nobody waits for it now)."""
        if not self.standby_enabled or self._stopping or self._standby is not None:
            return
        build = _build_id(self.root)
        problem = await asyncio.get_running_loop().run_in_executor(None, install_state.check, self.root)
        if problem is not None or self._stopping or build != _build_id(self.root):
            return  # the next cold start reports it
        try:
            run = await self._spawn(standby=True)
        except OSError:
            return  # a cold start remains possible; the next ready sidecar tries again
        if self._stopping or run.build != build:
            await _end(run.process)
            return
        self._standby = run

    async def _spawn_and_wait(self, promoted: _Run | None) -> tuple[int | None, bool]:
        """One run of the sidecar (the promoted standby, or a cold start): its exit status, and
        whether it was ever ready."""
        # a retry after a failed start holds the sidecar's output until it turns out to be a different failure
        self._muted = [] if self._last_early_status is not None and not self._acted else None
        self._acted = False
        run = promoted or await self._spawn(standby=False)
        self.process = run.process
        if self._stopping:  # stop() came while it started: it may have missed this process
            await _end(run.process)
            return None, False
        waiter = asyncio.ensure_future(run.process.wait())
        ready = await self._connect_until_ready(waiter)
        if ready:
            self._unmute()
            self._reported = None
            self._last_early_status = None
            set_outage(UNKNOWN)  # what the page says if a decision fails from now on
            await self._keep_standby()
        status = await waiter
        # A worker of the dead sidecar (the password hasher) may hold its stderr open a little
        # longer; its last lines still reach the log, but the restart does not wait for them.
        await asyncio.wait(run.pumps, timeout=0.05)
        if not ready:
            if status == self._last_early_status:
                self._muted = None  # the same failure again: its output is in the log once already
            self._last_early_status = status
        self._unmute()
        return status, ready

    async def _pump(self, stream: asyncio.StreamReader | None, out: IO[str] | None) -> None:
        """The sidecar's output into the host's own streams (ComfyUI's log shows them).

        Read in chunks, not lines: a line longer than the reader's limit would end a line reader,
        and an unread pipe would block the sidecar's next write, decisions included."""
        if stream is None:
            return
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            chunk = await stream.read(_CHUNK)
            text = decoder.decode(chunk, final=not chunk)
            muted = self._muted
            if text and out is not None:
                if muted is not None:
                    if len(muted) < _MUTED_CHUNKS:
                        muted.append((out, text))
                else:
                    out.write(text)
                    out.flush()
            if not chunk:
                return

    def _unmute(self) -> None:
        muted, self._muted = self._muted, None
        for out, text in muted or ():
            out.write(text)
            out.flush()

    async def _connect_until_ready(self, exited: "asyncio.Future[int]") -> bool:
        # a refused connect to a socket that does not exist yet costs microseconds: poll often,
        # since every moment between the sidecar listening and this noticing is an outage
        while not exited.done() and not self._stopping:
            try:
                await self.client.connect()
                self._log_ready()
                return True
            except Unavailable:
                await asyncio.sleep(0.01)
        return False

    def _log_ready(self) -> None:
        """The one line a healthy start writes; a restart says so instead."""
        pid = self.process.pid if self.process else "?"
        if self._ready_before:
            log.info("authsvc: sidecar restarted (pid %s)", pid)
            return
        self._ready_before = True
        info = self.client.sidecar_info or {}
        log.info("authsvc: gate ready: authsvc %s (sidecar %s, protocol v%s), data dir %s, sidecar pid %s",
                 self.client.plugin_version, info.get("sidecar_version", "?"), info.get("protocol", "?"),
                 self.data_dir, pid)

    def _watched(self) -> tuple[tuple[str, float, int] | None, ...]:
        """What a slow retry waits on besides the clock: a change means someone acted on the cause."""
        paths = (os.path.join(self.data_dir, "config.json"),
                 install_state.stamp_path(os.path.join(self.root, "sidecar", "dist")),
                 os.path.join(self.root, "node_modules", ".package-lock.json"),
                 os.path.join(self.root, "package-lock.json"))
        seen: list[tuple[str, float, int] | None] = []
        for path in paths:
            try:
                st = os.stat(path)
                seen.append((path, st.st_mtime, st.st_size))
            except OSError:
                seen.append(None)
        return tuple(seen)

    async def _wait_slowly(self, before: tuple[tuple[str, float, int] | None, ...]) -> None:
        if self._watched() != before:
            self._acted = True
            return
        deadline = asyncio.get_running_loop().time() + self.slow_retry_s
        while not self._stopping and asyncio.get_running_loop().time() < deadline:
            await self._sleep(min(1.0, self.slow_retry_s))
            if self._watched() != before:
                self._acted = True
                return

    async def _sleep(self, seconds: float) -> None:
        assert self._stop_event is not None
        try:
            await asyncio.wait_for(self._stop_event.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def stop(self, _app: Any = None) -> None:
        self._stopping = True
        self.client.hold_while_restarting = False  # nothing replaces it any more: refuse at once
        self.client.stop_holding()
        if self._stop_event is not None:
            self._stop_event.set()
        self.client.close()
        # the supervising task first, so it cannot start or promote a process after this looked
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass  # it was stopped; what it left running is ended below
        standby, self._standby = self._standby, None
        await asyncio.gather(*(_end(p) for p in (self.process, standby.process if standby else None) if p is not None))


class ExternalSidecar:
    """An already running sidecar (``AUTHSVC_SOCKET``): connect, and keep reconnecting."""

    def __init__(self, client: DecisionClient) -> None:
        self.client = client
        self._task: asyncio.Task | None = None
        self._stopping = False

    async def start(self, _app: Any = None) -> None:
        self._task = asyncio.ensure_future(self._keep_connected())

    async def _keep_connected(self) -> None:
        while not self._stopping:
            if not self.client.ready:
                try:
                    await self.client.connect()
                except Unavailable:
                    pass
            await asyncio.sleep(0.1)

    async def stop(self, _app: Any = None) -> None:
        self._stopping = True
        self.client.close()
        if self._task is not None:
            self._task.cancel()
