"""Kept decisions: the plugin reuses a pass the sidecar marked with ``cache`` for the very same
request description, and for nothing else; ``forget``, the time limit and a lost sidecar end it."""
from __future__ import annotations

import asyncio
import socket
import time
import unittest
from typing import Any

from multidict import CIMultiDict

from .support import PluginCase, Stack, assert_unavailable, plugin_module

_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)

KEEP = {"action": "pass", "set_headers": {"comfy-user": "alice"}, "strip_headers": ["authorization"],
        "cache": {"ms": 5000, "epoch": 0}}


def usable(kept: Any, fields: tuple) -> dict | None:
    """The decision ``kept`` would use for this description now (its one look, ``lookup``)."""
    found = kept.lookup(fields, 0)
    return None if found is None else found[0]


def kept_at_all(kept: Any, fields: tuple) -> bool:
    """Whether anything is kept for this description (perhaps past its time)."""
    return kept.lookup(fields, 0) is not None


async def until_asked(s: Stack, count: int, what: str, timeout: float = 5.0) -> None:
    """Bounded: GET /prompt again until the sidecar has been asked ``count`` times in all."""
    deadline = time.monotonic() + timeout
    while True:
        await s.get("/prompt")
        if len(s.fake.decides()) >= count:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting until {what}")


async def get_until_asked(s: Stack, count: int, what: str, timeout: float = 5.0) -> list[int]:
    """Bounded: GET /prompt again until the sidecar has been asked ``count`` times; the statuses seen."""
    deadline = time.monotonic() + timeout
    statuses = []
    while True:
        status, _, _ = await s.get("/prompt")
        statuses.append(status)
        if len(s.fake.decides()) >= count:
            return statuses
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting until {what}")


def renewals(ms: int, held: bool = False, then: dict | None = None):
    """decide: the first ask a kept pass of ``ms``; the second (the background renewal) never answered
    when ``held``, else ``then`` (default: the same kept pass); any later one the kept pass."""
    first = {**KEEP, "cache": {"ms": ms, "epoch": 0}}
    asked = [0]
    never = asyncio.Event()

    async def unanswered() -> dict:
        await never.wait()
        return first

    def script(msg: dict):
        if msg["type"] != "decide":
            raise AssertionError(f"unexpected message {msg}")
        asked[0] += 1
        if asked[0] == 2:
            return unanswered() if held else (then or first)
        return first

    return script


def answer(decision: dict):
    def script(msg: dict) -> dict:
        if msg["type"] != "decide":
            raise AssertionError(f"unexpected message {msg}")
        return decision

    return script


class Reuse(PluginCase):
    async def test_the_same_request_is_answered_from_the_kept_decision_with_its_edits(self) -> None:
        s = await self.start(answer(KEEP))
        for _ in range(3):
            status, _, _ = await s.get("/prompt", headers={"Authorization": "Bearer t1", "Comfy-User": "mallory"})
            self.assertEqual(status, 200)
            seen = s.host.seen["prompt_get"]["headers"]
            self.assertEqual(seen["comfy-user"], "alice", "the kept decision's edits apply every time")
            self.assertNotIn("authorization", seen)
        self.assertEqual(len(s.fake.decides()), 1, "asked once, then reused")
        self.assertEqual(s.host.calls["prompt_get"], 3)

    async def test_anything_different_in_the_description_asks_again(self) -> None:
        s = await self.start(answer(KEEP))
        base = {"Authorization": "Bearer t1"}
        rows = [
            ("the same request", "GET", "/prompt", base, False),
            ("another credential", "GET", "/prompt", {"Authorization": "Bearer t2"}, True),
            ("no credential", "GET", "/prompt", {}, True),
            ("a cookie added", "GET", "/prompt", {**base, "Cookie": "s=1"}, True),
            ("another query", "GET", "/prompt?x=1", base, True),
            ("another path", "GET", "/queue", base, True),
            ("another method", "HEAD", "/prompt", base, True),
            ("a forwarded-for header", "GET", "/prompt", {**base, "X-Forwarded-For": "10.0.0.9"}, True),
            ("another origin", "GET", "/prompt", {**base, "Origin": "http://evil.example"}, True),
            ("another host", "GET", "/prompt", {**base, "Host": "other.example"}, True),
        ]
        await s.get("/prompt", headers=base)
        for label, method, path, headers, asks in rows:
            before = len(s.fake.decides())
            status, _, _ = await s.request(method, path, headers=headers)
            self.assertEqual(status, 200, label)
            self.assertEqual(len(s.fake.decides()) - before, 1 if asks else 0, label)


class KeptBounds(PluginCase):
    """What is held stays bounded: a description over the per-request bound is decided every time,
    and past the bound of all descriptions held together the least recently kept goes first."""

    @staticmethod
    def cookies(mark: str, total: int) -> CIMultiDict:
        # several Cookie lines (aiohttp caps one line near 8 KB); the description joins them into one
        lines, size = CIMultiDict(), 0
        while size < total:
            value = f"{mark}{size}=" + "x" * min(4000, total - size)
            lines.add("Cookie", value)
            size += len(value)
        return lines

    async def test_a_description_over_the_size_bound_is_decided_every_time(self) -> None:
        s = await self.start(answer(KEEP))
        bound = s.plugin.kept_decisions._KEPT_DESCRIPTION_MAX
        rows = [("just under the bound", self.cookies("a", bound - 200), 1), ("over the bound", self.cookies("b", bound + 10), 2)]
        for label, headers, asked in rows:
            before = len(s.fake.decides())
            for _ in range(2):
                status, _, _ = await s.get("/prompt", headers=headers)
                self.assertEqual(status, 200, label)
            self.assertEqual(len(s.fake.decides()) - before, asked, label)

    async def test_past_the_bound_of_all_held_the_least_recently_kept_goes_first(self) -> None:
        s = await self.start(answer(KEEP))
        module = s.plugin.kept_decisions
        module._KEPT_SIZE_MAX = 40_000  # ten descriptions of about 4 KB each
        users = [self.cookies(f"u{i}-", 3800) for i in range(11)]
        for headers in users:
            await s.get("/prompt", headers=headers)
        self.assertEqual(len(s.fake.decides()), 11)
        await s.get("/prompt", headers=users[10])
        self.assertEqual(len(s.fake.decides()), 11, "the last one kept is still held")
        await s.get("/prompt", headers=users[0])
        self.assertEqual(len(s.fake.decides()), 12, "the first one kept went to make room")


