"""Brokers: where messages wait. One contract (base.Broker), several homes."""

from .base import Broker, Delivery, Settlement
from .memory import MemoryBroker
from .redis import RedisBroker

__all__ = ["Broker", "Delivery", "MemoryBroker", "RedisBroker", "Settlement"]
