"""The ops command line: stats, workers, health, schedules, inspect, cancel, purge, dead
letters, events.

One implementation for both ways in: ``python -m blitzq_django.engine <command> APP ...``
(engine/cli/main.py) and ``manage.py blitzq <command> ...`` (the Django command). Each builds
the same subparsers with ``add_commands()`` and runs the parsed command with ``perform()``
(or ``execute()``, which also prints the error and returns the exit code) on its client.

Exit codes (docs/cli.md): 0 done; 1 not found or nothing matched (or nothing done);
2 usage or bad input; 3 Redis unavailable; 4 refused (queue busy, or not confirmed).
``health`` (cli/health.py) has two: 0 healthy, 1 not (Redis unreachable included), as
probes expect.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import datetime as dt
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ..client import Client
from ..client.dead_letters import BATCH, DeadLetters
from ..core.deadletter import DeadLetter
from ..core.ids import now_ms
from ..core.names import check_name
from ..core.redact import DEFAULT_REDACT
from ..core.registry import CANCELLED, REVOKED, unserved, workers_per_queue
from ..core.validate import RULES, task_id_ok
from ..errors import BlitzqError, BrokerError, ConfigurationError, QueueBusy
from . import health
from .args import number
from .failure import Failure

if TYPE_CHECKING:
    from ..core.events import Event

EXIT_OK = 0
EXIT_NOT_FOUND = 1  # not found, nothing matched, nothing done
EXIT_USAGE = 2  # usage or bad input (argparse uses 2 too)
EXIT_UNAVAILABLE = 3  # Redis cannot be reached, or refused a command
EXIT_REFUSED = 4  # the queue is busy, or the operator did not confirm
EXIT_INTERRUPTED = 130  # Ctrl-C in the middle of a command (128 + SIGINT)

ALL = 10**12  # "no limit" for DeadLetters.list
FOLLOW_BLOCK_MS = 1000  # how long one read of `events --follow` waits for new entries
STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?")

Handler = Callable[["Ops", argparse.Namespace], None]


# -- where output goes -------------------------------------------------------------------


@dataclass
class Console:
    """The streams a command talks to. ``progress`` is a terminal for progress bars,
    or None: a bar in a log file or a pipe is noise, so it is drawn on terminals only."""

    out: TextIO
    err: TextIO
    stdin: TextIO
    progress: TextIO | None = None

    @classmethod
    def standard(cls, out: Any = None, err: Any = None, stdin: Any = None) -> Console:
        return cls(out=out or sys.stdout, err=err or sys.stderr, stdin=stdin or sys.stdin,
                   progress=sys.stderr if is_terminal(sys.stderr) else None)

    def line(self, text: str = "") -> None:
        # One write per line, newline included: print()'s separate "\n" write would be
        # doubled by a stream that ends every write with one (Django's OutputWrapper).
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        self.err.write(text + "\n")

    def document(self, value: Any) -> None:
        """One JSON document on one line (so `events --follow --json` is JSON lines)."""
        self.line(json.dumps(value, default=jsonable, ensure_ascii=False))
        self.out.flush()


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # closed, or not a real file
        return False


def jsonable(value: Any) -> Any:
    """What json.dumps cannot write: dates in ISO 8601, bytes in base64, the rest as text."""
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)  # Decimal, UUID, and whatever a task returned


# -- what a command runs with ------------------------------------------------------------


@dataclass
class Ops:
    """A client and what the entry point knows around it."""

    client: Client
    console: Console
    #: queues known besides the registry's and the default one (Django: BLITZQ["QUEUES"])
    queues: Sequence[str] = ()
    #: argument names masked in dead-letter listings (Django: BLITZQ["REDACT"])
    redact: Sequence[str] = DEFAULT_REDACT

    def known_queues(self) -> list[str]:
        """The queues the entry point names, those of the tasks, and every queue a message
        was ever written to (Redis keeps them: one call)."""
        names = {*self.queues, *self.client.registry.queues(), self.client.default_queue,
                 *self.client.seen_queues()}
        return sorted(names)

    def queue(self, name: str | None) -> str:
        """A queue named on the command line, checked: a valid name of a queue that a task
        uses, or that holds something (the rule purge applies). None: the default queue."""
        if name is None:
            return self.client.default_queue
        check_name("queue", name)
        if name in self.known_queues():
            return name
        stats = self.client.queue_stats(name)
        if any((stats.ready, stats.in_flight, stats.scheduled, stats.dead_letters,
                stats.consumers)):
            return name
        raise ConfigurationError(f"queue {name!r} does not exist (it holds nothing and no "
                                 "task uses it)")

    @property
    def dead_letters(self) -> DeadLetters:
        return DeadLetters(broker=self.client.broker, registry=self.client.registry,
                           default_queue=self.client.default_queue, redact=self.redact)


def message_id(text: str) -> str:
    """A message id from the command line, refused (exit 2) when no message can have it."""
    if not task_id_ok(text):
        raise ConfigurationError(f"message id {text!r} is invalid: it must be "
                                 f"{RULES['task_id'][1]}")
    return text


def stream_id(text: str) -> str:
    """argparse type of --after: an events cursor ("1712345678901-0", "0") or "$"."""
    if text == "$" or STREAM_ID.fullmatch(text):
        return text
    raise argparse.ArgumentTypeError(f"must be an event cursor like 1712345678901-0 (or 0, "
                                     f"or $), not {text!r}")


# -- running a parsed command ------------------------------------------------------------


def perform(ops: Ops, args: argparse.Namespace) -> None:
    """Run the command; raise Failure (message and exit code) when it did not succeed."""
    handler: Handler = args.handler
    try:
        handler(ops, args)
    except QueueBusy as exc:  # a BrokerError, but a refusal rather than an outage
        raise Failure(EXIT_REFUSED, str(exc)) from None
    except BrokerError as exc:  # BrokerUnavailable, or a command Redis refused
        raise Failure(EXIT_UNAVAILABLE, str(exc)) from None
    except BlitzqError as exc:  # ConfigurationError above all: a bad id, queue or value
        raise Failure(EXIT_USAGE, str(exc)) from None
    except KeyboardInterrupt:
        raise Failure(EXIT_INTERRUPTED, "interrupted") from None


def execute(ops: Ops, args: argparse.Namespace) -> int:
    """perform(), with the error on one line of stderr: the process's exit code."""
    try:
        perform(ops, args)
    except Failure as failure:
        ops.console.note(f"blitzq: {failure}")
        return failure.code
    return EXIT_OK


