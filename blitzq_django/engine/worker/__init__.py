"""The asyncio worker: fetch -> execute -> settle, with leases and promotion."""

from .config import WorkerConfig
from .worker import Worker

__all__ = ["Worker", "WorkerConfig"]
