"""When the daemon's cyclic garbage collector makes its full passes: when the mount is quiet.

A full pass walks every object the daemon holds (a first walk of 5,000 sessions leaves about
a million: their answers, numbers and names) holding the GIL, so every thread and every
request waits for it: 60-105 ms, two or three times in each first walk of the 1 GiB corpus,
whenever allocations said so (``scripts/stalls.py``: they were the requests over 50 ms). Here
the automatic full passes are off; this task makes one once no request came for
:data:`QUIET` seconds, or at once past :data:`CEILING` middle-generation passes since the
last, so that garbage in cycles stays bounded under any load. The young generations are
collected as ever (each pass is short: it walks only what was made since). The parses'
pauses and freezes (``loaded.no_gc``, ``gc.freeze``) are not changed by it: no pass is made
while a parse holds the collector paused.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

import trio

log = logging.getLogger(__name__)

#: Seconds with no request before a full pass is made.
QUIET = 1.0
#: Passes of the middle generation since the last full pass after which one is made
#: whatever comes (the default makes one after 10, when the old generation also grew by a
#: quarter: a first walk of 5,000 sessions makes some hundreds).
CEILING = 2000
#: Seconds between looks.
EVERY = 0.25
#: The oldest generation's threshold, never reached: this task makes its passes.
NEVER = 1 << 30


def hold_full() -> int:
    """Turn off the automatic full passes; what the threshold was (to put back)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER)
    return old


def due(last_request: float, now: float, counts: tuple[int, int, int]) -> bool:
    """Whether a full pass is due: middle passes were made since the last, and the mount
    was quiet since ``last_request`` (``time.monotonic``), or they passed the ceiling; and
    no parse holds the collector paused (``loaded.no_gc``: a pass would walk the millions
    of objects it is making, and a quiet moment is when ``--warm`` parses)."""
    passes = counts[2]
    quiet = now - last_request >= QUIET
    return gc.isenabled() and passes > 0 and (quiet or passes >= CEILING)


async def run(last_request: Callable[[], float]) -> None:
    """Make the full passes when :func:`due` says (a task of the mount's loop)."""
    was = hold_full()
    try:
        while True:
            await trio.sleep(EVERY)
            if due(last_request(), time.monotonic(), gc.get_count()):
                began = time.perf_counter()
                found = gc.collect()
                took = (time.perf_counter() - began) * 1000
                log.debug("full collection: %d unreachable, %.0f ms", found, took)
    finally:
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, was)
