"""Shared vectors of the CPU-room rule (shared/vectors/cpu-room.json), plugin side: the rule and
the readings of /proc and the cgroup files in host-plugin/cpu_room.py give what each row says.
The sidecar's copy (sidecar/src/kernel/cpu-room.ts) is checked against the same rows by
test/unit/cpu-room.test.ts, so the two cannot drift apart."""
from __future__ import annotations

import json
import os
import unittest
from typing import Any, Callable, Optional

from .support import ROOT, plugin_module

with open(os.path.join(ROOT, "shared", "vectors", "cpu-room.json"), encoding="utf-8") as _f:
    VECTORS = json.load(_f)

cpu_room = plugin_module("cpu_room")


def _sample(row: Optional[dict[str, Any]]) -> Any:
    if row is None:
        return None
    peer = row["peer"]
    return cpu_room.CpuSample(row["usable"], frozenset(row["cpus"]), row["idle"], row["pressure"],
                              tuple(peer) if peer is not None else None)


def _files(files: dict[str, Optional[str]]) -> Callable[[str], str]:
    def read(path: str) -> str:
        text = files.get(path)
        if text is None:
            raise FileNotFoundError(path)
        return text
    return read


class CpuRoomVectors(unittest.TestCase):
    def test_the_rule(self) -> None:
        ticks = VECTORS["clock_ticks_per_second"]
        self.assertGreater(len(VECTORS["rule"]), 10)
        for row in VECTORS["rule"]:
            with self.subTest(row["name"]):
                free = cpu_room.room_is_free(_sample(row["before"]), _sample(row["after"]), row["elapsed_s"], row["spun_s"], ticks)
                self.assertIs(free, row["free"])

    def test_the_cgroup_quota(self) -> None:
        for row in VECTORS["cgroup_quota"]:
            with self.subTest(row["name"]):
                self.assertEqual(cpu_room.cgroup_quota(_files(row["files"])), row["quota"])

    def test_the_idle_ticks(self) -> None:
        for row in VECTORS["idle_ticks"]:
            with self.subTest(row["name"]):
                read = _files({"/proc/stat": row["proc_stat"]})
                self.assertEqual(cpu_room.idle_ticks(frozenset(row["cpus"]), read), row["idle"])

    def test_the_cpu_pressure(self) -> None:
        for row in VECTORS["cpu_pressure"]:
            with self.subTest(row["name"]):
                self.assertEqual(cpu_room.cpu_pressure(_files({"/proc/pressure/cpu": row["text"]})), row["total"])


if __name__ == "__main__":
    unittest.main()