class KeptFilter(PluginCase):
    """A kept pass may carry a filter with a memo (a keepable behaviour's read: /queue, /history,
    /object_info): the kept decision's filter applies every time, its memo result is reused for a
    byte-identical host answer, and any other answer is filtered by the sidecar with the kept ctx."""

    def script(self, memo: str = "alice 3"):
        def run(msg: dict):
            if msg["type"] == "decide":
                return {**KEEP, "filter": {"name": "queue", "ctx": {"step": "s-queue-alice"}, "memo": memo}}
            if msg["type"] == "filter":
                return {"action": "replace", "memo": memo, "body_text": "filtered:" + msg["body_text"]}
            raise AssertionError(f"unexpected message {msg}")
        return run

    async def test_a_filtered_read_is_decided_once_and_filtered_once_while_nothing_changes(self) -> None:
        s = await self.start(self.script())
        s.host.queue_body = {"queue_running": [], "n": 18446744073709551615}
        bodies = []
        for _ in range(3):
            status, _, body = await s.get("/queue", headers={"Authorization": "Bearer t1"})
            self.assertEqual(status, 200)
            bodies.append(body)
            self.assertEqual(s.host.seen["queue"]["headers"]["comfy-user"], "alice")
        self.assertEqual(bodies[0], bodies[2])
        self.assertTrue(bodies[0].startswith(b"filtered:") and b"18446744073709551615" in bodies[0], bodies[0][:80])
        self.assertEqual(len(s.fake.decides()), 1, "decided once, then kept")
        self.assertEqual(len(s.fake.of_type("filter")), 1, "filtered once, then the memo's result")
        self.assertEqual(s.host.calls["queue"], 3, "the host answers every request")

    async def test_a_new_host_answer_under_a_kept_decision_is_filtered_by_the_sidecar_with_its_ctx(self) -> None:
        s = await self.start(self.script())
        s.host.queue_body = {"v": 1}
        await s.get("/queue")
        s.host.queue_body = {"v": 2}
        status, _, body = await s.get("/queue")
        self.assertEqual((status, body), (200, b'filtered:{"v": 2}'))
        filters = s.fake.of_type("filter")
        self.assertEqual(len(filters), 2, "the changed answer is never taken from the memo")
        self.assertEqual(filters[1]["ctx"], {"step": "s-queue-alice"})
        self.assertEqual(len(s.fake.decides()), 1)

    async def test_a_result_under_another_memo_than_the_kept_decisions_is_never_reused(self) -> None:
        # the sidecar's memo moved between the kept decision and its filter (a prompt recorded
        # meanwhile): that result is not stored under the kept decision's memo
        def run(msg: dict):
            if msg["type"] == "decide":
                return {**KEEP, "filter": {"name": "queue", "ctx": {"step": "s-queue-alice"}, "memo": "alice 3"}}
            return {"action": "replace", "memo": "alice 4", "body_text": "filtered:" + msg["body_text"]}
        s = await self.start(run)
        s.host.queue_body = {"v": 1}
        for _ in range(3):
            status, _, body = await s.get("/queue")
            self.assertEqual((status, body), (200, b'filtered:{"v": 1}'))
        self.assertEqual(len(s.fake.decides()), 1, "the decision is kept")
        self.assertEqual(len(s.fake.of_type("filter")), 3, "the same host answer is filtered by the sidecar every time")

    async def test_forget_ends_a_kept_filtered_read_and_the_new_memo_filters_again(self) -> None:
        s = await self.start(self.script())
        s.host.queue_body = {"v": 1}
        await s.get("/queue")
        await s.get("/queue")
        self.assertEqual((len(s.fake.decides()), len(s.fake.of_type("filter"))), (1, 1))
        # a prompt was recorded: the sidecar's memo moved, and it said so with a forget
        s.fake.decide = lambda m: {**self.script("alice 4")(m), **({"cache": {"ms": 5000, "epoch": 1}} if m["type"] == "decide" else {})}
        s.fake.push({"type": "forget", "epoch": 1})
        deadline = time.monotonic() + 5
        while len(s.fake.decides()) < 2:
            await s.get("/queue")
            self.assertLess(time.monotonic(), deadline, "asked again after forget")
        self.assertEqual(len(s.fake.of_type("filter")), 2, "the same host answer under the new memo is filtered again")


class NotKept(PluginCase):
    async def test_only_plain_passes_with_a_valid_cache_field_are_kept(self) -> None:
        rows = [
            ("a respond", {"action": "respond", "status": 401, "cache": {"ms": 5000, "epoch": 0}}),
            ("a pass with a filter without a memo", {**KEEP, "filter": {"name": "queue", "ctx": {}}}),
            ("a pass with a filter whose memo is not text", {**KEEP, "filter": {"name": "queue", "ctx": {}, "memo": 3}}),
            ("a pass with a filter that is not an object", {**KEEP, "filter": "queue"}),
            ("a pass with a WebSocket tag", {**KEEP, "ws_tag": "t"}),
            ("no cache field", {"action": "pass"}),
            ("ms of zero", {**KEEP, "cache": {"ms": 0, "epoch": 0}}),
            ("ms above the limit", {**KEEP, "cache": {"ms": 3_600_000, "epoch": 0}}),
            ("ms as a string", {**KEEP, "cache": {"ms": "5000", "epoch": 0}}),
            ("no epoch", {**KEEP, "cache": {"ms": 5000}}),
            ("an epoch the plugin has not reached", {**KEEP, "cache": {"ms": 5000, "epoch": 5}}),
            ("cache not an object", {**KEEP, "cache": 60_000}),
        ]
        for label, decision in rows:
            with self.subTest(label):
                s = await self.start(answer(decision))
                if decision.get("filter"):
                    s.fake.decide = lambda m, d=decision: d if m["type"] == "decide" else {"action": "keep"}
                await s.get("/prompt")
                await s.get("/prompt")
                self.assertEqual(len(s.fake.decides()), 2, f"{label}: asked every time")


