"""DESIGN §2.1 fail closed: without a usable pass decision for this very request, 503 and no handler."""
from __future__ import annotations

import asyncio
import json
import logging
import struct
import sys
import time

import aiohttp
from typing import Any

from aiohttp import web

from .support import (
    LOGS, MAX_FRAME_BYTES, PROTOCOL_VERSION, Drop, PluginCase, Raw, Split, assert_unavailable, encode_frame,
    pass_all, wait_for,
)


class NoSidecar(PluginCase):
    async def test_no_sidecar_listening_is_503_and_no_handler(self) -> None:
        s = await self.start(sidecar=False, wait=False)
        for method, path in (("GET", "/prompt"), ("POST", "/prompt"), ("GET", "/view?filename=a.png"),
                             ("GET", "/extensions/demo/app.js"), ("GET", "/internal/logs"), ("GET", "/nope")):
            status, headers, body = await s.request(method, path, json={"prompt": {}} if method == "POST" else None)
            assert_unavailable(self, status, body)
            self.assertEqual(headers.get("Retry-After"), "1")
        self.assertEqual(sum(s.host.calls.values()), 0, s.host.calls)

    async def test_sidecar_down_then_back_recovers(self) -> None:
        s = await self.start()
        self.assertEqual((await s.get("/prompt"))[0], 200)
        await s.fake.stop()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        calls = s.host.calls["prompt_get"]
        for _ in range(3):
            status, _, body = await s.get("/prompt")
            assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["prompt_get"], calls)
        await s.fake.start()
        await s.wait_status("/prompt", 200)


class RefusalLogLevels(PluginCase):
    """Issue 27: a healthy start is quiet. Requests refused before the sidecar was ever ready are
    the start itself (debug); an outage after that is a warning when it starts and when it ends."""

    async def test_refusals_before_the_first_ready_are_debug_then_an_outage_warns(self) -> None:
        s = await self.start(wait=False)
        await s.fake.stop()  # the sidecar is not there yet: requests arrive before it ever answered
        for _ in range(3):
            status, _, body = await s.get("/prompt")
            assert_unavailable(self, status, body)
        await s.fake.start()
        await s.wait_status("/prompt", 200)
        self.assertEqual(LOGS.lines(logging.INFO, "refus"), [], "no refusal line above debug during the start")
        self.assertEqual(LOGS.lines(logging.INFO, "work again"), [])
        self.assertTrue(LOGS.lines(logging.DEBUG, "until the sidecar is ready"), "the early refusals are at debug")

        await s.fake.stop()  # now a real outage
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(len(LOGS.lines(logging.WARNING, "refusing requests (503)")), 1)
        await s.fake.start()
        await s.wait_status("/prompt", 200)
        self.assertEqual(len(LOGS.lines(logging.WARNING, "decisions work again")), 1)

    async def test_a_start_with_no_early_request_still_warns_on_a_later_outage(self) -> None:
        s = await self.start()
        self.assertEqual((await s.get("/prompt"))[0], 200)
        await s.fake.stop()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(len(LOGS.lines(logging.WARNING, "refusing requests (503)")), 1)


def decision_client(s):
    """The gate's DecisionClient (the sidecar runner registered on the app's startup holds it)."""
    for hook in s.app.on_startup:
        owner = getattr(hook, "__self__", None)
        if owner is not None and hasattr(owner, "client"):
            return owner.client
    raise AssertionError("no decision client found")


