"""The log of requests refused for want of a decision.

Guarantees: an outage costs a few lines, never one per request (the first names the cause, then a
count per interval, then one line when decisions work again); the host's normal start, before the
sidecar was ever ready, is logged at debug only unless it is overdue."""
from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("authsvc")


class RefusalLog:
    """One log line when refusals start (with the cause), then a count per interval, then one line
    when decisions work again: an outage under load must not write a line per request.

    Requests refused before the sidecar was ever ready are the normal start of ComfyUI (a browser
    or a health probe that is early), not an outage: they are logged at debug only, unless the
    start takes longer than one interval (a sidecar that never comes must not be silent)."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.cause: str | None = None
        self.count = 0
        self.since = 0.0
        self.starting = True  # no decision has worked yet, and the start is not overdue

    def refused(self, cause: str) -> None:
        now = self.clock()
        if self.starting:
            if self.cause is None:
                log.debug("authsvc: refusing requests (503) until the sidecar is ready: %s", cause)
                self.cause, self.count, self.since = cause, 0, now
                return
            self.count += 1
            if now - self.since < self.interval:
                return
            self.starting = False
            log.warning("authsvc: refusing requests (503): no decision has worked since the start, %.0f s ago "
                        "(%d request(s) refused): %s", now - self.since, self.count + 1, cause)
            self.cause, self.count, self.since = cause, 0, now
            return
        if self.cause is None:
            log.warning("authsvc: refusing requests (503): %s", cause)
            self.cause, self.count, self.since = cause, 0, now
            return
        self.count += 1
        if cause != self.cause or now - self.since >= self.interval:
            log.warning("authsvc: refused %d more request(s) in %.0f s: %s", self.count, now - self.since, self.cause)
            self.cause, self.count, self.since = cause, 0, now

    def recovered(self) -> None:
        if self.starting:
            self.starting = False
            if self.cause is not None:
                log.debug("authsvc: %d request(s) were refused while the sidecar started", self.count + 1)
            self.cause = None
            return
        if self.cause is not None:
            log.warning("authsvc: decisions work again (%d request(s) refused since the last report)", self.count)
            self.cause = None