class Ending(PluginCase):
    async def test_forget_drops_every_kept_decision_and_older_answers_are_not_kept(self) -> None:
        s = await self.start(answer(KEEP))
        await s.get("/prompt")
        await s.get("/prompt")
        self.assertEqual(len(s.fake.decides()), 1)
        s.fake.push({"type": "forget", "epoch": 1})
        await until_asked(s, 2, "asked again after forget")
        # the sidecar's answer still names epoch 0: decided before the change the plugin knows of
        await s.get("/prompt")
        self.assertEqual(len(s.fake.decides()), 3, "an answer older than the last forget is not kept")
        s.fake.decide = answer({**KEEP, "cache": {"ms": 5000, "epoch": 1}})
        await s.get("/prompt")
        await s.get("/prompt")
        self.assertEqual(len(s.fake.decides()), 4, "an answer of the current epoch is kept again")

    async def test_the_time_limit_ends_a_kept_decision(self) -> None:
        # the background renewal in its last quarter is never answered: the time alone ends it
        s = await self.start(renewals(held=True, ms=300))
        await s.get("/prompt")
        asked_at = time.monotonic()
        await s.get("/prompt")
        self.assertEqual(len(s.fake.decides()), 1, "kept within its time")

        statuses = await get_until_asked(s, 2, "asked again in the background in its last quarter")
        self.assertGreaterEqual(time.monotonic() - asked_at, 0.2, "not before its last quarter")
        statuses += await get_until_asked(s, 3, "asked again once the time ran out, the renewal still unanswered")
        self.assertGreaterEqual(time.monotonic() - asked_at, 0.29, "not before its time")
        self.assertEqual(set(statuses), {200}, "no request waited for the unanswered renewal")

    async def test_a_lost_sidecar_ends_every_kept_decision(self) -> None:
        s = await self.start(answer(KEEP))
        await s.get("/prompt")
        await s.get("/prompt")
        self.assertEqual(len(s.fake.decides()), 1)
        await s.fake.stop()
        status, _, body = await s.get("/prompt")
        assert_unavailable(self, status, body)
        self.assertEqual(s.host.calls["prompt_get"], 2, "the host never ran the request")


class Renewal(PluginCase):
    """A kept decision in the last quarter of its time is asked about again in the background by a
    request that reuses it: no request waits for that round trip, and the answer replaces or ends it."""

    async def test_renewed_without_waiting_and_the_new_answer_is_used_past_the_first_ones_end(self) -> None:
        s = await self.start(renewals(ms=2000))
        await s.get("/prompt")
        asked_at = time.monotonic()
        statuses = await get_until_asked(s, 2, "asked again in the background")
        renewed_after = time.monotonic() - asked_at
        self.assertGreaterEqual(renewed_after, 1.49, "not before its last quarter")
        self.assertLess(renewed_after, 2.0, "asked while the first answer was still in use, not at its end")
        # past the first answer's end (2 s), before the renewed one's last quarter (from about 3 s)
        while time.monotonic() - asked_at < 2.3:
            status, _, _ = await s.get("/prompt")
            statuses.append(status)
        self.assertLess(time.monotonic() - asked_at, renewed_after + 1.5, "the check ran before the renewed answer was due itself")
        self.assertEqual(len(s.fake.decides()), 2, "the renewed answer was reused past the first one's end")
        self.assertEqual(set(statuses), {200})
        self.assertEqual(s.host.calls["prompt_get"], len(statuses) + 1, "every request ran on the host")

    async def test_a_renewal_answered_with_a_refusal_ends_the_kept_decision_before_its_time(self) -> None:
        refusal = {"action": "respond", "status": 403, "headers": [["Content-Type", "application/json"]],
                   "body_text": '{"error":"Forbidden","code":"FORBIDDEN","statusCode":403}'}
        s = await self.start(renewals(ms=2000, then=refusal))
        await s.get("/prompt")
        asked_at = time.monotonic()
        await get_until_asked(s, 2, "asked again in the background")
        s.fake.decide = answer(refusal)
        deadline = time.monotonic() + 5
        while True:
            status, _, _ = await s.get("/prompt")
            if status == 403:
                break
            self.assertLess(time.monotonic(), deadline, "never refused")
        self.assertLess(time.monotonic() - asked_at, 2.0, "refused before the kept decision's own end")
        self.assertEqual(len(s.fake.decides()), 3, "the request after the refusing renewal asked for itself")

    async def test_a_malformed_renewal_ends_the_kept_decision_with_an_error_line(self) -> None:
        import logging

        from .support import LOGS

        s = await self.start(renewals(ms=2000, then={"action": "nonsense"}))
        await s.get("/prompt")
        asked_at = time.monotonic()
        await get_until_asked(s, 2, "asked again in the background")
        s.fake.decide = answer({"action": "pass"})
        await get_until_asked(s, 3, "asked again after the malformed renewal")
        self.assertLess(time.monotonic() - asked_at, 2.0, "before the kept decision's own end")
        self.assertEqual(len(LOGS.lines(logging.ERROR, "malformed sidecar answer")), 1)

    def test_a_failed_renewal_ends_only_the_answer_it_renewed(self) -> None:
        kept = plugin_module("kept_decisions").KeptDecisions()
        fields = ("GET", "/prompt")
        old = {**KEEP, "cache": {"ms": 5000, "epoch": 0}}
        self.assertTrue(kept.keep(fields, 10, old))
        kept.forget(1)  # a change: then a request kept a newer answer
        newer = {**KEEP, "cache": {"ms": 5000, "epoch": 1}}
        self.assertTrue(kept.keep(fields, 10, newer))
        kept.drop(fields, old)
        self.assertIs(usable(kept, fields), newer, "the newer answer stays")
        kept.drop(fields, newer)
        self.assertIsNone(usable(kept, fields), "the answer renewed ends")


def memo_script(memo: str | None = "alice 3", answer_memo: str | None = "alice 3"):
    """decide: a pass with an object_info-like filter carrying ``memo``; filter: replace with a marked copy."""
    def script(msg: dict):
        if msg["type"] == "decide":
            spec = {"name": "object_info", "ctx": {"k": 1}}
            if memo is not None:
                spec["memo"] = memo
            return {"action": "pass", "filter": spec}
        if msg["type"] == "filter":
            out = {"action": "replace", "body_text": "filtered:" + msg["body_text"]}
            if answer_memo is not None:
                out["memo"] = answer_memo
            return out
        raise AssertionError(f"unexpected message {msg}")

    return script