class HoldWhileRestarting(PluginCase):
    """Issue 27: while a supervisor replaces a dead sidecar, a decision waits for the replacement
    instead of being refused, within the same timeout as any decision; nothing else waits, and
    nothing passes without a decision."""

    async def _held(self, timeout_ms: int = 2000):
        s = await self.start(timeout_ms=timeout_ms)
        client = decision_client(s)
        client.hold_while_restarting = True  # what SidecarSupervisor sets
        self.assertEqual((await s.get("/prompt"))[0], 200)
        await s.fake.stop()
        await wait_for(lambda: not client.ready)
        self.assertTrue(client.restarting, "a lost connection under a supervisor means a replacement is on its way")
        return s, client

    async def test_a_request_during_the_restart_waits_and_is_decided_by_the_replacement(self) -> None:
        s, client = await self._held()
        calls = s.host.calls["prompt_get"]
        waiting = asyncio.ensure_future(s.get("/prompt"))
        await wait_for(lambda: client._hold_over is not None)  # the request is waiting for the replacement
        self.assertFalse(waiting.done())
        self.assertEqual(s.host.calls["prompt_get"], calls, "nothing reached the host without a decision")
        s.fake.clear()
        await s.fake.start()
        status, _, _ = await waiting
        self.assertEqual(status, 200)
        self.assertEqual(len(s.fake.decides()), 1, "decided by the replacement")
        self.assertEqual(s.host.calls["prompt_get"], calls + 1)

    async def test_the_wait_and_the_decision_together_stay_within_the_timeout(self) -> None:
        # the replacement comes late in the wait and never answers: a 503 within the one timeout,
        # not a second timeout for the decision after the wait
        never = asyncio.Event()

        async def hang(msg: dict) -> dict:
            await never.wait()
            return {"action": "pass"}

        s, client = await self._held(timeout_ms=1000)
        s.fake.decide = hang
        started = time.monotonic()
        waiting = asyncio.ensure_future(s.get("/prompt"))
        await asyncio.sleep(0.6)  # the subject is the time bound: the replacement comes 0.6 s into the wait
        await s.fake.start()
        status, _, body = await waiting
        elapsed = time.monotonic() - started
        assert_unavailable(self, status, body)
        self.assertLess(elapsed, 1.4, f"one timeout in all ({elapsed:.2f} s), not the wait plus a full timeout")
        never.set()

    async def test_without_a_replacement_the_wait_ends_with_503_at_the_timeout(self) -> None:
        s, _ = await self._held(timeout_ms=500)
        started = time.monotonic()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertLess(time.monotonic() - started, 1.0)

    async def test_calling_the_hold_off_refuses_the_waiting_request_at_once(self) -> None:
        s, client = await self._held(timeout_ms=5000)
        started = time.monotonic()
        waiting = asyncio.ensure_future(s.get("/prompt"))
        await wait_for(lambda: client._hold_over is not None)
        client.stop_holding()  # what the supervisor does when no replacement will come
        status, _, body = await waiting
        assert_unavailable(self, status, body)
        self.assertLess(time.monotonic() - started, 2.0, "refused when the hold was called off, not at the timeout")
        self.assertFalse(client.restarting)

    async def test_steps_after_a_decision_never_wait(self) -> None:
        # a body, form or filter step carries the context of the sidecar that died
        _, client = await self._held(timeout_ms=5000)
        started = time.monotonic()
        for kind in ("body", "form", "filter"):
            with self.assertRaises(Exception) as caught:
                await client.exchange({"type": kind, "ctx": {}})
            self.assertEqual(type(caught.exception).__name__, "Unavailable")
        self.assertLess(time.monotonic() - started, 0.5)

    async def test_no_supervisor_no_wait(self) -> None:
        # an external sidecar (AUTHSVC_SOCKET) is not restarted by the plugin: refuse at once
        s = await self.start(timeout_ms=5000)
        await s.fake.stop()
        started = time.monotonic()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertLess(time.monotonic() - started, 1.0)


class StartQuietButNotSilent(PluginCase):
    async def test_a_start_that_never_gets_ready_warns_after_one_interval(self) -> None:
        s = await self.start(sidecar=False, wait=False)
        refusal_log = sys.modules[s.plugin.__name__ + ".refusal_log"]
        now = [100.0]
        refusals = refusal_log.RefusalLog(interval=10.0, clock=lambda: now[0])
        refusals.refused("cannot connect")
        refusals.refused("cannot connect")
        self.assertEqual(LOGS.lines(logging.WARNING, "refusing"), [])
        now[0] += 10.0
        refusals.refused("cannot connect")
        warnings = LOGS.lines(logging.WARNING, "no decision has worked since the start")
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn("3 request(s) refused", warnings[0])
        refusals.recovered()
        self.assertEqual(len(LOGS.lines(logging.WARNING, "decisions work again")), 1)


