"""The raw redis-py floor: what a Python process gets from Redis with no queue library.

``python -m bench.raw N`` prints JSON with four rates (per second):
  a single_xadd      one XADD per round trip
  b pipelined_xadd   XADD in pipelines of 1000
  c consume_ack      XREADGROUP COUNT 100, a no-op Python call per message, pipelined XACK
  d consume_results  as c, but one EVALSHA per batch: XACK + SET record + PUBLISH per message
"""

from __future__ import annotations

import json
import sys
import time

import redis

from . import common as c

STREAM, GROUP = "raw:s", "g"
PAYLOAD = b"x" * 120  # about the size of a small encoded message
RECORD = b"r" * 100

SETTLE = """
local group = ARGV[1]
for i = 2, #ARGV do
  local id = ARGV[i]
  redis.call('XACK', KEYS[1], group, id)
  redis.call('SET', 'raw:r:' .. id, id, 'EX', 3600)
  redis.call('PUBLISH', 'raw:done:' .. id, 'done')
end
return #ARGV - 1
"""


def noop(_entry: object) -> None:
    return None


def fill(r: redis.Redis, n: int) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(STREAM, {"m": PAYLOAD})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def reset(r: redis.Redis) -> None:
    r.delete(STREAM)
    r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)


def consume(r: redis.Redis, n: int, results: bool) -> float:
    sha = r.script_load(SETTLE)
    done = 0
    t0 = time.perf_counter()
    while done < n:
        reply = r.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=100)
        if not reply:
            break
        ids = []
        for _stream, entries in reply:
            for entry_id, fields in entries:
                noop(fields)
                ids.append(entry_id)
        if results:
            r.evalsha(sha, 1, STREAM, GROUP, *ids)
        else:
            pipe = r.pipeline(transaction=False)
            pipe.xack(STREAM, GROUP, *ids)
            pipe.execute()
        done += len(ids)
    return done / (time.perf_counter() - t0)


def main(n: int) -> dict[str, float]:
    r = redis.Redis.from_url(c.URL)
    out: dict[str, float] = {}
    reset(r)
    t0 = time.perf_counter()
    for _ in range(n):
        r.xadd(STREAM, {"m": PAYLOAD})
    out["single_xadd"] = n / (time.perf_counter() - t0)
    reset(r)
    t0 = time.perf_counter()
    fill(r, n)
    out["pipelined_xadd"] = n / (time.perf_counter() - t0)
    out["consume_ack"] = consume(r, n, results=False)
    reset(r)
    fill(r, n)
    out["consume_results"] = consume(r, n, results=True)
    r.delete(STREAM)
    for pattern in ("raw:r:*",):
        keys = list(r.scan_iter(pattern, count=1000))
        for i in range(0, len(keys), 1000):
            r.delete(*keys[i:i + 1000])
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(int(sys.argv[1]))) + "\n")