class FilterMemo(PluginCase):
    async def test_a_byte_identical_answer_under_the_same_memo_is_filtered_without_the_sidecar(self) -> None:
        s = await self.start(memo_script())
        s.host.queue_body = {"queue_running": [], "n": 18446744073709551615}
        results = [await s.get("/queue") for _ in range(3)]
        for status, _, body in results:
            self.assertEqual(status, 200)
            self.assertTrue(body.startswith(b"filtered:"), body[:40])
        self.assertEqual(results[0][2], results[2][2])
        self.assertEqual(len(s.fake.of_type("filter")), 1, "filtered once, then reused")
        self.assertEqual(len(s.fake.decides()), 3, "every request is still decided")

    async def test_anything_different_asks_the_sidecar_again(self) -> None:
        s = await self.start(memo_script())
        s.host.queue_body = {"v": 1}
        await s.get("/queue")
        rows = [
            ("the same answer", lambda: None, "/queue", 0),
            ("another host answer", lambda: setattr(s.host, "queue_body", {"v": 2}), "/queue", 1),
            ("another query", lambda: None, "/queue?x=1", 1),
            ("another memo", lambda: setattr(s.fake, "decide", memo_script("alice 4", "alice 4")), "/queue", 1),
        ]
        for label, change, path, asks in rows:
            change()
            before = len(s.fake.of_type("filter"))
            status, _, body = await s.get(path)
            self.assertEqual(status, 200, label)
            self.assertTrue(body.startswith(b"filtered:"), label)
            self.assertEqual(len(s.fake.of_type("filter")) - before, asks, label)

    async def test_not_reused_without_a_memo_or_when_the_answer_names_another(self) -> None:
        for label, script in (("no memo", memo_script(None, None)), ("answer under another memo", memo_script("alice 3", "alice 4")),
                              ("answer without memo", memo_script("alice 3", None))):
            with self.subTest(label):
                s = await self.start(script)
                await s.get("/queue")
                await s.get("/queue")
                self.assertEqual(len(s.fake.of_type("filter")), 2, label)

    async def test_a_new_sidecar_connection_filters_again(self) -> None:
        s = await self.start(memo_script())
        await s.get("/queue")
        await s.get("/queue")
        self.assertEqual(len(s.fake.of_type("filter")), 1)
        for writer in list(s.fake.open_connections):
            writer.close()
        await s.wait_ready()
        await s.get("/queue")
        self.assertEqual(len(s.fake.of_type("filter")), 2, "a memo of the earlier connection is not reused")


class ForgetBehindALargeFrame(PluginCase):
    async def test_a_forget_queued_behind_megabytes_ends_the_kept_decision_before_the_next_request(self) -> None:
        from .support import encode_frame

        s = await self.start(answer(KEEP))
        await s.get("/prompt")
        await s.get("/prompt")
        self.assertEqual(len(s.fake.decides()), 1)
        # 8 MB of an answer nobody waits for (ignored), then the forget: one read takes 256 KiB, so
        # unless the turn of the loop that sees the socket readable reads everything waiting in it,
        # the next request would be passed on the kept one while the forget still waits there
        for writer in list(s.fake.open_connections):
            # room in the kernel for all of it at once, as a sidecar's socket under a larger buffer
            # has: the whole backlog is then the plugin's to read, turn by turn
            try:
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, 32 * 1024 * 1024)
            except OSError as exc:
                self.skipTest(f"cannot raise the socket buffer here ({exc}); the scenario needs it")
            writer.write(encode_frame({"id": 10**9, "action": "keep"}, b"x" * (8 * 1024 * 1024)) + encode_frame({"type": "forget", "epoch": 1}))
            await writer.drain()
        status, _, _ = await s.get("/prompt")
        self.assertEqual(status, 200)
        self.assertEqual(len(s.fake.decides()), 2, "asked again: the forget was read first")


class FilterMemoBounds(unittest.TestCase):
    """The store itself: every user polling has an entry; the least recently used goes first, and
    the bytes stay bounded whatever the entry count."""

    def test_least_recently_used_goes_first(self) -> None:
        memo = plugin_module("response_filter").FilterMemo(max_entries=3, max_bytes=1 << 20)
        for user in ("a", "b", "c"):
            memo.put((1, "queue", "/queue", user), b"body", "replace", user.encode())
        self.assertEqual(memo.get((1, "queue", "/queue", "a"), b"body"), ("replace", b"a"))  # a used again
        memo.put((1, "queue", "/queue", "d"), b"body", "replace", b"d")
        self.assertIsNone(memo.get((1, "queue", "/queue", "b"), b"body"), "the least recently used went")
        for user in ("a", "c", "d"):
            self.assertEqual(memo.get((1, "queue", "/queue", user), b"body"), ("replace", user.encode()), user)
        self.assertIsNone(memo.get((1, "queue", "/queue", "a"), b"another body"), "only a byte-identical answer")

    def test_bytes_are_bounded(self) -> None:
        memo = plugin_module("response_filter").FilterMemo(max_entries=64, max_bytes=4000)
        for i in range(10):
            memo.put((1, "object_info", "/object_info", str(i)), b"x" * 500, "replace", b"y" * 500)
        self.assertLessEqual(memo._bytes, 4000)
        self.assertEqual(len(memo._entries), 4)
        memo.put((1, "object_info", "/object_info", "big"), b"x" * 900, "replace", b"y" * 200)
        self.assertIsNone(memo.get((1, "object_info", "/object_info", "big"), b"x" * 900), "over a quarter of the bound: not kept")


class _OneFile(unittest.TestCase):
    """A folder ``a`` with x.png reached through a link (``link/x.png``), a folder ``b`` with other
    bytes, and the ways of putting other bytes under that path, for the kept-on-a-file rows."""

    def setUp(self) -> None:
        import os
        import tempfile

        self.os = os
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        root = self.dir.name
        for sub in ("a", "b"):
            os.makedirs(os.path.join(root, sub))
            with open(os.path.join(root, sub, "x.png"), "wb") as f:
                f.write(b"clean-bytes" if sub == "a" else b"other-bytes")
        os.symlink(os.path.join(root, "a"), os.path.join(root, "link"))
        self.path = os.path.join(root, "link", "x.png")  # the path the handler opens (through a link)
        self.kept_module = plugin_module("kept_decisions")
        self.kept = self.kept_module.KeptDecisions()
        self.fields = ("GET", "/view", "filename=x.png&subfolder=link", "Bearer t1")

    def rewrite_same_size(self) -> None:
        with open(self.path, "r+b") as f:
            f.write(b"NSFW-bytes!")

    def rename_over(self) -> None:
        other = self.os.path.join(self.dir.name, "a", "new.png")
        with open(other, "wb") as f:
            f.write(b"clean-bytes")  # the same bytes, another file
        self.os.replace(other, self.path)

    def relink(self) -> None:
        root = self.dir.name
        self.os.unlink(self.os.path.join(root, "link"))
        self.os.symlink(self.os.path.join(root, "b"), self.os.path.join(root, "link"))

    def changes(self) -> list[tuple[str, Any]]:
        """Every way of putting other bytes under the path, by name."""
        os = self.os
        return [
            ("rewritten in place, same size", self.rewrite_same_size),
            ("another file renamed over it", self.rename_over),
            ("a link in the path moved to another folder", self.relink),
            ("rewritten with its old mtime put back", self.mtime_back),
            ("truncated", lambda: open(self.path, "wb").close()),
            ("deleted", lambda: os.unlink(self.path)),
            ("its mode changed", lambda: os.chmod(self.path, 0o600)),
        ]

    def mtime_back(self) -> None:
        st = self.os.stat(self.path)
        with open(self.path, "r+b") as f:
            f.write(b"NSFW-bytes!")
        self.os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns))  # the writer puts the old mtime back: ctime still moves


