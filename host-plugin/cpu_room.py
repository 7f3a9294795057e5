"""CPU room: whether waiting for the sidecar's answer by polling uses a core nobody else needs.

Guarantees:
- the rule (``room_is_free``) is the sidecar's too (``sidecar/src/kernel/cpu-room.ts``): both are
  checked against ``shared/vectors/cpu-room.json`` (``test/plugin/test_cpu_room.py``,
  ``test/unit/cpu-room.test.ts``), and so are the readings of ``/proc`` and the cgroup files it
  is given, so the two sides cannot drift apart;
- a reading that fails counts as no room: nothing here ever makes a process poll on a CPU it
  cannot show to be free;
- the CPUs are sampled at most once a second (taskset, cpusets and cgroup quotas change under a
  running process, so they are looked at again every time).
"""
from __future__ import annotations

import os
import time
from typing import Callable, NamedTuple

# How often the CPUs this process may use are looked at again.
_CPU_CHECK_SECONDS = 1.0
try:
    CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    CLOCK_TICKS = 100

Read = Callable[[str], str]


def read_text(path: str) -> str:
    """A file of /proc or /sys as text; OSError when it is not there."""
    with open(path, encoding="ascii") as f:
        return f.read()


class CpuSample(NamedTuple):
    """One look at the CPUs: how many this process may use at once, which, their idle + iowait
    clock ticks since boot (None when not read: fewer than 2 usable, or unreadable), the PSI
    microseconds some task waited for a CPU (None without PSI), and the peer process's
    (pid, CPU ticks) (None when there is none to count)."""

    usable: float
    cpus: frozenset[int]
    idle: int | None
    pressure: int | None
    peer: tuple[int, int] | None


def room_is_free(before: CpuSample | None, after: CpuSample, elapsed_s: float, spun_s: float,
                 ticks_per_second: float = CLOCK_TICKS) -> bool:
    """Polling pays only while another core is free to compute the answer: this process may use
    at least 2 CPUs (affinity, cgroup quota) and, between the two samples, those CPUs were idle
    for at least half a core, counting as idle this process's own polling (``spun_s``: it stops
    the moment anything else is ready) and the peer's CPU (its own polling for the next request,
    which it stops by the same rule), while tasks waited for a CPU less than a fifth of that time
    (PSI; without PSI, polling is not counted as idle). The wait is what stops polling that
    sustains itself: polling counted as idle is idle only while nobody else wanted that CPU. On a
    core shared with the peer, or beside a sampler that keeps the other core busy, every
    microsecond spent polling delays the answer and takes CPU from the other side."""
    if after.usable < 2 or after.idle is None:
        return False
    if before is None or before.idle is None or before.cpus != after.cpus:
        return False  # no earlier sample of these CPUs: the next check decides
    idle_cores = (after.idle - before.idle) / ticks_per_second / elapsed_s
    if after.pressure is None or before.pressure is None:
        return idle_cores >= 0.5
    peer_cores = 0.0
    if after.peer is not None and before.peer is not None and after.peer[0] == before.peer[0] \
            and after.peer[1] >= 0 and before.peer[1] >= 0:
        peer_cores = (after.peer[1] - before.peer[1]) / ticks_per_second / elapsed_s
    waited = (after.pressure - before.pressure) / 1e6 / elapsed_s
    return waited < 0.2 and idle_cores + spun_s / elapsed_s + peer_cores >= 0.5


def cgroup_quota(read: Read = read_text) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (cgroup v2 cpu.max or v1 cfs), None when
    unlimited or unknown."""
    try:
        lines = read("/proc/self/cgroup").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) < 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            files = [("/sys/fs/cgroup" + path.rstrip("/") + "/cpu.max", None), ("/sys/fs/cgroup/cpu.max", None)]
        elif "cpu" in controllers.split(","):
            base = "/sys/fs/cgroup/" + controllers
            files = [(f"{base}{path.rstrip('/')}/cpu.cfs_quota_us", f"{base}{path.rstrip('/')}/cpu.cfs_period_us"),
                     (f"{base}/cpu.cfs_quota_us", f"{base}/cpu.cfs_period_us")]
        else:
            continue
        for quota_file, period_file in files:
            try:
                fields = read(quota_file).split()
                if period_file is not None:
                    fields.append(read(period_file).strip())
            except OSError:
                continue
            if len(fields) < 2 or fields[0] in ("max", "-1"):
                return None
            try:
                quota = int(fields[0]) / int(fields[1])
            except (ValueError, ZeroDivisionError):
                return None
            return quota if quota > 0 else None
    return None


def usable_cpus() -> float:
    """How many CPUs this process can run on at once: its affinity, capped by its cgroup's quota."""
    try:
        count: float = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = cgroup_quota()
    return min(count, quota) if quota is not None else count


def idle_ticks(cpus: frozenset[int], read: Read = read_text) -> int | None:
    """Idle + iowait clock ticks of the given CPUs since boot (/proc/stat), None when unreadable."""
    try:
        lines = read("/proc/stat").split("\n", 1 + max(cpus, default=0) + 1)
    except OSError:
        return None
    total = 0
    for line in lines:
        if line.startswith("cpu") and line[3:4].isdigit():
            fields = line.split()
            if int(fields[0][3:]) in cpus:
                total += int(fields[4]) + int(fields[5])
    return total


def cpu_pressure(read: Read = read_text) -> int | None:
    """Microseconds during which some runnable task waited for a CPU, since boot (PSI,
    /proc/pressure/cpu ``some total=``); None where the kernel has no PSI."""
    try:
        line = read("/proc/pressure/cpu").split("\n", 1)[0]
        return int(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process (/proc/<pid>/stat), -1 when unreadable."""
    try:
        fields = read_text(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return -1


class CpuRoom:
    """``room_is_free`` over the last second, for this process and the peer it waits for."""

    def __init__(self, usable: Callable[[], float] = usable_cpus) -> None:
        self._usable = usable
        self._checked = float("-inf")
        self._sample: CpuSample | None = None
        self.spun = 0.0  # seconds spent polling since the last check
        self.free = False

    def check(self, peer_pid: Callable[[], int | None] = lambda: None) -> bool:
        now = time.monotonic()
        elapsed = now - self._checked
        if elapsed < _CPU_CHECK_SECONDS:
            return self.free
        spun, self.spun = self.spun, 0.0
        sample = self._look(peer_pid)
        self.free = room_is_free(self._sample, sample, elapsed, spun)
        self._checked, self._sample = now, sample
        return self.free

    def _look(self, peer_pid: Callable[[], int | None]) -> CpuSample:
        try:
            cpus = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = frozenset(range(os.cpu_count() or 1))
        usable = self._usable()
        idle = idle_ticks(cpus) if usable >= 2 else None
        if idle is None:
            return CpuSample(usable, cpus, None, None, None)
        pid = peer_pid()
        peer = (pid, cpu_ticks(pid)) if pid is not None else None
        return CpuSample(usable, cpus, idle, cpu_pressure(), peer)
