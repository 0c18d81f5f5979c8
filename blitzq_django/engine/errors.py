"""The one exception tree of the engine.

::

    BlitzqError
    ├── ConfigurationError        bad setting or option (Django re-raises as ImproperlyConfigured)
    ├── MessageError              a message cannot be built or read
    │   ├── MessageEncodeError    (also a TypeError) an argument msgpack cannot carry
    │   ├── MessageTooLarge       (also a ValueError) encoded message over max_message_size
    │   └── MessageDecodeError    bytes from the broker that are not a message
    ├── BrokerError               the broker failed to do what was asked
    │   └── BrokerUnavailable     cannot reach Redis (names the URL, never the password)
    ├── TaskNotRegistered         a task name with no registered function
    └── ResultTimeout             (also a TimeoutError) get_result gave up waiting

Control flow, raised by task code rather than by the engine:

    Retry                         ask for another attempt after ``delay`` seconds
"""

from __future__ import annotations


class BlitzqError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigurationError(BlitzqError):
    pass


class MessageError(BlitzqError):
    pass


class MessageEncodeError(MessageError, TypeError):
    pass


class MessageTooLarge(MessageError, ValueError):
    pass


class MessageDecodeError(MessageError):
    pass


class BrokerError(BlitzqError):
    pass


class BrokerUnavailable(BrokerError):
    pass


class TaskNotRegistered(BlitzqError, LookupError):
    pass


class ResultTimeout(BlitzqError, TimeoutError):
    pass


class Retry(Exception):  # noqa: N818 - reads as "raise Retry(...)"
    """Raised by a task to be attempted again after ``delay`` seconds.

    It counts toward the task's retry limit, so a task cannot retry forever.
    ``delay=None`` uses the task's backoff policy.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay
        self.reason = reason