class KeptOnAFile(_OneFile):
    """A pass decided on one file (``cache.file``: GET /view) is reused only while the path the host
    opens names that very file, unchanged: every way of putting other bytes under the path ends it
    (attack rows). Kept outside a running loop, as where inotify is missing, it is checked with one
    stat per reuse (per turn, in a loop); KeptOnAWatchedFile below has the watched way."""

    def next_tick(self) -> None:
        """Until the kernel's file clock (coarse: a few ms) has moved past the kept file's ctime, so a
        change is stamped with a later time (bounded). Within one tick a same-size rewrite is not seen:
        docs/decisions.md says so."""
        probe = self.os.path.join(self.dir.name, "probe")
        kept_ctime = self.os.stat(self.path).st_ctime_ns
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            with open(probe, "wb"):
                pass
            if self.os.stat(probe).st_mtime_ns > kept_ctime:
                return
        raise AssertionError("the file clock did not move in 2 s")

    def keep(self, stamp: str | None = None, path: str | None = None) -> None:
        if stamp is None:
            stamp = self.kept_module.file_stamp(self.os.stat(self.path))
        answer = {"action": "pass", "cache": {"ms": 5000, "epoch": 0, "file": {"path": path or self.path, "stamp": stamp}}}
        self.kept.keep(self.fields, 100, answer)

    def test_reused_while_the_file_is_unchanged(self) -> None:
        self.keep()
        for _ in range(3):
            self.assertIsNotNone(usable(self.kept, self.fields))

    def test_every_change_under_the_path_ends_the_reuse(self) -> None:
        rows = self.changes()
        for label, change in rows:
            with self.subTest(label):
                self.setUp()
                self.keep()
                self.assertIsNotNone(usable(self.kept, self.fields), "kept before the change")
                self.next_tick()
                change()
                self.assertIsNone(usable(self.kept, self.fields), label)

    def test_in_the_loop_one_stat_a_turn_and_every_change_is_seen_by_the_next_turn(self) -> None:
        """Inside the host's loop the stamp is read once per path per turn (several /view of one file
        are decided in one turn under load); a request decided in a later turn than the change gets
        a stat taken after it: each change row again, the change made between two turns."""
        import asyncio
        from unittest import mock

        os = self.os

        async def stats_per_turn() -> list[int]:
            with mock.patch.object(os, "stat", wraps=os.stat) as stat:
                counts = []
                for _ in range(2):
                    for _ in range(3):
                        self.assertIsNotNone(usable(self.kept, self.fields))
                    counts.append(stat.call_count)
                    await asyncio.sleep(0)  # the next turn of the loop
                return counts

        self.keep()
        self.assertEqual(asyncio.run(stats_per_turn()), [1, 2], "one stat per turn, a new one each turn")

        rows = [
            ("rewritten in place, same size", self.rewrite_same_size),
            ("another file renamed over it", self.rename_over),
            ("a link in the path moved to another folder", self.relink),
            ("deleted", lambda: os.unlink(self.path)),
        ]
        for label, change in rows:
            with self.subTest(label):
                self.setUp()
                self.keep()

                async def scenario() -> None:
                    self.next_tick()
                    self.assertIsNotNone(usable(self.kept, self.fields), "kept before the change (its stamp read this turn)")
                    change()
                    await asyncio.sleep(0)  # a request read after the change is decided in a later turn
                    self.assertIsNone(usable(self.kept, self.fields), label)

                asyncio.run(scenario())

    def test_a_stamp_that_does_not_match_now_or_a_malformed_condition_is_never_used(self) -> None:
        rows = [
            ("another stamp", {"path": self.path, "stamp": "1:2:3:4:5"}),
            ("no such path", {"path": self.path + ".gone", "stamp": "1:2:3:4:5"}),
            ("a path with NUL", {"path": self.path + "\x00", "stamp": "1:2:3:4:5"}),
        ]
        for label, spec in rows:
            with self.subTest(label):
                self.kept.forget()
                self.kept.keep(self.fields, 100, {"action": "pass", "cache": {"ms": 5000, "epoch": 0, "file": spec}})
                self.assertIsNone(usable(self.kept, self.fields), label)
        for label, spec in [("not an object", "x"), ("no stamp", {"path": self.path}), ("a numeric stamp", {"path": self.path, "stamp": 5})]:
            with self.subTest(label):
                self.kept.forget()
                self.kept.keep(self.fields, 100, {"action": "pass", "cache": {"ms": 5000, "epoch": 0, "file": spec}})
                self.assertFalse(kept_at_all(self.kept, self.fields), f"{label}: not kept at all")