# -- the parsers -------------------------------------------------------------------------


def add_commands(subparsers: Any,
                 leaf: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """Add every ops command to ``subparsers`` (from ``parser.add_subparsers()``).

    ``leaf`` is called first on each parser that runs a command: the engine adds its
    APP argument there, so APP comes right after the command's words.
    """

    def command(parent: Any, name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(name, help=help, description=help)
        if leaf is not None:
            leaf(parser)
        parser.add_argument("--json", action="store_true",
                            help="print one JSON document instead of text")
        parser.set_defaults(handler=handler)
        return parser

    stats = command(subparsers, "stats", run_stats, "counts of each queue")
    stats.add_argument("queues", nargs="*", metavar="QUEUE",
                       help="queues to count (default: every known queue)")

    command(subparsers, "workers", run_workers, "the live workers, as of their last heartbeat")

    health.add_arguments(command(
        subparsers, "health", health.run_health,
        "exit 0 when Redis answers and this host's workers beat, 1 when not (probes)"))

    command(subparsers, "schedules", run_schedules,
            "periodic schedules: last run, next run, last message and its outcome")

    inspect = command(subparsers, "inspect", run_inspect, "what is known of one message")
    inspect.add_argument("id", metavar="ID")
    inspect.add_argument("--queue", "-Q", help="its queue (default: the default queue)")

    cancel = command(subparsers, "cancel", run_cancel,
                     "cancel a scheduled message, or revoke a queued or running one")
    cancel.add_argument("id", metavar="ID")
    cancel.add_argument("--queue", "-Q", help="its queue (default: the default queue)")

    forget = command(subparsers, "forget-queue", run_forget_queue,
                     "take an empty queue off the queues Redis has seen (which a runworker "
                     "without --queues serves): a queue a typo created, now purged")
    forget.add_argument("queue", metavar="QUEUE")

    purge = command(subparsers, "purge", run_purge,
                    "drop a queue's ready and scheduled messages")
    purge.add_argument("queue", metavar="QUEUE")
    purge.add_argument("--dead-letters", action="store_true",
                       help="drop its dead letters too")
    purge.add_argument("--force", action="store_true",
                       help="purge even while workers hold messages (those are left to them)")
    purge.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    events = command(subparsers, "events", run_events, "read the events stream")
    events.add_argument("--queue", "-Q", help="the queue (default: the default queue)")
    events.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new events until Ctrl-C")
    events.add_argument("--after", type=stream_id, default=None, metavar="CURSOR",
                        help="start after this cursor (default: the start of the stream; "
                             "with --follow: only new events)")
    events.add_argument("--count", type=number("event_count"), default=100, metavar="N",
                        help="most events per read (default 100)")

    dead = subparsers.add_parser("dead-letters", help="list, summarise, replay or purge "
                                 "dead letters", description="Dead letters of one queue.")
    actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = command(actions, "list", run_dead_list, "dead letters, newest first")
    add_dead_letter_filters(listing, default_limit=100)

    summary = command(actions, "summary", run_dead_summary,
                      "counts by task, by reason and by error type")
    add_dead_letter_filters(summary)

    replay = command(actions, "replay", run_dead_replay,
                     "put dead letters back on their queue with a fresh attempt budget")
    replay.add_argument("ids", nargs="+", metavar="ID")
    replay.add_argument("--queue", "-Q", help="their queue (default: the default queue)")
    replay.add_argument("--new-id", action="store_true",
                        help="run each under a new message id (the old record is kept)")

    replay_all = command(actions, "replay-all", run_dead_replay_all,
                         "replay every dead letter that matches the filters")
    add_dead_letter_filters(replay_all)
    replay_all.add_argument("--rate", type=number("replay_rate"), default=None, metavar="N",
                            help="at most N messages per second (default: as fast as Redis "
                                 "takes them)")
    replay_all.add_argument("--dry-run", action="store_true",
                            help="show what would be replayed, replay nothing")
    replay_all.add_argument("--new-id", action="store_true",
                            help="run each under a new message id (the old record is kept)")

    dead_purge = command(actions, "purge", run_dead_purge,
                         "delete the dead letters that match the filters")
    add_dead_letter_filters(dead_purge)
    dead_purge.add_argument("--yes", "-y", action="store_true",
                            help="do not ask for confirmation")


def add_dead_letter_filters(parser: argparse.ArgumentParser,
                            default_limit: int | None = None) -> None:
    add = parser.add_argument
    add("--queue", "-Q", help="the queue (default: the default queue)")
    add("--task", metavar="GLOB", help="task name, shell-style glob ('billing.*')")
    add("--reason", help="exact reason ('retries exhausted', 'not retryable', ...)")
    add("--error-type", metavar="NAME", help="exact exception class name ('ValueError')")
    add("--older-than", type=number("age"), metavar="SECONDS",
        help="dead-lettered at least this many seconds ago")
    add("--newer-than", type=number("age"), metavar="SECONDS",
        help="dead-lettered at most this many seconds ago")
    limit_help = f"at most N, newest first (default {default_limit or 'all'})"
    add("--limit", type=number("list_limit"), default=default_limit, metavar="N",
        help=limit_help)


# -- stats, workers ----------------------------------------------------------------------


def run_stats(ops: Ops, args: argparse.Namespace) -> None:
    names = [ops.queue(q) for q in dict.fromkeys(args.queues)] or ops.known_queues()
    stats = [ops.client.queue_stats(name) for name in names]
    workers = ops.client.workers()
    serving = workers_per_queue(workers)  # live workers serving each queue
    if args.json:
        ops.console.document({"queues": [{**dataclasses.asdict(s), "workers": serving[s.queue]}
                                         for s in stats]})
        return
    rows = [[s.queue, s.ready, s.in_flight, s.scheduled, s.dead_letters, s.consumers,
             serving[s.queue], age(s.oldest_ready_age_ms)] for s in stats]
    table(ops.console, ["QUEUE", "READY", "IN FLIGHT", "SCHEDULED", "DEAD", "CONSUMERS",
                        "WORKERS", "OLDEST READY"], rows)
    for queue in unserved(stats, workers):
        ops.console.note(f"queue {queue!r} has messages waiting and no live worker serves it "
                         f"(runworker --queues {queue})")


def run_workers(ops: Ops, args: argparse.Namespace) -> None:
    workers = ops.client.workers()
    if args.json:
        ops.console.document({"workers": [dataclasses.asdict(w) for w in workers]})
        return
    if not workers:
        ops.console.line("no live workers")
        return
    now = now_ms()
    rows = [[w.name, w.host, w.pid, ",".join(w.queues), f"{w.running}/{w.concurrency}",
             w.processed, age(now - w.started_ms), age(now - w.heartbeat_ms), w.version]
            for w in workers]
    table(ops.console, ["NAME", "HOST", "PID", "QUEUES", "RUNNING", "PROCESSED", "UP",
                        "LAST BEAT", "VERSION"], rows)


def run_schedules(ops: Ops, args: argparse.Namespace) -> None:
    infos = ops.client.schedules()
    if args.json:
        ops.console.document({"schedules": [i.as_dict() for i in infos]})
        return
    if not infos:
        ops.console.line("no periodic schedules")
        return
    now = now_ms()

    def when(ms: int | None, past: bool) -> str:
        if ms is None:
            return "-"
        return f"{clock(ms)} ({age(now - ms) + ' ago' if past else 'in ' + age(ms - now)})"

    rows = [[i.name, i.task, i.schedule, i.queue, when(i.last_run_ms, True),
             when(i.next_run_ms, False), i.last_message_id or "-", i.outcome]
            for i in infos]
    table(ops.console, ["NAME", "TASK", "SCHEDULE", "QUEUE", "LAST RUN", "NEXT RUN",
                        "LAST MESSAGE", "OUTCOME"], rows)


# -- one message -------------------------------------------------------------------------


def run_inspect(ops: Ops, args: argparse.Namespace) -> None:
    queue = ops.queue(args.queue)
    record = ops.client.inspect(message_id(args.id), queue=queue)
    if args.json:
        ops.console.document(dataclasses.asdict(record) if record is not None else None)
    if record is None:
        raise Failure(EXIT_NOT_FOUND, f"nothing is known of message {args.id!r} on queue "
                                      f"{queue!r}")
    if not args.json:
        fields(ops.console, dataclasses.asdict(record))


CANCEL_TEXT = {
    CANCELLED: "cancelled {id} on {queue!r}: it was scheduled, and is removed",
    REVOKED: "revoked {id} on {queue!r}: a worker will not run it, or interrupts it",
}


def run_cancel(ops: Ops, args: argparse.Namespace) -> None:
    queue, checked_id = ops.queue(args.queue), message_id(args.id)
    cancellation = ops.client.cancel(checked_id, queue=queue)
    if args.json:
        ops.console.document(dataclasses.asdict(cancellation))
    outcome = cancellation.outcome
    if outcome == "unknown":
        raise Failure(EXIT_NOT_FOUND, f"nothing is known of message {args.id!r} on queue "
                                      f"{queue!r}")
    if outcome == "finished":
        # Exit 1, "nothing done", so `blitzq cancel ID && ...` never reads as cancelled.
        raise Failure(EXIT_NOT_FOUND, f"message {args.id!r} already finished "
                                      f"({cancellation.state}): nothing to cancel")
    if not args.json:
        text = CANCEL_TEXT[outcome].format(id=args.id, queue=queue)
        if outcome == "revoked" and cancellation.state is None:
            text += " (no record of it: revoked in case it is queued)"
        ops.console.line(text)


# -- purge -------------------------------------------------------------------------------


def run_purge(ops: Ops, args: argparse.Namespace) -> None:
    queue = ops.queue(args.queue)
    if not args.yes:
        stats = ops.client.queue_stats(queue)
        what = f"{stats.ready} ready and {stats.scheduled} scheduled messages"
        if args.dead_letters:
            what += f" and {stats.dead_letters} dead letters"
        held = f" ({stats.in_flight} in flight are left to the workers)" if stats.in_flight else ""
        confirm(ops, f"Purge queue {queue!r}: drop {what}{held}?")
    purged = ops.client.purge(queue, dead_letters=args.dead_letters, force=args.force)
    if args.json:
        ops.console.document(dataclasses.asdict(purged))
        return
    text = f"purged {queue!r}: {purged.ready} ready, {purged.scheduled} scheduled"
    if args.dead_letters:
        text += f", {purged.dead_letters} dead letters"
    if purged.in_flight:
        text += f"; {purged.in_flight} in flight left to the workers"
    ops.console.line(text)


def run_forget_queue(ops: Ops, args: argparse.Namespace) -> None:
    queue = check_name("queue", args.queue)
    ops.client.forget_queue(queue)  # QueueBusy (exit 4) while it holds anything
    if args.json:
        ops.console.document({"forgotten": queue})
        return
    ops.console.line(f"forgot {queue!r}: a producer writing to it again records it again")


def confirm(ops: Ops, question: str) -> None:
    """Ask on a terminal; refuse where nobody can answer (cron, CI, a pipe)."""
    console = ops.console
    if not is_terminal(console.stdin):
        raise Failure(EXIT_USAGE, "not a terminal, so nobody can confirm: pass --yes")
    console.err.write(f"{question} [y/N] ")
    console.err.flush()
    answer = console.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise Failure(EXIT_REFUSED, "not confirmed: nothing done")


# -- dead letters ------------------------------------------------------------------------


def dead_letter_filters(args: argparse.Namespace) -> dict[str, Any]:
    given = {"task": args.task, "reason": args.reason, "error_type": args.error_type,
             "older_than": args.older_than, "newer_than": args.newer_than}
    return {name: value for name, value in given.items() if value is not None}


def selected(ops: Ops, args: argparse.Namespace) -> tuple[str, list[DeadLetter]]:
    queue = ops.queue(args.queue)
    letters = ops.dead_letters.list(queue, limit=args.limit or ALL, **dead_letter_filters(args))
    return queue, letters


def nothing_matched(queue: str) -> Failure:
    return Failure(EXIT_NOT_FOUND, f"no dead letters of queue {queue!r} match")


def run_dead_list(ops: Ops, args: argparse.Namespace) -> None:
    queue, letters = selected(ops, args)
    dead = ops.dead_letters
    if args.json:
        ops.console.document({"queue": queue, "dead_letters": [dead.shown(x) for x in letters]})
    if not letters:
        raise nothing_matched(queue)
    if args.json:
        return
    now = now_ms()
    rows = [[x.id, x.task or "-", x.reason, x.error_type or "-", x.attempt,
             age(now - x.dead_ms), one_line(x.error_message or "", 60)] for x in letters]
    table(ops.console, ["ID", "TASK", "REASON", "ERROR", "ATTEMPT", "AGE", "MESSAGE"], rows)


def run_dead_summary(ops: Ops, args: argparse.Namespace) -> None:
    queue, letters = selected(ops, args)
    groups: dict[str, tuple[str, Counter[str | None]]] = {
        "by_task": ("task", Counter(x.task for x in letters)),
        "by_reason": ("reason", Counter(x.reason for x in letters)),
        "by_error_type": ("error_type", Counter(x.error_type for x in letters)),
    }
    if args.json:
        doc: dict[str, Any] = {"queue": queue, "total": len(letters)}
        for key, (field, counts) in groups.items():
            doc[key] = [{field: name, "count": n} for name, n in counts.most_common()]
        ops.console.document(doc)
    if not letters:
        raise nothing_matched(queue)
    if args.json:
        return
    ops.console.line(f"{len(letters)} dead letters in {queue!r}")
    for field, counts in groups.values():
        ops.console.line("")
        table(ops.console, [field.upper().replace("_", " "), "COUNT"],
              [[name or "-", n] for name, n in counts.most_common()])


def run_dead_replay(ops: Ops, args: argparse.Namespace) -> None:
    queue = ops.queue(args.queue)
    ids = list(dict.fromkeys(message_id(i) for i in args.ids))
    replayed = ops.dead_letters.replay(ids, queue, new_id=args.new_id)
    report_replay(ops, args, queue, len(ids), replayed)


def run_dead_replay_all(ops: Ops, args: argparse.Namespace) -> None:
    queue, letters = selected(ops, args)
    if args.dry_run:
        if args.json:
            ops.console.document({"queue": queue, "matched": len(letters), "replayed": 0,
                                  "skipped": 0, "dry_run": True,
                                  "ids": [x.id for x in letters]})
        if not letters:
            raise nothing_matched(queue)
        if not args.json:
            for letter in letters:
                ops.console.line(f"{letter.id} {letter.task or '-'} ({letter.reason})")
            ops.console.line(f"would replay {len(letters)} dead letters of {queue!r}")
        return
    replayed = 0
    if letters:
        ids = [x.id for x in letters]
        with progress(ops, len(ids), "replay") as advance:
            for chunk in paced(ids, args.rate):
                replayed += ops.dead_letters.replay(chunk, queue, new_id=args.new_id)
                advance(len(chunk))
    report_replay(ops, args, queue, len(letters), replayed)


def report_replay(ops: Ops, args: argparse.Namespace, queue: str, matched: int,
                  replayed: int) -> None:
    if args.json:
        ops.console.document({"queue": queue, "matched": matched, "replayed": replayed,
                              "skipped": matched - replayed, "dry_run": False})
    if matched == 0:
        raise nothing_matched(queue)
    if replayed == 0:
        raise Failure(EXIT_NOT_FOUND, f"replayed none of {matched}: not dead letters of "
                                      f"{queue!r} (any more), or too damaged to run")
    if not args.json:
        skipped = f" ({matched - replayed} skipped: gone, or too damaged to run)" \
            if replayed < matched else ""
        ops.console.line(f"replayed {replayed} of {matched} dead letters of {queue!r}"
                         f"{skipped}")


def run_dead_purge(ops: Ops, args: argparse.Namespace) -> None:
    queue = ops.queue(args.queue)
    filters = dead_letter_filters(args)
    everything = not filters and args.limit is None
    if everything:
        # One call deletes them all: no list to read, no batches.
        matched = ops.dead_letters.count(queue)
        ids: list[str] = []
    else:
        ids = [x.id for x in ops.dead_letters.list(queue, limit=args.limit or ALL, **filters)]
        matched = len(ids)
    if matched == 0:
        if args.json:
            ops.console.document({"queue": queue, "matched": 0, "purged": 0})
        raise nothing_matched(queue)
    if not args.yes:
        which = "all" if everything else "the matching"
        confirm(ops, f"Delete {which} {matched} dead letters of queue {queue!r}?")
    purged = ops.dead_letters.purge(queue) if everything else purge_in_batches(ops, queue, ids)
    if args.json:
        ops.console.document({"queue": queue, "matched": matched, "purged": purged})
        return
    ops.console.line(f"deleted {purged} dead letters of {queue!r}")


def purge_in_batches(ops: Ops, queue: str, ids: Sequence[str]) -> int:
    purged = 0
    with progress(ops, len(ids), "purge") as advance:
        for start in range(0, len(ids), BATCH):
            chunk = ids[start:start + BATCH]
            purged += ops.dead_letters.purge(queue, ids=chunk)
            advance(len(chunk))
    return purged


def paced(ids: Sequence[str], rate: float | None) -> Iterator[Sequence[str]]:
    """Chunks of ``ids``, each handed out no sooner than ``rate`` per second allows."""
    if rate is None:
        for start in range(0, len(ids), BATCH):
            yield ids[start:start + BATCH]
        return
    # Chunks small enough that the pace is steady: about a tenth of a second's worth.
    size = max(1, min(BATCH, math.floor(rate / 10)))
    started = time.monotonic()
    for start in range(0, len(ids), size):
        due = started + start / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # the pace the operator asked for (--rate)
        yield ids[start:start + size]


@contextlib.contextmanager
def progress(ops: Ops, total: int, what: str) -> Iterator[Callable[[int], object]]:
    """Yield ``advance(n)``: a tqdm bar on a terminal, nothing elsewhere (logs and pipes
    get the summary line only)."""
    if ops.console.progress is None:
        yield lambda n: None
        return
    from tqdm import tqdm  # lazy: cost (only on a terminal: scripts never pay for it)

    with tqdm(total=total, desc=what, unit="msg", file=ops.console.progress,
              leave=False) as bar:
        yield bar.update


# -- events ------------------------------------------------------------------------------


def run_events(ops: Ops, args: argparse.Namespace) -> None:
    queue = ops.queue(args.queue)
    if args.follow:
        follow_events(ops, args, queue)
        return
    after = args.after or "0"
    events = ops.client.events(queue, after=after, count=args.count)
    if args.json:
        cursor = events[-1].cursor if events else after
        ops.console.document({"events": [event_document(e) for e in events],
                              "cursor": cursor})
        return
    for event in events:
        ops.console.line(event_line(event))


def event_document(event: Event) -> dict[str, Any]:
    """An event as JSON, without its ``detail`` (the message's arguments and the error,
    unmasked, for the history writer: not for a terminal or a log)."""
    document = dataclasses.asdict(event)
    document.pop("detail", None)
    return document


def follow_events(ops: Ops, args: argparse.Namespace, queue: str) -> None:
    # Only what arrives from now on: from the newest event's cursor, not "$", so an
    # event written between two reads is never skipped.
    cursor = args.after or ops.client.last_event_cursor(queue)
    if is_terminal(ops.console.err):
        ops.console.note("following events (Ctrl-C to stop)")
    try:
        while True:
            events = ops.client.events(queue, after=cursor, count=args.count,
                                       block_ms=FOLLOW_BLOCK_MS)
            for event in events:
                if args.json:
                    ops.console.document(event_document(event))
                else:
                    ops.console.line(event_line(event))
            if events:
                cursor = events[-1].cursor
                ops.console.out.flush()
    except KeyboardInterrupt:
        return  # Ctrl-C is how --follow ends: not an error


def event_line(event: Event) -> str:
    parts = [clock(event.time_ms), event.kind, event.queue, event.task, event.id]
    if event.attempt is not None:
        parts.append(f"attempt={event.attempt}")
    if event.worker:
        parts.append(f"worker={event.worker}")
    if event.duration_ms is not None:
        parts.append(f"{event.duration_ms}ms")
    if event.error_type:
        parts.append(event.error_type)
    return " ".join(str(p) for p in parts)


# -- text output -------------------------------------------------------------------------


def table(console: Console, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        console.line("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def fields(console: Console, values: dict[str, Any]) -> None:
    """One ``name: value`` line per known field; the traceback last, as it was written."""
    traceback = values.pop("traceback", None)
    width = max(len(name) for name in values)
    for name, value in values.items():
        if value is None:
            continue
        if name.endswith("_ms") and isinstance(value, int):
            value = clock(value)
        text = repr(value) if name == "result" else str(value)
        console.line(f"{name.ljust(width)}  {one_line(text, 200)}")
    if traceback:
        console.line("")
        console.line(traceback.rstrip())


def one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def age(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = max(0, ms) / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def clock(ms: int) -> str:
    """A time in ms since the epoch, as UTC ISO 8601 to the millisecond."""
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

