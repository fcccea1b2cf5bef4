"""Where a daemon's event loop was held: a sampler thread, for a bench's daemon only.

``start(path)`` (in the daemon, before its loop: ``bench_probe.py --stalls``) looks every
:data:`EVERY` seconds at where the main thread (trio's loop) is, and writes to ``path``:

- ``MAIN <ms> <where>``: the loop's thread stayed that long in one frame that is not the
  loop's wait for events (work on the loop);
- ``GAP <ms>``: the sampler itself could not run that long (a thread, any, held the GIL in
  one C call), with every thread's stack after it;
- ``GC <ms>``: a collection of the cyclic garbage collector took that long (every thread
  waits for it), its generation and the thread it ran in.

``summary(path)`` gives the records over ``least`` ms, longest first. The sampler costs the
daemon a little of every core: figures taken with it are not the bench's.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import threading
import time
import traceback
from types import FrameType
from typing import TextIO

EVERY = 0.002  # seconds between looks
LONG = 0.03  # seconds held before a record
IDLE = "get_events"  # trio's wait for events (epoll): the loop is idle there


def start(path: str) -> None:
    out = open(path, "w", buffering=1)  # noqa: SIM115 (open for the daemon's whole life)
    main_id = threading.main_thread().ident
    threading.Thread(target=_sample, args=(out, main_id), name="stalls", daemon=True).start()
    gc.callbacks.append(functools.partial(_collected, out, {}))


def _collected(out: TextIO, began: dict[str, float], phase: str, info: dict[str, int]) -> None:
    """``GC <ms> gen <n>``: a collection of the cyclic garbage collector that long (it
    holds the GIL throughout: every thread waits)."""
    if phase == "start":
        began["at"] = time.perf_counter()
        return
    took = time.perf_counter() - began.pop("at", time.perf_counter())
    if took > LONG:
        where = threading.current_thread().name
        print(f"GC {took * 1000:.0f} gen {info['generation']} in {where}", file=out)


def _sample(out: TextIO, main_id: int | None) -> None:
    last = since = time.perf_counter()
    where: tuple[str, str, int] | None = None
    while True:
        time.sleep(EVERY)
        now = time.perf_counter()
        if now - last > LONG:
            print(f"GAP {(now - last) * 1000:.0f}", file=out)
            for line in _stacks():
                print(f"  {line}", file=out)
        frame = sys._current_frames().get(main_id or 0)
        here = None if frame is None else _where(frame)
        if here != where:
            if where is not None and now - since > LONG and where[1] != IDLE:
                print(f"MAIN {(now - since) * 1000:.0f} {where}", file=out)
            where, since = here, now
        last = now


def _where(frame: FrameType) -> tuple[str, str, int]:
    code = frame.f_code
    return os.path.basename(code.co_filename), code.co_name, frame.f_lineno


def _stacks() -> list[str]:
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        calls = [
            f"{f.name}@{os.path.basename(f.filename)}:{f.lineno}"
            for f in traceback.extract_stack(frame)[-6:]
        ]
        out.append(f"{names.get(ident, ident)}: {' < '.join(reversed(calls))}")
    return out


def summary(path: str, least: float = 50.0) -> list[str]:
    """The records of ``path`` over ``least`` ms, longest first, each with what follows it."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    records: list[tuple[float, str]] = []
    for i, line in enumerate(lines):
        kind, _, rest = line.partition(" ")
        if kind in ("MAIN", "GAP", "GC") and float(rest.split()[0]) >= least:
            after = []  # (a gap's stacks follow it: the thread that held the GIL is among them)
            if kind == "GAP":
                for ln in lines[i + 1 :]:
                    if not ln.startswith("  "):
                        break
                    after.append(ln)
            records.append((float(rest.split()[0]), "\n".join([line, *after])))
    return [text for _, text in sorted(records, reverse=True)]