class Timeout(PluginCase):
    async def test_slower_than_timeout_is_503_within_the_timeout(self) -> None:
        async def slow(msg: dict) -> dict:
            await asyncio.sleep(3)
            return {"action": "pass"}

        s = await self.start(timeout_ms=200)
        s.fake.decide = slow
        started = time.monotonic()
        status, _, body = await s.get("/prompt")
        elapsed = time.monotonic() - started
        assert_unavailable(self, status, body)
        self.assertGreaterEqual(elapsed, 0.15)
        self.assertLess(elapsed, 1.0, "the gate must answer within about the decision timeout")
        self.assertEqual(s.host.calls["prompt_get"], 0)
        # a late answer to a timed-out call is ignored; the connection stays usable
        s.fake.decide = pass_all
        await s.wait_status("/prompt", 200)


class Garbage(PluginCase):
    async def _garbage_then_fixed(self, garbage: bytes) -> None:
        s = await self.start()
        s.fake.decide = lambda msg: Raw(garbage)
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["prompt_get"], 0)
        connects = s.fake.connects
        s.fake.decide = pass_all
        await s.wait_status("/prompt", 200)
        self.assertGreater(s.fake.connects, connects, "the plugin must drop a connection that sent garbage")

    async def test_non_json_frame(self) -> None:
        await self._garbage_then_fixed(struct.pack(">II", 13, 9) + b"not json!")

    async def test_frame_length_over_max(self) -> None:
        await self._garbage_then_fixed(struct.pack(">II", MAX_FRAME_BYTES + 1, 2) + b"{}")

    async def test_json_array(self) -> None:
        await self._garbage_then_fixed(encode_frame([1, 2, 3]))

    async def test_invalid_utf8(self) -> None:
        await self._garbage_then_fixed(struct.pack(">II", 8, 4) + b"\xff\xfe\xfd\xfc")


class VersionMismatch(PluginCase):
    async def test_mismatch_is_503_and_logged_once(self) -> None:
        def old_hello(msg: dict) -> dict:
            return {"type": "hello", "protocol": PROTOCOL_VERSION + 1, "sidecar_version": "future",
                    "http_socket": "/nonexistent"}

        s = await self.start(hello=old_hello, wait=False)
        # several connection attempts and several requests
        await wait_for(lambda: len(s.fake.hellos) >= 3, what="three hello attempts")
        for _ in range(5):
            status, _, body = await s.get("/prompt")
            assert_unavailable(self, status, body)
        await wait_for(lambda: len(s.fake.hellos) >= 5, what="more hello attempts")
        self.assertEqual(s.host.calls["prompt_get"], 0)
        self.assertEqual(s.fake.decides(), [], "no request may be described on a mismatched connection")
        hello = s.fake.hellos[0]
        self.assertEqual(hello["protocol"], PROTOCOL_VERSION)
        self.assertEqual(hello["plugin_version"], s.plugin_version)
        self.assertIsInstance(hello["host"], dict)
        mismatch = LOGS.lines(logging.ERROR, containing="mismatch")
        self.assertEqual(len(mismatch), 1, mismatch)
        self.assertIn(str(PROTOCOL_VERSION + 1), mismatch[0])
        self.assertLessEqual(len(s.fake.open_connections), 1, "mismatched connections must be closed")

    async def test_hello_of_wrong_type_is_refused(self) -> None:
        s = await self.start(hello=lambda msg: {"type": "decide", "protocol": PROTOCOL_VERSION}, wait=False)
        await wait_for(lambda: len(s.fake.hellos) >= 2, what="two hello attempts")
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["prompt_get"], 0)


class Dropped(PluginCase):
    async def test_connection_dropped_mid_request_then_recovers(self) -> None:
        s = await self.start()
        s.fake.decide = lambda msg: Drop()
        started = time.monotonic()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertLess(time.monotonic() - started, 1.0, "a lost connection fails the request at once")
        self.assertEqual(s.host.calls["prompt_get"], 0)
        s.fake.decide = pass_all
        await s.wait_status("/prompt", 200)

    async def test_all_requests_in_flight_fail_when_connection_drops(self) -> None:
        release = asyncio.Event()

        async def hold(msg: dict):
            await release.wait()
            return Drop()

        s = await self.start()
        s.fake.decide = hold
        tasks = [asyncio.ensure_future(s.get(f"/echo/{i}")) for i in range(5)]
        await wait_for(lambda: len(s.fake.decides()) == 5, what="five requests in flight")
        release.set()
        for status, _, body in await asyncio.gather(*tasks):
            assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["echo"], 0)