class KeptOnAWatchedFile(_OneFile):
    """Inside the host's loop on Linux, a pass decided on a file is kept on a watch (file_watch.py):
    the file and every folder on the way to it are watched when it is kept, a reuse reads nothing,
    and every change to what the path names ends it before a request sent after the change is
    decided. A request is modelled as the host gets one: its bytes arrive on a socket after the
    change, the loop's reader for that socket runs, and the decision is asked for in a later turn."""

    def setUp(self) -> None:
        super().setUp()
        self.watch_module = plugin_module("file_watch")
        if not self.watch_module.FileWatch(lambda _p: None).available:
            self.skipTest("no inotify on this platform: the stat rows of KeptOnAFile are what runs")

    def watches(self) -> int:
        """The number of watches the kernel holds for this watch's descriptor."""
        return len(self.watch_ids())

    def watch_ids(self) -> set[str]:
        """The watches the kernel holds for this watch's descriptor (/proc/self/fdinfo), by their
        numbers (the kernel never gives a removed watch's number to the next one)."""
        fd = self.kept._watch._fd
        if fd < 0:
            return set()
        with open(f"/proc/self/fdinfo/{fd}") as f:
            return {line.split()[1] for line in f if line.startswith("inotify wd:")}

    def answer_for(self, stamp: str | None = None) -> dict:
        if stamp is None:
            stamp = self.kept_module.file_stamp(self.os.stat(self.path))
        return {"action": "pass", "cache": {"ms": 5000, "epoch": 0, "file": {"path": self.path, "stamp": stamp}}}

    @staticmethod
    async def request_after() -> None:
        """A request sent now: its bytes reach the loop through a socket, and it is decided in a
        later turn than the one that read them (aiohttp hands a parsed request to a task)."""
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        arrived = loop.create_future()

        def readable() -> None:
            a.recv(16)
            loop.remove_reader(a.fileno())
            arrived.set_result(None)

        loop.add_reader(a.fileno(), readable)
        try:
            b.send(b"GET /view")
            await arrived
        finally:
            a.close()
            b.close()

    def run_in_loop(self, scenario) -> None:
        async def body() -> None:
            try:
                await scenario()
            finally:
                self.kept._watch.close()

        asyncio.run(body())

    def test_a_reuse_reads_nothing_across_turns(self) -> None:
        from unittest import mock

        async def scenario() -> None:
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()))
            with mock.patch.object(self.os, "stat", wraps=self.os.stat) as stat:
                for _ in range(5):
                    for _ in range(3):
                        self.assertIsNotNone(usable(self.kept, self.fields))
                    await self.request_after()
                self.assertEqual(stat.call_count, 0, "no stat on any turn while the file is watched")

        self.run_in_loop(scenario)

    def test_every_change_to_what_the_path_names_ends_it_before_the_next_request(self) -> None:
        os = self.os

        def through_a_hard_link_elsewhere() -> None:
            root = self.dir.name
            os.makedirs(os.path.join(root, "elsewhere"))
            other = os.path.join(root, "elsewhere", "same-inode.png")
            os.link(os.path.join(root, "a", "x.png"), other)
            with open(other, "r+b") as f:  # the same file, written by a name in an unwatched folder
                f.write(b"NSFW-bytes!")

        def folder_swapped() -> None:
            root = self.dir.name
            os.rename(os.path.join(root, "a"), os.path.join(root, "a-old"))
            os.rename(os.path.join(root, "b"), os.path.join(root, "a"))

        def folder_above_swapped() -> None:
            # the folder holding the link and the real folder, moved away and another put in its place
            root = self.dir.name
            moved = root + "-moved"
            os.rename(root, moved)
            os.makedirs(os.path.join(root, "a"))
            with open(os.path.join(root, "a", "x.png"), "wb") as f:
                f.write(b"NSFW-bytes!")
            os.symlink(os.path.join(root, "a"), os.path.join(root, "link"))
            self.addCleanup(lambda: __import__("shutil").rmtree(moved, ignore_errors=True))

        rows = [
            *self.changes(),
            ("written through a hard link in another folder", through_a_hard_link_elsewhere),
            ("its folder swapped for another", folder_swapped),
            ("a folder above it swapped for another", folder_above_swapped),
        ]
        for label, change in rows:
            with self.subTest(label):
                self.setUp()

                async def scenario() -> None:
                    self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()), "kept on a watch")
                    await self.request_after()
                    self.assertIsNotNone(usable(self.kept, self.fields), "reused before the change")
                    change()
                    await self.request_after()
                    self.assertIsNone(usable(self.kept, self.fields), label)

                self.run_in_loop(scenario)

    def test_a_change_elsewhere_in_its_folder_leaves_it_kept(self) -> None:
        os = self.os

        async def scenario() -> None:
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()))
            with open(os.path.join(self.dir.name, "a", "ComfyUI_00001_.png"), "wb") as f:
                f.write(b"a new output beside it")
            os.unlink(os.path.join(self.dir.name, "b", "x.png"))
            await self.request_after()
            self.assertIsNotNone(usable(self.kept, self.fields), "another file's change ends nothing")

        self.run_in_loop(scenario)

    def test_a_file_changed_since_the_sidecar_decided_is_not_kept(self) -> None:
        async def scenario() -> None:
            answer = self.answer_for()
            with open(self.path, "ab") as f:
                f.write(b"more")
            self.assertFalse(self.kept.keep(self.fields, 100, answer), "the stamp read once the watch is on differs")
            self.assertFalse(kept_at_all(self.kept, self.fields))

        self.run_in_loop(scenario)

    def test_past_the_watch_bound_it_is_checked_the_old_way_and_changes_are_still_seen(self) -> None:
        from unittest import mock

        os = self.os

        async def scenario() -> None:
            with mock.patch.object(self.watch_module, "_WATCHES_MAX", 2):
                self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()), "kept, on stats")
                await self.request_after()
                with mock.patch.object(os, "stat", wraps=os.stat) as stat:
                    self.assertIsNotNone(usable(self.kept, self.fields))
                    self.assertEqual(stat.call_count, 1, "not watched: its stamp read at the use")
                with open(self.path, "r+b") as f:
                    f.write(b"NSFW-bytes!")
                await self.request_after()
                self.assertIsNone(usable(self.kept, self.fields))

        self.run_in_loop(scenario)

    def test_an_overflowed_event_queue_ends_every_decision_kept_on_a_watch(self) -> None:
        os = self.os
        with open("/proc/sys/fs/inotify/max_queued_events") as f:
            limit = int(f.read())
        if limit > 20000:
            self.skipTest(f"the kernel queues {limit} events: too many to overflow here")

        async def scenario() -> None:
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()))
            there, back = os.path.join(self.dir.name, "a", "r"), os.path.join(self.dir.name, "a", "s")
            open(there, "wb").close()
            for _ in range(limit // 2 + 10):  # two events each (IN_MOVED_FROM, IN_MOVED_TO), none about x.png
                os.rename(there, back)
                there, back = back, there
            await self.request_after()
            self.assertIsNone(usable(self.kept, self.fields), "an overflow may hide a change: nothing watched is reused")
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()), "and watching starts again")
            await self.request_after()
            self.assertIsNotNone(usable(self.kept, self.fields))

        self.run_in_loop(scenario)

    def test_a_watch_is_held_only_while_a_decision_needs_it(self) -> None:
        """The kernel's own list of the watches (/proc/self/fdinfo): none left once the decisions
        on them end by forget, by a drop, or by their time running out as others are kept."""
        os = self.os

        other = os.path.join(self.dir.name, "b", "x.png")
        other_answer = {"action": "pass", "cache": {"ms": 5000, "epoch": 0, "file": {"path": other, "stamp": self.kept_module.file_stamp(os.stat(other))}}}

        async def scenario() -> None:
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()))
            self.assertTrue(self.kept.keep(("other",), 100, other_answer))
            held = self.watches()
            self.assertGreater(held, 0)
            self.kept.drop(("other",))
            self.assertLess(self.watches(), held, "the other file's own watch went with its decision")
            self.assertGreater(self.watches(), 0, "the first decision's are still held")
            self.kept.forget()
            self.assertEqual(self.watches(), 0, "forget: nothing held")
            short = {**self.answer_for(), "cache": {**self.answer_for()["cache"], "ms": 1}}
            self.assertTrue(self.kept.keep(self.fields, 100, short))
            self.assertGreater(self.watches(), 0)
            await asyncio.sleep(0.01)  # its time ran out: the next decision kept lets it go
            self.assertTrue(self.kept.keep(("other",), 100, other_answer))
            self.assertFalse(kept_at_all(self.kept, self.fields), "ended with its watches")
            self.kept.drop(("other",))
            self.assertEqual(self.watches(), 0)

        self.run_in_loop(scenario)

    def test_a_renewal_keeps_the_watches_it_replaces_and_still_hears_a_change(self) -> None:
        """The background renewal of a kept decision (decision_client.py) keeps the same answer
        again: the watches stay on (none removed and added again) and a change after it is heard."""

        async def scenario() -> None:
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()))
            before = self.watch_ids()
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()))
            self.assertEqual(self.watch_ids(), before, "the very same watches")
            self.assertIsNotNone(usable(self.kept, self.fields))
            self.rewrite_same_size()
            await self.request_after()
            self.assertIsNone(usable(self.kept, self.fields), "a change after the renewal is heard")
            self.assertEqual(self.watches(), 0, "and its watches went with it")

        self.run_in_loop(scenario)

    def test_a_chain_of_links_or_dotdot_after_a_link_is_checked_the_old_way_and_its_change_seen(self) -> None:
        """The kernel walks entries neither spelling of such a path shows (the middle link of a
        chain, the link before ``..``): not watched, its stamp read at each use (rows of a review)."""
        os = self.os

        def chain() -> tuple[str, callable]:
            root = self.dir.name
            os.makedirs(os.path.join(root, "mid"))
            os.symlink(os.path.join(root, "a"), os.path.join(root, "mid", "link"))
            os.symlink(os.path.join(root, "mid", "link"), os.path.join(root, "out"))
            path = os.path.join(root, "out", "x.png")

            def retarget() -> None:
                os.unlink(os.path.join(root, "mid", "link"))
                os.symlink(os.path.join(root, "b"), os.path.join(root, "mid", "link"))

            return path, retarget

        def dotdot() -> tuple[str, callable]:
            root = self.dir.name
            os.makedirs(os.path.join(root, "a", "sub"))
            path = os.path.join(root, "link", "sub", "..", "x.png")  # link -> a, so a/x.png

            def retarget() -> None:
                os.unlink(os.path.join(root, "link"))
                os.symlink(os.path.join(root, "b"), os.path.join(root, "link"))

            return path, retarget

        for label, shape in (("a chain of two links", chain), ("`..` after a link", dotdot)):
            with self.subTest(label):
                self.setUp()
                path, change = shape()

                async def scenario() -> None:
                    answer = {"action": "pass", "cache": {"ms": 5000, "epoch": 0, "file": {"path": path, "stamp": self.kept_module.file_stamp(os.stat(path))}}}
                    self.assertTrue(self.kept.keep(self.fields, 100, answer))
                    self.assertFalse(self.watch_module.FileWatch(lambda _p: None).watch(path), "no watch for such a path")
                    await self.request_after()
                    self.assertIsNotNone(usable(self.kept, self.fields))
                    change()
                    await self.request_after()
                    self.assertIsNone(usable(self.kept, self.fields), label)

                self.run_in_loop(scenario)

    def test_refused_keeps_and_a_closed_watch_hold_nothing(self) -> None:
        """A decision whose file changed since the sidecar read it is not kept and gives its watches
        back (a user rewriting a file while viewing it must not use up the user's watches); a
        closed watch ends what was kept on it."""
        os = self.os

        async def scenario() -> None:
            for i in range(20):
                stale = self.answer_for()
                with open(self.path, "ab") as f:
                    f.write(b"x")
                self.assertFalse(self.kept.keep(self.fields, 100, stale))
            self.assertEqual(self.watches(), 0, "nothing held by the refused keeps")
            self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()))
            self.kept._watch.close()
            self.assertIsNone(usable(self.kept, self.fields), "a closed watch hears nothing: what it held ends")

        self.run_in_loop(scenario)

    def test_a_folder_swapped_while_the_watches_go_on_is_heard(self) -> None:
        """The way to the file changes between working it out and watching it (rows of a review):
        ``d`` swapped for a tree holding a hard link of the same file (so the stamp still matches),
        at each watch being added in turn; later that tree's folder is moved away and other bytes
        put under the path. Each time the later change is heard."""
        import shutil
        from unittest import mock

        os = self.os
        real_libc = self.watch_module._LIBC

        class SwapAt:
            """inotify with the tree swapped just before the n-th watch is added."""

            def __init__(self, n: int, swap) -> None:
                self.n, self.swap, self.calls = n, swap, 0
                self.inotify_init1 = real_libc.inotify_init1
                self.inotify_rm_watch = real_libc.inotify_rm_watch

            def inotify_add_watch(self, fd, path, mask):
                if self.calls == self.n:
                    self.swap()
                self.calls += 1
                return real_libc.inotify_add_watch(fd, path, mask)

        depth = len(self.watch_module.dependencies(os.path.join(self.dir.name, "d", "out", "sub", "x.png"))[0])
        for n in range(depth):
            with self.subTest(swap_before_watch=n):
                self.setUp()
                root = self.dir.name
                path = os.path.join(root, "d", "out", "sub", "x.png")
                os.makedirs(os.path.dirname(path))
                with open(path, "wb") as f:
                    f.write(b"clean-bytes")
                os.makedirs(os.path.join(root, "D2", "out", "sub"))
                os.link(path, os.path.join(root, "D2", "out", "sub", "x.png"))  # the same file in the new tree

                def swap() -> None:
                    os.rename(os.path.join(root, "d"), os.path.join(root, "d-old"))
                    os.rename(os.path.join(root, "D2"), os.path.join(root, "d"))

                def change_later() -> None:
                    os.rename(os.path.join(root, "d", "out", "sub"), os.path.join(root, "sub-away"))
                    os.makedirs(os.path.join(root, "d", "out", "sub"))
                    with open(path, "wb") as f:
                        f.write(b"NSFW-bytes!")

                async def scenario() -> None:
                    answer = {"action": "pass", "cache": {"ms": 5000, "epoch": 0, "file": {"path": path, "stamp": self.kept_module.file_stamp(os.stat(path))}}}
                    with mock.patch.object(self.watch_module, "_LIBC", SwapAt(n, swap)):
                        self.assertTrue(self.kept.keep(self.fields, 100, answer), "the same file under the path: kept")
                        await self.request_after()
                        # the watches go on from the root down: once the folder holding `d` is
                        # watched (watch n > its place), the swap itself is heard and ends it
                        order = sorted(self.watch_module.dependencies(path)[0], key=lambda d: d.count(os.sep))
                        if n > order.index(root):
                            self.assertIsNone(usable(self.kept, self.fields), "the swap was heard")
                            return
                        self.assertIsNotNone(usable(self.kept, self.fields), "swapped before any watch saw it: the same file, kept")
                        change_later()
                        await self.request_after()
                        self.assertIsNone(usable(self.kept, self.fields), f"swapped before watch {n}: the later change was not heard")
                    shutil.rmtree(os.path.join(root, "sub-away"), ignore_errors=True)

                self.run_in_loop(scenario)

    def test_a_link_retargeted_before_the_watches_go_on_is_caught_by_walking_the_way_again(self) -> None:
        """``link`` retargeted, before the first watch is added, to a folder holding a hard link of
        the same file: the folders watched are the old target's. Walking the way again once all
        are on sees other folders: not watched, its stamp read at each use, and a later change
        under the new target is seen."""
        from unittest import mock

        os = self.os
        root = self.dir.name
        real_libc = self.watch_module._LIBC
        target = os.path.join(root, "b2", "deep")  # a folder whose folders above are not a's
        os.makedirs(target)
        os.link(os.path.join(root, "a", "x.png"), os.path.join(target, "x.png"))

        class RetargetFirst:
            def __init__(self) -> None:
                self.done = False
                self.inotify_init1 = real_libc.inotify_init1
                self.inotify_rm_watch = real_libc.inotify_rm_watch

            def inotify_add_watch(self, fd, path, mask):
                if not self.done:
                    self.done = True
                    os.unlink(os.path.join(root, "link"))
                    os.symlink(target, os.path.join(root, "link"))
                return real_libc.inotify_add_watch(fd, path, mask)

        async def scenario() -> None:
            with mock.patch.object(self.watch_module, "_LIBC", RetargetFirst()):
                self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()), "the same file under the path: kept")
            await self.request_after()
            self.assertIsNotNone(usable(self.kept, self.fields))
            os.rename(os.path.join(root, "b2"), os.path.join(root, "b2-away"))  # the folder above the target, unwatched
            os.makedirs(target)
            with open(os.path.join(target, "x.png"), "wb") as f:
                f.write(b"NSFW-bytes!")
            await self.request_after()
            self.assertIsNone(usable(self.kept, self.fields), "other bytes under the path")

        self.run_in_loop(scenario)

    def test_a_file_on_a_filesystem_other_machines_change_is_checked_the_old_way(self) -> None:
        """NFS, SMB, FUSE, 9p: a change made elsewhere reaches no inotify here. The mount table
        (/proc/self/mountinfo, read by the watch) is made to say the test folder is NFS; the real
        table's reading is checked too: the test folder's filesystem is one the watch trusts."""
        from unittest import mock

        os = self.os
        real = self.watch_module._mount_table()
        self.assertIn(self.watch_module._filesystem(os.path.realpath(self.dir.name), real), self.watch_module._LOCAL_FILESYSTEMS)
        table = ((os.path.realpath(self.dir.name), "nfs4"), *real)

        async def scenario() -> None:
            with mock.patch.object(self.watch_module, "_mount_table", return_value=table):
                self.assertTrue(self.kept.keep(self.fields, 100, self.answer_for()), "kept, on stats")
            await self.request_after()
            with mock.patch.object(os, "stat", wraps=os.stat) as stat:
                self.assertIsNotNone(usable(self.kept, self.fields))
                self.assertEqual(stat.call_count, 1, "not watched: its stamp read at the use")

        self.run_in_loop(scenario)


