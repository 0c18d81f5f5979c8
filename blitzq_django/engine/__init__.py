"""The blitzq engine: a Redis task queue that never imports Django.

Public names are re-exported here; everything else is internal.
"""

from .brokers import Broker, MemoryBroker, RedisBroker
from .client import CallOptions, Client, Task, TaskHandle
from .client.context import TaskContext, current_task
from .client.workflows import (
    Canvas,
    Chain,
    Chord,
    Group,
    Signature,
    WorkflowHandle,
    WorkflowProgress,
    chain,
    chord,
    group,
)
from .core.deadletter import DeadLetter
from .core.message import Message
from .core.record import Record
from .core.registry import Cancellation
from .core.retry import RetryPolicy
from .core.task import TaskRegistry, TaskSpec
from .core.workflow import WorkflowInfo, WorkflowNode
from .errors import (
    BlitzqError,
    BrokerError,
    BrokerUnavailable,
    ConfigurationError,
    MessageDecodeError,
    MessageEncodeError,
    MessageError,
    MessageTooLarge,
    QueueBusy,
    ResultTimeout,
    ResultTooLarge,
    Retry,
    TaskCancelled,
    TaskExpired,
    TaskFailed,
    TaskNotRegistered,
    TimeLimitExceeded,
    WorkflowCancelled,
    WorkflowFailed,
)
from .worker import Worker, WorkerConfig

__all__ = [
    "BlitzqError", "Broker", "BrokerError", "BrokerUnavailable", "CallOptions", "Cancellation",
    "Canvas", "Chain", "Chord", "Client", "ConfigurationError", "DeadLetter", "Group",
    "MemoryBroker", "Message", "MessageDecodeError", "MessageEncodeError", "MessageError",
    "MessageTooLarge", "QueueBusy", "Record", "RedisBroker", "ResultTimeout", "ResultTooLarge",
    "Retry", "RetryPolicy", "Signature", "Task",
    "TaskCancelled", "TaskContext", "TaskExpired", "TaskFailed", "TaskHandle",
    "TaskNotRegistered", "TaskRegistry", "TaskSpec", "TimeLimitExceeded", "Worker",
    "WorkerConfig", "WorkflowCancelled", "WorkflowFailed", "WorkflowHandle", "WorkflowInfo",
    "WorkflowNode", "WorkflowProgress", "chain", "chord", "current_task", "group",
]
