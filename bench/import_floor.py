#!/usr/bin/env python3
"""What a worker process weighs before it does anything: RSS after imports alone.

    .bench-venv/bin/python bench/import_floor.py

Each line is a fresh interpreter that imports one set and prints its RSS (VmRSS) and
module count: bare Python; Django set up with contenttypes and auth on SQLite (the least
a project running blitzq installs); redis-py with asyncio, msgpack and hiredis (what any
Redis queue on asyncio imports); both together, the floor under ``runworker``; and arq's
worker module (the lightest peer worker of docs/benchmarks.md). Needs the bench venv
(arq, Django, redis-py), which ``python3 bench/run.py`` creates.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import sys
which = sys.argv[1]
if which in ("django", "django+redis"):
    import django
    from django.conf import settings
    settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"],
                       DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                              "NAME": ":memory:"}})
    django.setup()
    import django.core.management  # noqa: F401 (a management command runs the worker)
if which in ("redis", "django+redis"):
    import asyncio, hiredis, msgpack, redis, redis.asyncio  # noqa: F401,E401
if which == "arq":
    import arq.worker  # noqa: F401
rss = next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmRSS"))
print(f"{which:<14}{rss / 1024:>8.1f} MB{len(sys.modules):>9}")
"""

SETS = ("bare", "django", "redis", "django+redis", "arq")


def main() -> None:
    print(f"{'imports':<14}{'RSS':>11}{'modules':>9}")
    for which in SETS:
        subprocess.run([sys.executable, "-c", CHILD, which], check=True)


if __name__ == "__main__":
    main()