class BadDecisions(PluginCase):
    async def _assert_refused(self, decision: dict) -> None:
        s = await self.start(lambda msg: decision)
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["prompt_get"], 0)

    async def test_unknown_action(self) -> None:
        await self._assert_refused({"action": "allow"})

    async def test_missing_action(self) -> None:
        await self._assert_refused({"status": 200})

    async def test_respond_without_status(self) -> None:
        await self._assert_refused({"action": "respond", "body_text": "no status"})

    async def test_respond_with_non_numeric_status(self) -> None:
        await self._assert_refused({"action": "respond", "status": "teapot"})

    async def test_body_answer_with_unknown_action(self) -> None:
        s = await self.start(lambda msg: {"action": "pass", "need_body": {"max_bytes": 1000}}
                             if msg["type"] == "decide" else {"action": "maybe"})
        status, _, body = await s.request("POST", "/prompt", json={"prompt": {}})
        assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["prompt_post"], 0)


class SetupFailure(PluginCase):
    async def test_bad_timeout_setting_denies_everything_and_host_stays_up(self) -> None:
        s = await self.start(env={"AUTHSVC_DECISION_TIMEOUT_MS": "abc"}, wait=False)
        self.assertTrue(LOGS.lines(logging.ERROR, containing="setup failed"))
        for method, path in (("GET", "/prompt"), ("POST", "/prompt"), ("GET", "/nope"), ("DELETE", "/prompt"),
                             ("GET", "/extensions/demo/app.js"), ("GET", "/internal/logs"), ("OPTIONS", "/prompt")):
            status, _, body = await s.request(method, path, json={"prompt": {}} if method == "POST" else None)
            assert_unavailable(self, status, body)
        with self.assertRaises(aiohttp.WSServerHandshakeError) as raised:
            await s.session.ws_connect(s.url + "/ws")
        self.assertEqual(raised.exception.status, 503)
        # still serving (503) after all that
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(sum(s.host.calls.values()), 0, s.host.calls)
        self.assertEqual(s.fake.connects, 0, "a failed setup must not talk to the sidecar")

    async def test_non_positive_timeout_is_a_setup_failure(self) -> None:
        s = await self.start(env={"AUTHSVC_DECISION_TIMEOUT_MS": "0"}, wait=False)
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["prompt_get"], 0)

    async def test_deny_all_is_the_outermost_middleware(self) -> None:
        s = await self.start(env={"AUTHSVC_DECISION_TIMEOUT_MS": "abc"}, wait=False)
        self.assertEqual(len(s.app.middlewares), 2)
        self.assertEqual(s.app.middlewares[0].__name__, "authsvc_deny_all")


class GateFirst(PluginCase):
    async def test_a_middleware_another_package_puts_ahead_of_the_gate_runs_after_it_from_the_start(self) -> None:
        seen: list[str] = []

        @web.middleware
        async def rogue(request: web.Request, handler: Any) -> web.StreamResponse:
            seen.append(request.path)  # code that would run with nobody's decision
            return await handler(request)

        def put_first(app: web.Application) -> None:
            app.middlewares.insert(0, rogue)

        s = await self.start(before_start=put_first, decide=lambda d: {"action": "respond", "status": 403, "headers": [], "body_text": "no"})
        self.assertEqual(s.app.middlewares[0].__name__, "authsvc_gate")
        self.assertIs(s.app.middlewares[1], rogue)
        warnings = [r.getMessage() for r in LOGS.records if r.levelno == logging.WARNING]
        self.assertTrue(any("ahead of the gate" in m and "rogue" in m for m in warnings), warnings)
        status, _, _ = await s.get("/prompt")
        self.assertEqual(status, 403)
        self.assertEqual(seen, [], "the rogue middleware ran for a request the gate refused")


    async def test_a_gate_another_package_removed_is_put_back_first(self) -> None:
        def clear(app: web.Application) -> None:
            app.middlewares.clear()

        s = await self.start(before_start=clear, decide=lambda d: {"action": "respond", "status": 403, "headers": [], "body_text": "no"})
        self.assertEqual([m.__name__ for m in s.app.middlewares], ["authsvc_gate"])
        errors = [r.getMessage() for r in LOGS.records if r.levelno == logging.ERROR]
        self.assertTrue(any("removed the gate" in m for m in errors), errors)
        status, _, _ = await s.get("/prompt")
        self.assertEqual(status, 403)
        self.assertEqual(sum(s.host.calls.values()), 0)


