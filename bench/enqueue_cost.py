#!/usr/bin/env python3
"""What one enqueue costs the producer, in instructions, one code tree against another.

    python3 bench/enqueue_cost.py --trees /path/to/old,. [--sizes 1000,4000]

For each tree and each kind, a fresh process under ``valgrind --tool=callgrind``
enqueues ``small`` and then (another process) ``large`` messages; the difference of
their instruction counts over ``large - small`` is the cost of one message (Python,
redis-py, msgpack; not Redis), free of start-up. Kinds:

- ``engine``: ``task.enqueue(i)`` on a bare engine Client (a `def` task of one
  positional parameter);
- ``engine-kw``: ``task.enqueue(i, flag=True)`` (a keyword argument);
- ``django``: ``@blitzq_task`` ``enqueue(i)`` in the bench Django project
  (bench/djproject: the settings of the published enqueue-single row);
- ``many``: ``task.enqueue_many`` of 1,000 calls at a time (engine);
- ``build``, ``build-kw``: ``client.build`` alone (the message, checked and encoded:
  no Redis, so no figure moves with the machine's load), without and with a keyword.

Every process runs with PYTHONHASHSEED=0, so that two runs lay out their dicts alike.

Needs valgrind, redis-server on PATH (or REDIS_URL) and the project's dependencies.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ENGINE = r"""
import os, sys
from blitzq_django.engine import Client, RedisBroker
kind, n = sys.argv[1], int(sys.argv[2])
client = Client(RedisBroker(os.environ["REDIS_URL"], namespace="enq"), store_results=False)

def noop(i, flag=False):
    return i

task = client.task(name="noop")(noop)
task.enqueue(-1)  # connects, loads the script
if kind == "build":
    build, spec = client.build, task.spec
    for i in range(n):
        build(spec, (i,), {})
elif kind == "build-kw":
    build, spec = client.build, task.spec
    for i in range(n):
        build(spec, (i,), {"flag": True})
elif kind == "engine":
    for i in range(n):
        task.enqueue(i)
elif kind == "engine-kw":
    for i in range(n):
        task.enqueue(i, flag=True)
else:
    for start in range(0, n, 1000):
        task.enqueue_many([(i,) for i in range(start, min(n, start + 1000))])
client.broker.sync.client.flushdb()
"""

DJANGO = r"""
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.djproject.settings"
os.environ["BENCH_RESULTS"] = "0"
import django
django.setup()
from bench.djproject.benchapp import tasks
n = int(sys.argv[2])
task = tasks.noop_def
task.enqueue(-1)
for i in range(n):
    task.enqueue(i)
from blitzq_django import conf
conf.get_client().broker.sync.client.flushdb()
"""

KINDS = ("build", "build-kw", "engine", "engine-kw", "django", "many")


def instructions(tree: str, url: str, kind: str, n: int, out: Path) -> int:
    env = {**os.environ, "REDIS_URL": url, "BENCH_URL": url, "PYTHONHASHSEED": "0",
           "PYTHONPATH": f"{tree}{os.pathsep}{ROOT}" if kind != "django" else tree}
    code = DJANGO if kind == "django" else ENGINE
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, "-c", code, kind, str(n)], env=env, cwd=tree,
                   check=True, capture_output=True)
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", default=".", help="comma-separated code roots; first = base")
    parser.add_argument("--sizes", default="1000,4000")
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.run import redis_url_or_private

    small, large = (int(n) for n in args.sizes.split(","))
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    url, server = redis_url_or_private()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for kind in args.kinds.split(","):
                base = None
                for number, tree in enumerate(trees):
                    counts = [instructions(tree, url, kind, n,
                                           Path(tmp) / f"{number}.{kind}.{n}")
                              for n in (small, large)]
                    per = (counts[1] - counts[0]) / (large - small)
                    base = per if base is None else base
                    print(f"{kind:9} {tree}: {per / 1000:,.2f} k instructions per message "
                          f"({per / base - 1:+.2%})", flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
