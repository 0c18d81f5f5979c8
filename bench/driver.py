"""Run one role of one system in its own process: ``python -m bench.driver SYSTEM ROLE [N] [RATE]``.

Adapter interface (module ``bench.systems.<name>``):
  VERSION: str                      the library version
  ASYNC: bool                       True if its producer API is async (awaited one at a time)
  setup() -> None                   connect the producer (BENCH_* env decides the settings)
  enqueue_one(kind, t)              enqueue one task of kind noop|sleep|lat with argument t
  enqueue_bulk(kind, ts) | None     the bulk API, or None if the system has none
  BULK_NOTE: str                    which bulk API (or why none)
  run_worker() -> None              run ONE worker process until SIGTERM
  results_modes() -> {True: note|None, False: note|None}  None = mode not supported
  settings(workload) -> str         worker settings used, for the doc
  KIND: "def" | "async"             the kind of task bodies its worker runs (default "async")
  SCALES: bool                      the worker takes BENCH_PROCESSES (scale1/2/4 workloads)
  WEIGHT: bool                      the startup/modules workload applies (blitzq-django)

A system's module is its name with "-" read as "_" (blitzq-django: blitzq_django.py).

Roles print one JSON line on stdout.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time


def _load(system: str):
    return importlib.import_module(f"bench.systems.{system.replace('-', '_')}")


async def _maybe(value):
    if asyncio.iscoroutine(value):
        return await value
    return value


def _timed_single(mod, n: int) -> float:
    if mod.ASYNC:
        async def go() -> float:
            await _maybe(mod.setup())
            for _ in range(20):  # warm the connection (and script caches)
                await mod.enqueue_one("noop", 0.0)
            t0 = time.perf_counter()
            for _ in range(n):
                await mod.enqueue_one("noop", 0.0)
            return time.perf_counter() - t0
        return asyncio.run(go())
    mod.setup()
    for _ in range(20):
        mod.enqueue_one("noop", 0.0)
    t0 = time.perf_counter()
    for _ in range(n):
        mod.enqueue_one("noop", 0.0)
    return time.perf_counter() - t0


def _timed_bulk(mod, n: int, kind: str = "noop") -> float:
    ts = [0.0] * n
    if mod.ASYNC:
        async def go() -> float:
            await _maybe(mod.setup())
            await mod.enqueue_bulk(kind, [0.0] * 20)
            t0 = time.perf_counter()
            await mod.enqueue_bulk(kind, ts)
            return time.perf_counter() - t0
        return asyncio.run(go())
    mod.setup()
    mod.enqueue_bulk(kind, [0.0] * 20)
    t0 = time.perf_counter()
    mod.enqueue_bulk(kind, ts)
    return time.perf_counter() - t0


def _fill(mod, kind: str, n: int) -> None:
    """Untimed pre-enqueue, by the bulk API when there is one."""
    if mod.ASYNC:
        async def go() -> None:
            await _maybe(mod.setup())
            if mod.enqueue_bulk is not None:
                for i in range(0, n, 1000):
                    await mod.enqueue_bulk(kind, [0.0] * min(1000, n - i))
            else:
                # Untimed: 50 enqueues in flight at a time only to shorten the sitting.
                for i in range(0, n, 50):
                    await asyncio.gather(*(mod.enqueue_one(kind, 0.0)
                                           for _ in range(min(50, n - i))))
        asyncio.run(go())
        return
    mod.setup()
    if mod.enqueue_bulk is not None:
        for i in range(0, n, 1000):
            mod.enqueue_bulk(kind, [0.0] * min(1000, n - i))
    else:
        for _ in range(n):
            mod.enqueue_one(kind, 0.0)


def _paced(mod, n: int, rate: float) -> None:
    interval = 1.0 / rate
    if mod.ASYNC:
        async def go() -> None:
            await _maybe(mod.setup())
            start = time.perf_counter()
            for i in range(n):
                delay = start + i * interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await mod.enqueue_one("lat", time.time())
        asyncio.run(go())
        return
    mod.setup()
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        mod.enqueue_one("lat", time.time())


def main(argv: list[str]) -> None:
    system, role, *rest = argv
    mod = _load(system)
    out: dict = {}
    if role == "info":
        out = {"version": mod.VERSION, "bulk": mod.BULK_NOTE, "conc": mod.CONC,
               "results": {str(k): v for k, v in mod.results_modes().items()},
               "kind": getattr(mod, "KIND", "async"), "scales": getattr(mod, "SCALES", False),
               "weight": getattr(mod, "WEIGHT", False),
               "settings": {w: mod.settings(w) for w in ("dispatch", "io", "latency")}}
    elif role == "enqueue-single":
        n = int(rest[0])
        out = {"seconds": (dt := _timed_single(mod, n)), "ops": n / dt}
    elif role == "enqueue-bulk":
        n = int(rest[0])
        if mod.enqueue_bulk is None:
            out = {"na": mod.BULK_NOTE}
        else:
            out = {"seconds": (dt := _timed_bulk(mod, n)), "ops": n / dt}
    elif role == "fill":
        kind, n = rest[0], int(rest[1])
        t0 = time.perf_counter()
        _fill(mod, kind, n)
        out = {"seconds": time.perf_counter() - t0}
    elif role == "latency":
        _paced(mod, int(rest[0]), float(rest[1]))
        out = {"ok": True}
    elif role == "worker":
        mod.run_worker()
        return
    else:
        raise SystemExit(f"unknown role {role!r}")
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