class Connections(PluginCase):
    async def test_unanswered_hello_does_not_leak_connections(self) -> None:
        """A sidecar that accepts but never answers the hello: each attempt times out; none may stay open."""
        s = await self.start(hello=lambda msg: None, wait=False, timeout_ms=100)
        await wait_for(lambda: len(s.fake.hellos) >= 4, what="four hello attempts")
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        await asyncio.sleep(0)  # let the fake see closed connections
        await wait_for(lambda: len(s.fake.open_connections) <= 1, timeout=2.0,
                       what=lambda: f"at most one open decision connection (open: {len(s.fake.open_connections)})")

    async def test_one_connection_after_recovery(self) -> None:
        s = await self.start()
        s.fake.decide = lambda msg: Drop()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        s.fake.decide = pass_all
        await s.wait_status("/prompt", 200)
        for _ in range(5):
            self.assertEqual((await s.get("/prompt"))[0], 200)
        await wait_for(lambda: len(s.fake.open_connections) == 1, timeout=2.0,
                       what=lambda: f"exactly one open decision connection (open: {len(s.fake.open_connections)})")

    async def test_requests_during_a_slow_hello_leave_one_connection(self) -> None:
        s = await self.start()

        answered = []

        async def slow_hello(msg: dict) -> dict:
            await asyncio.sleep(0.3)
            answered.append(msg["id"])
            return s.fake.good_hello(msg)

        s.fake.hello = slow_hello
        s.fake.decide = lambda msg: Drop()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        s.fake.decide = pass_all
        # requests while the plugin is reconnecting (each is refused: not connected yet)
        for _ in range(5):
            await s.get("/prompt")
            await asyncio.sleep(0.02)
        await s.wait_status("/prompt", 200)
        await wait_for(lambda: len(answered) == len(s.fake.hellos) - 1, what="every pending hello answered")
        await wait_for(lambda: len(s.fake.open_connections) == 1, timeout=1.0,
                       what=lambda: f"one decision connection (open: {len(s.fake.open_connections)}, "
                                    f"hellos: {len(s.fake.hellos)})")

    async def test_answer_split_across_writes(self) -> None:
        s = await self.start(lambda msg: Split({"action": "pass", "set_headers": {"x-decided-for": msg["path"],
                                                                                  "x-pad": "p" * 3000}}, 4))
        status, _, body = await s.get("/echo/7")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["decided_for"], "/echo/7")

    async def test_answers_for_unknown_ids_are_ignored(self) -> None:
        s = await self.start()
        s.fake.decide = lambda msg: Raw(encode_frame({"id": 999_999, "action": "pass"})
                                        + encode_frame({"id": msg["id"], "action": "respond", "status": 403}))
        status, _, _ = await s.get("/prompt")
        self.assertEqual(status, 403)
        self.assertEqual(s.host.calls["prompt_get"], 0)

    async def test_client_gone_while_deciding_keeps_the_connection_usable(self) -> None:
        release = asyncio.Event()

        async def hold(msg: dict) -> dict:
            if msg["path"] == "/echo/held":
                await release.wait()
            return {"action": "pass"}

        s = await self.start(hold)
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(s.get("/echo/held"), 0.2)
        release.set()
        connects = s.fake.connects
        for i in range(3):
            self.assertEqual((await s.get(f"/echo/{i}"))[0], 200)
        self.assertEqual(s.fake.connects, connects, "a gone client must not cost the decision connection")


class NoSecretsInLogs(PluginCase):
    async def test_refusals_do_not_log_query_or_credentials(self) -> None:
        s = await self.start(sidecar=False, wait=False)
        await s.get("/prompt?token=SECRET-QUERY-TOKEN", headers={"Authorization": "Bearer SECRET-BEARER",
                                                                 "Cookie": "sid=SECRET-COOKIE"})
        s2 = await self.start(lambda msg: {"action": "respond", "body_text": "SECRET-BODY"})
        await s2.get("/prompt?access_token=SECRET-QUERY-TOKEN")
        text = "\n".join(r.getMessage() for r in LOGS.records)
        self.assertTrue(LOGS.records)
        for secret in ("SECRET-QUERY-TOKEN", "SECRET-BEARER", "SECRET-COOKIE", "SECRET-BODY"):
            self.assertNotIn(secret, text)
