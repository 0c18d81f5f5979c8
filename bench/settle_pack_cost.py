#!/usr/bin/env python3
"""What building and packing one settle call costs the worker, per message, in
instructions: ``ops.complete`` of 100 results (records on, events on) and redis-py's
packing of its EVALSHA, no Redis, so the count is deterministic.

    python3 bench/settle_pack_cost.py --trees /path/to/base,. [--sizes 2000,6000]

Each tree is imported first on ``PYTHONPATH``; the difference of two sizes under
``valgrind --tool=callgrind``, over the difference in messages, is the cost of one.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BODY = r"""
import sys
from redis.connection import Connection
from blitzq_django.engine.brokers.redis import ops
from blitzq_django.engine.brokers.redis.keys import Keyspace
from blitzq_django.engine.core.events import packer
n = int(sys.argv[1])
keys = Keyspace("bench").queue("default")
pack = packer().pack
items = [("done", f"{1700000000000 + i}-0", f"{i:032x}", b"\x85" + b"r" * 120, 1, b"", 0,
          None, pack(["succeeded", f"{i:032x}", "noop", 1, 1, "w", 1, None]), b"")
         for i in range(100)]
connection = Connection()
for _ in range(n // 100):
    op = ops.complete(keys, "worker-1", items, record_ttl=86400, dead_letter_max=1000,
                      now_ms=1700000000000, token="abcd", events_maxlen=100000)
    connection.pack_commands([("EVALSHA", op.script.sha, len(op.keys), *op.keys, *op.args)])
"""


def instructions(tree: str, n: int, out: Path) -> int:
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}
    done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                           sys.executable, "-c", BODY, str(n)], env=env, cwd=tree,
                          capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(done.stderr[-2000:])
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trees", default=".", help="comma-separated code roots; first = base")
    parser.add_argument("--sizes", default="2000,6000")
    args = parser.parse_args()
    small, large = (int(n) for n in args.sizes.split(","))
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for number, tree in enumerate(str(Path(t).resolve()) for t in args.trees.split(",")):
            low, high = (instructions(tree, n, Path(tmp) / f"{number}.{n}")
                         for n in (small, large))
            per = (high - low) / (large - small)
            base = per if base is None else base
            print(f"{tree}: {per / 1000:,.2f} k instructions per message "
                  f"({per / base - 1:+.2%})", flush=True)


if __name__ == "__main__":
    main()
