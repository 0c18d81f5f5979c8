"""The Redis broker and everything below it: the one key table (keys.py), the
sans-I/O operations shared by both stores (ops.py, periodic_ops.py), the stores that
run them and map redis-py's errors (store.py), and the Lua scripts (scripts/*.lua).
Only the brokers import this package."""

from .broker import RedisBroker

__all__ = ["RedisBroker"]
