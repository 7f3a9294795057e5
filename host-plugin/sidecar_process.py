"""Starts and supervises the sidecar process.

Guarantees:
- the sidecar is a child of this process and stops with it (SIGTERM on
  cleanup; it also exits by itself when its stdin pipe closes, so a crash of
  the host never leaves an orphan serving stale policy);
- if it dies it is restarted with exponential backoff (0.1 s doubling to 5 s),
  and the decision client reconnects as soon as it answers the hello;
- while it is down, the gate refuses every request (the client is not ready).
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
from typing import Any

from .decision_client import DecisionClient, Unavailable

log = logging.getLogger("authsvc")

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDECAR_ENTRY = os.path.join(PACKAGE_ROOT, "sidecar", "dist", "main.js")


class SidecarSupervisor:
    def __init__(self, client: DecisionClient, socket_path: str, data_dir: str) -> None:
        self.client = client
        self.socket_path = socket_path
        self.data_dir = data_dir
        self.process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False

    @staticmethod
    def node_binary() -> str:
        # read at every spawn: the host's environment is the configuration
        node = os.environ.get("AUTHSVC_NODE") or shutil.which("node")
        if not node:
            raise RuntimeError("node (>= 20) not found on PATH; set AUTHSVC_NODE")
        return node

    async def start(self, _app: Any = None) -> None:
        self._stopping = False
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        backoff = 0.1
        while not self._stopping:
            started = asyncio.get_running_loop().time()
            try:
                await self._spawn_and_wait()
            except Exception:  # a failed spawn must not kill the supervisor
                log.exception("authsvc: sidecar failed to start")
            if self._stopping:
                break
            if asyncio.get_running_loop().time() - started > 30:
                backoff = 0.1
            log.error("authsvc: sidecar exited; restarting in %.1f s (requests are refused meanwhile)", backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _spawn_and_wait(self) -> None:
        env = dict(os.environ)
        env["AUTHSVC_SOCKET"] = self.socket_path
        env["AUTHSVC_DATA_DIR"] = self.data_dir
        env["AUTHSVC_EXIT_ON_STDIN_EOF"] = "1"
        self.process = await asyncio.create_subprocess_exec(
            self.node_binary(), SIDECAR_ENTRY, stdin=asyncio.subprocess.PIPE, env=env,
        )
        waiter = asyncio.ensure_future(self.process.wait())
        await self._connect_until_ready(waiter)
        await waiter

    async def _connect_until_ready(self, exited: "asyncio.Future[int]") -> None:
        delay = 0.02
        while not exited.done() and not self._stopping:
            try:
                await self.client.connect()
                log.info("authsvc: sidecar ready (pid %s)", self.process.pid if self.process else "?")
                return
            except Unavailable:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    async def stop(self, _app: Any = None) -> None:
        self._stopping = True
        self.client.close()
        process = self.process
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
        if self._task is not None:
            self._task.cancel()


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