class EagerHandlers(PluginCase):
    """aiohttp 3.10+ on Python 3.12+ starts a handler's task eagerly: the gate can run in the turn
    after its request's last bytes were read, before the readers that turn's poll queued (the
    watch's, the decision socket's). Emulated here on any Python: the change is made in one turn,
    the "request" is queued for the next and driven by hand to its first suspension, as an eager
    task is, then finished as a task. With the yield the gate makes first, the change is heard and
    the sidecar is asked; without it (EAGER_HANDLERS off) the kept decision was used."""

    async def test_a_change_heard_in_the_turn_an_eager_handler_starts_in_is_heard_before_the_reuse(self) -> None:
        import os
        from test.plugin.test_fail_closed import decision_client

        path = os.path.join(self.tmp, "x.png")
        with open(path, "wb") as f:
            f.write(b"clean-bytes")
        asked = {"action": "respond", "status": 418, "body": "asked again"}
        s = await self.start(answer(asked))
        client = decision_client(s)
        watch_module = plugin_module("file_watch")
        if not watch_module.FileWatch(lambda _p: None).available:
            self.skipTest("no inotify on this platform")
        fields = ("GET", "/view", "filename=x.png", "Bearer t1")
        kept_answer = {"action": "pass", "cache": {"ms": 5000, "epoch": client.kept.epoch,
                                                    "file": {"path": path, "stamp": plugin_module("kept_decisions").file_stamp(os.stat(path))}}}
        loop = asyncio.get_running_loop()
        import sys as _sys

        module = _sys.modules[type(client).__module__]
        self.addCleanup(setattr, module, "EAGER_HANDLERS", module.EAGER_HANDLERS)
        for eager in (True, False):
            with self.subTest(eager=eager):
                module.EAGER_HANDLERS = eager
                with open(path, "wb") as f:
                    f.write(b"clean-bytes")
                kept_answer["cache"]["file"]["stamp"] = plugin_module("kept_decisions").file_stamp(os.stat(path))
                self.assertTrue(client.kept.keep(fields, 100, kept_answer), "kept on a watch")
                result: asyncio.Future = loop.create_future()

                def eager_request() -> None:
                    coro = client.decide(fields, 100, lambda f: {"type": "decide", "method": "GET", "path": "/view"}, lambda a: a)
                    try:
                        coro.send(None)  # an eager task's first step, inside the step that created it
                    except StopIteration as stop:
                        result.set_result(stop.value)
                        return
                    task = asyncio.ensure_future(coro)
                    task.add_done_callback(lambda t: result.set_result(t.result()))

                def change_then_request() -> None:
                    with open(path, "r+b") as f:
                        f.write(b"NSFW-bytes!")  # the event is queued now
                    loop.call_soon(eager_request)  # the request runs first in the next turn

                loop.call_soon(change_then_request)
                got = await result
                if eager:
                    self.assertEqual({k: v for k, v in got.items() if k != "id"}, asked, "the change was heard before the reuse; the sidecar was asked")
                else:
                    self.assertIs(got, kept_answer, "without the yield the kept decision was used: what the row guards against")
                client.kept.forget()
