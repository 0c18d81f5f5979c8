"""Workflows, the producer side (docs/workflows.md): signatures (``task.s()``,
``task.si()``), ``chain``, ``group`` and ``chord``, what enqueuing one does, the handle it
returns, and ``client.workflows`` (inspect, cancel).

Enqueue flattens the tree (core/workflow.py), encodes every step's message now (so a bad
argument fails here, naming it), stores the tree in one step and enqueues the first
steps. Every later step is enqueued by whoever records the outcome before it (a worker,
or a cancel): ``launch``/``alaunch`` below, shared by both.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from ..brokers.base import Broker, Enqueue
from ..core import events
from ..core import record as states
from ..core import workflow as wf
from ..core.ids import new_id, now_ms
from ..core.message import Message, decode, encode, pack, unpack
from ..core.record import Record
from ..errors import (
    ConfigurationError,
    MessageError,
    ResultTimeout,
    WorkflowCancelled,
    WorkflowFailed,
)

if TYPE_CHECKING:
    from .task import CallOptions, Task

log = logging.getLogger("blitzq")

#: Options a step may not set: each step's id and deduplication are the workflow's.
_REFUSED = ("task_id", "idempotency_key", "unique")
_ID = re.compile(r"[A-Za-z0-9_\-]{1,100}")


# -- the canvas ---------------------------------------------------------------------

class Canvas:
    """What can be enqueued as a workflow: a signature, chain, group or chord."""

    def _first(self) -> Signature:
        raise NotImplementedError

    def enqueue(self, *, on_error: Signature | None = None,
                workflow_id: str | None = None) -> WorkflowHandle:
        """Store the workflow and enqueue its first steps; the handle follows it."""
        return self._first().task._client().workflows.enqueue(
            self, on_error=on_error, workflow_id=workflow_id)

    async def aenqueue(self, *, on_error: Signature | None = None,
                       workflow_id: str | None = None) -> WorkflowHandle:
        return await self._first().task._client().workflows.aenqueue(
            self, on_error=on_error, workflow_id=workflow_id)

    def enqueue_on_commit(self, *, on_error: Signature | None = None,
                          using: str | None = None) -> WorkflowHandle:
        """Enqueue it once the current database transaction commits (the Django glue
        installs how: ``on_commit``); outside a transaction, at once."""
        client = self._first().task._client()
        hook = client.workflows.on_commit
        if hook is None:
            raise ConfigurationError("enqueue_on_commit needs blitzq_django (Django's "
                                     "transactions); use enqueue()")
        workflow_id = new_id()
        client.workflows.prepare(self, on_error, workflow_id)  # a bad argument fails now
        hook(lambda: self.enqueue(on_error=on_error, workflow_id=workflow_id), using)
        return WorkflowHandle(workflow_id, client.workflows)


class Signature(Canvas):
    """A task and its arguments, not sent yet (``task.s(...)``, ``task.si(...)``). A
    mutable one gets the previous step's result prepended to its arguments."""

    __slots__ = ("task", "args", "kwargs", "immutable")

    def __init__(self, task: Task[Any, Any], args: Sequence[Any], kwargs: dict[str, Any],
                 immutable: bool = False) -> None:
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.immutable = immutable

    def options(self, **changes: Any) -> Signature:
        """This step with these call options (queue=, priority=, delay=, timeout=,
        expires=, retries= ... as ``task.options``)."""
        refused = sorted(set(changes) & set(_REFUSED))
        if refused:
            raise ConfigurationError(
                f"{self.task.name}.s().options(): {', '.join(refused)} cannot be set on a "
                "workflow step (each step gets a fixed id, deduplicated by the workflow)")
        return Signature(self.task.options(**changes), self.args, self.kwargs, self.immutable)

    def _first(self) -> Signature:
        return self

    def __repr__(self) -> str:
        return f"{self.task.name}.{'si' if self.immutable else 's'}(...)"


class Chain(Canvas):
    """Steps one after another, each given the previous one's result."""

    def __init__(self, steps: Sequence[Canvas]) -> None:
        self.steps = _canvases("chain", steps)

    def _first(self) -> Signature:
        return self.steps[0]._first()

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.steps))})"


class Group(Canvas):
    """Steps side by side; its result is theirs, in order."""

    def __init__(self, members: Sequence[Canvas]) -> None:
        self.members = _canvases("group", members)

    def _first(self) -> Signature:
        return self.members[0]._first()

    def __repr__(self) -> str:
        return f"group({', '.join(map(repr, self.members[:3]))}" \
               f"{', ...' if len(self.members) > 3 else ''})"


class Chord(Canvas):
    """A group, then a callback given the list of its results."""

    def __init__(self, header: Group, body: Canvas, allow_failures: bool = False) -> None:
        if not isinstance(allow_failures, bool):
            raise ConfigurationError(f"chord(allow_failures=) must be True or False, got "
                                     f"{allow_failures!r:.40}")
        self.header = header
        self.body = _canvases("chord", [body])[0]
        self.allow_failures = allow_failures

    def _first(self) -> Signature:
        return self.header._first()

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"


def _canvases(what: str, items: Iterable[Any]) -> list[Canvas]:
    out = list(items)
    if not out:
        raise ConfigurationError(f"{what}() needs at least one step")
    for item in out:
        if not isinstance(item, Canvas):
            raise ConfigurationError(f"{what}(): a step must be a signature (task.s(...)), "
                                     f"chain, group or chord, got {item!r:.60}")
    return out


def chain(*steps: Canvas) -> Chain:
    """``chain(a.s(1), b.s(), c.s())``: a, then b with a's result, then c with b's."""
    return Chain(steps)


def group(*members: Any) -> Group:
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in ...)``: all at once."""
    if len(members) == 1 and not isinstance(members[0], Canvas):
        return Group(list(members[0]))
    return Group(members)


def chord(header: Any, body: Canvas, *, allow_failures: bool = False) -> Chord:
    """``chord(group(...), callback.s())``: the group, then the callback with the list of
    its results. ``allow_failures``: a failed header step passes its failure (a dict) in
    place of its result instead of failing the workflow."""
    if not isinstance(header, Group):
        header = group(header) if not isinstance(header, Canvas) else Group([header])
    return Chord(header, body, allow_failures)


# -- flattening and encoding ---------------------------------------------------------

class Prepared(NamedTuple):
    nodes: list[wf.Node]
    members: dict[int, bytes]
    on_error: bytes | None
    home: str
    root: str
    items: dict[int, Enqueue]  # each task node's message as built (for the first launch)


def _flatten(canvas: Canvas) -> tuple[list[wf.Node], list[tuple[int, Signature, str, bool]]]:
    """Pre-order nodes, and each task node's (node, signature, path, takes input)."""
    nodes: list[wf.Node | None] = []
    tasks: list[tuple[int, Signature, str, bool]] = []

    def visit(item: Canvas, parent: int, pos: int, prev: int, path: str, fed: bool) -> int:
        n = len(nodes)
        nodes.append(None)
        kids: list[Canvas]
        if isinstance(item, Signature):
            tasks.append((n, item, path, fed and not item.immutable))
            nodes[n] = wf.Node(wf.TASK, parent, pos, 0, 1, prev)
            return n
        allow = False
        if isinstance(item, Chain):
            kind, kids = wf.CHAIN, item.steps
        elif isinstance(item, Group):
            kind, kids = wf.GROUP, item.members
        else:
            assert isinstance(item, Chord)
            kind, kids, allow = wf.CHORD, [item.header, item.body], item.allow_failures
        last = -1
        for i, kid in enumerate(kids):
            # Who gets an input: a chain's later steps, a chord's callback, and anything
            # under a node that gets one.
            kid_fed = fed or (kind == wf.CHAIN and i > 0) or (kind == wf.CHORD and i == 1)
            last = visit(kid, n, i, last, f"{path}.{i}" if path else str(i), kid_fed)
        nodes[n] = wf.Node(kind, parent, pos, len(kids), len(nodes) - n, prev, allow)
        return n

    visit(canvas, -1, 0, -1, "", False)
    return [shape for shape in nodes if shape is not None], tasks


def _member(build: Build, sig: Signature, workflow_id: str, at: int | str, path: str,
            takes_input: bool) -> tuple[bytes, Enqueue]:
    call: CallOptions = sig.task.call
    headers = {**(call.headers or {}), wf.WORKFLOW_HEADER: [workflow_id, at, path]}
    # The signature's options were checked when it was made, and these are valid by
    # construction: copied field by field rather than checked again for every step
    # (checking was 40% of enqueuing a chord of 1,000).
    call = _with(call, task_id=wf.member_id(workflow_id, at),
                 idempotency_key=wf.member_key(workflow_id, at), unique=False,
                 headers=headers)
    # A step fed by the one before holds a slot for its input (checked against the
    # function's signature now, filled at launch).
    args = (None, *sig.args) if takes_input else sig.args
    item = build(sig.task.spec, args, dict(sig.kwargs), call)
    return wf.Member(item.payload, not takes_input).pack(), item


Build = Callable[..., Enqueue]


def _with(call: CallOptions, **changes: Any) -> CallOptions:
    out = object.__new__(type(call))
    for name in call.__dataclass_fields__:
        object.__setattr__(out, name, changes[name] if name in changes else getattr(call, name))
    return out


def prepare(build: Build, canvas: Canvas, on_error: Signature | None,
            workflow_id: str) -> Prepared:
    if not isinstance(canvas, Canvas):
        raise ConfigurationError(f"not a workflow: {canvas!r:.60}")
    if on_error is not None and not isinstance(on_error, Signature):
        raise ConfigurationError(f"on_error must be a signature (task.s()), got "
                                 f"{on_error!r:.60}")
    nodes, tasks = _flatten(canvas)
    members: dict[int, bytes] = {}
    items: dict[int, Enqueue] = {}
    for n, sig, path, takes_input in tasks:
        members[n], items[n] = _member(build, sig, workflow_id, n, path, takes_input)
    error_member = None
    if on_error is not None:
        error_member, _ = _member(build, on_error, workflow_id, wf.ON_ERROR, "e",
                                  not on_error.immutable)
    home = items[tasks[0][0]].queue
    return Prepared(nodes, members, error_member, home, nodes[0].kind, items)


def check_id(workflow_id: Any) -> str:
    if not isinstance(workflow_id, str) or not _ID.fullmatch(workflow_id):
        raise ConfigurationError(f"a workflow id is 1 to 100 letters, digits, '-' or '_', "
                                 f"got {workflow_id!r:.60}")
    return workflow_id


# -- launching: what follows an outcome ------------------------------------------------

class Launcher(NamedTuple):
    """How launched steps become messages: the sizes and records the client uses."""

    max_message_size: int
    track_state: bool

    def items(self, launches: Sequence[wf.Launch], now: int
              ) -> tuple[list[Enqueue], list[tuple[wf.Launch, Message | None, str]]]:
        """The messages of these launches, and those that cannot be sent (a result too
        large to pass on): each must be recorded failed, so the workflow still ends."""
        out: list[Enqueue] = []
        refused: list[tuple[wf.Launch, Message | None, str]] = []
        inputs: dict[bytes, Any] = {}
        for launch in launches:
            member = wf.Member.unpack(launch.member)
            message = decode(member.payload, max(self.max_message_size, len(member.payload)))
            try:
                out.append(self._item(message, member, launch, inputs, now))
            except MessageError as exc:
                refused.append((launch, message, f"{type(exc).__name__}: {exc}"))
        return out, refused

    def _item(self, message: Message, member: wf.Member, launch: wf.Launch,
              inputs: dict[bytes, Any], now: int) -> Enqueue:
        args = message.args
        if not member.immutable and launch.input is not None:
            if launch.input not in inputs:
                inputs[launch.input] = unpack(launch.input)
            args = [inputs[launch.input], *list(args)[1:]]
        shift = now - message.created_ms  # its delay and expiry count from now
        message = replace(message, args=args, created_ms=now,
                          eta_ms=None if message.eta_ms is None else message.eta_ms + shift,
                          expires_ms=None if message.expires_ms is None
                          else message.expires_ms + shift)
        payload = encode(message, self.max_message_size)
        record = b""
        if self.track_state:
            record = Record(id=message.id, task=message.task, queue=message.queue,
                            state=states.SCHEDULED if message.eta_ms else states.QUEUED,
                            created_ms=now).to_bytes()
        return Enqueue(message.queue, message.id, payload, message.eta_ms or 0, record,
                       message.idempotency_key, priority=message.priority,
                       unique_key=message.unique_key, task=message.task)


def _refusal(launch: wf.Launch, message: Message | None, why: str, workflow_id: str,
             now: int) -> tuple[str, bytes, bytes]:
    head = (message.headers.get(wf.WORKFLOW_HEADER) if message is not None else None) or []
    path = head[2] if len(head) > 2 else ""
    message_id = wf.member_id(workflow_id, launch.node)
    task = message.task if message is not None else ""
    failure = wf.failure_value(workflow_id=workflow_id, node=launch.node, path=path,
                               task=task, message_id=message_id, state=states.FAILED,
                               error_type="MessageTooLarge", error_message=why)
    outcome = wf.Outcome(states.FAILED, message_id, None, now, None, "MessageTooLarge",
                         why).pack()
    return str(states.FAILED), outcome, failure


def end_event(advance: wf.Advance, workflow_id: str, now: int,
              error_type: str | None = None) -> bytes:
    return events.pack(events.WORKFLOW_END[advance.state], workflow_id, advance.root, now,
                       duration_ms=max(0, now - advance.created_ms) if advance.created_ms
                       else None, error_type=error_type if advance.state == wf.FAILED
                       else None)


def launch(broker: Broker, launcher: Launcher, workflow_id: str,
           advance: wf.Advance) -> None:
    """Enqueue what ``advance`` launches (deduplicated by id and key), record the steps
    that cannot be sent as failed (and launch what that leads to)."""
    if not advance.launches:
        return
    now = now_ms()
    items, refused = launcher.items(advance.launches, now)
    if items:
        broker.enqueue(items)
    for item, message, why in refused:
        state, outcome, failure = _refusal(item, message, why, workflow_id, now)
        after = broker.workflows.settle(workflow_id, item.node, state, b"\xc0", outcome,
                                        failure, now)
        if after.finished:
            broker.workflows.emit(after.home, end_event(after, workflow_id, now,
                                                        "MessageTooLarge"))
        launch(broker, launcher, workflow_id, after)


async def alaunch(broker: Broker, launcher: Launcher, workflow_id: str,
                  advance: wf.Advance) -> None:
    if not advance.launches:
        return
    now = now_ms()
    items, refused = launcher.items(advance.launches, now)
    if items:
        await broker.aenqueue(items)
    for item, message, why in refused:
        state, outcome, failure = _refusal(item, message, why, workflow_id, now)
        after = await broker.workflows.asettle(workflow_id, item.node, state, b"\xc0",
                                               outcome, failure, now)
        if after.finished:
            await broker.workflows.aemit(after.home, end_event(after, workflow_id, now,
                                                               "MessageTooLarge"))
        await alaunch(broker, launcher, workflow_id, after)


# -- a member's outcome (the worker's settle path, a cancel) ---------------------------

class Ended(NamedTuple):
    """What recording one member's outcome takes: the arguments of the store's settle."""

    workflow_id: str
    at: int | str
    state: str
    value: bytes
    outcome: bytes
    failure: bytes


def ended(message: Message, state: str, record: Record | None, now: int,
          value: bytes | None = None) -> Ended | None:
    """The outcome of a member message (None if it is not one)."""
    head = message.headers.get(wf.WORKFLOW_HEADER)
    if not isinstance(head, list) or len(head) < 3:
        return None
    workflow_id, at, path = head[0], head[1], head[2]
    error_type = record.error_type if record is not None else None
    error_message = record.error_message if record is not None else None
    if state == states.EXPIRED and error_message is None:
        error_message = "not started before it expired"
    if value is None:
        value = pack(record.result if record is not None else None)
    # A success passes its value on, never a failure: none is built for it.
    failure = b"" if state == states.SUCCEEDED else wf.failure_value(
        workflow_id=workflow_id, node=at, path=path, task=message.task,
        message_id=message.id, state=state, error_type=error_type,
        error_message=error_message)
    outcome = wf.Outcome(str(state), message.id,
                         record.started_ms if record is not None else None,
                         (record.finished_ms if record is not None else None) or now,
                         message.attempt, error_type, error_message).pack()
    return Ended(workflow_id, at, str(state), value, outcome, failure)


async def arecord_outcome(broker: Broker, launcher: Launcher, end: Ended) -> None:
    """Record a member's outcome and enqueue what follows; run again after a crash, it
    records nothing twice and enqueues the same steps (deduplicated)."""
    now = now_ms()
    advance = await broker.workflows.asettle(end.workflow_id, end.at, end.state, end.value,
                                             end.outcome, end.failure, now)
    if advance.status == "gone":
        return
    if advance.finished:
        await broker.workflows.aemit(advance.home, end_event(
            advance, end.workflow_id, now, _error_type(end)))
    await alaunch(broker, launcher, end.workflow_id, advance)


async def arecord_outcomes(broker: Broker, launcher: Launcher, ends: Sequence[Ended]) -> None:
    """``arecord_outcome`` of many steps (a worker's batch): their outcomes in one round
    trip, what follows all of them in one enqueue."""
    now = now_ms()
    advances = await broker.workflows.asettle_many(
        [(e.workflow_id, e.at, e.state, e.value, e.outcome, e.failure, now) for e in ends])
    items: list[Enqueue] = []
    later: list[tuple[str, wf.Advance]] = []
    for end, advance in zip(ends, advances, strict=True):
        if advance.status == "gone":
            continue
        if advance.finished:
            await broker.workflows.aemit(advance.home, end_event(
                advance, end.workflow_id, now, _error_type(end)))
        if advance.launches:
            found, refused = launcher.items(advance.launches, now)
            items += found
            if refused:
                later.append((end.workflow_id, advance._replace(
                    launches=[r[0] for r in refused])))
    if items:
        await broker.aenqueue(items)
    for workflow_id, advance in later:  # rare: a result too large to pass on
        await alaunch(broker, launcher, workflow_id, advance)


def _error_type(end: Ended) -> str | None:
    return unpack(end.failure).get("error_type") if end.failure else None


def record_outcome(broker: Broker, launcher: Launcher, end: Ended) -> None:
    now = now_ms()
    advance = broker.workflows.settle(end.workflow_id, end.at, end.state, end.value,
                                      end.outcome, end.failure, now)
    if advance.status == "gone":
        return
    if advance.finished:
        broker.workflows.emit(advance.home, end_event(
            advance, end.workflow_id, now, _error_type(end)))
    launch(broker, launcher, end.workflow_id, advance)


# -- the service and the handle --------------------------------------------------------

class WorkflowProgress(NamedTuple):
    done: int  # task steps with a final outcome
    total: int  # task steps (on_error aside)


class Workflows:
    """``client.workflows``: enqueue, inspect, cancel, wait for workflows."""

    def __init__(self, *, broker: Broker, build: Build, launcher: Launcher,
                 cancel: Callable[..., Any], acancel: Callable[..., Any],
                 records: Callable[[str, Sequence[str]], list[bytes | None]],
                 arecords: Callable[..., Any]) -> None:
        self._broker = broker
        self._build = build
        self.launcher = launcher
        self._cancel, self._acancel = cancel, acancel
        self._records, self._arecords = records, arecords
        #: Set by the Django glue: ``on_commit(callback, using)`` runs ``callback`` once
        #: the transaction on ``using`` commits (at once outside one).
        self.on_commit: Callable[[Callable[[], Any], str | None], None] | None = None

    @property
    def _store(self) -> Any:
        return self._broker.workflows

    def prepare(self, canvas: Canvas, on_error: Signature | None,
                workflow_id: str) -> Prepared:
        """Flatten and encode (every step's arguments are checked here)."""
        return prepare(self._build, canvas, on_error, check_id(workflow_id))

    def enqueue(self, canvas: Canvas, *, on_error: Signature | None = None,
                workflow_id: str | None = None) -> WorkflowHandle:
        workflow_id = workflow_id or new_id()
        ready = self.prepare(canvas, on_error, workflow_id)
        now = now_ms()
        advance = self._store.start(workflow_id, now, ready.home, ready.nodes, ready.members,
                                    ready.on_error)
        if advance.state == wf.RUNNING:  # (again after a crash: at least once)
            self._store.emit(ready.home, events.pack(events.WORKFLOW_STARTED, workflow_id,
                                                     ready.root, now))
        if advance.status == "new":
            # The first steps take no input: their messages as built, not built again.
            self._broker.enqueue([ready.items[int(x.node)] for x in advance.launches])
        else:
            launch(self._broker, self.launcher, workflow_id, advance)
        return WorkflowHandle(workflow_id, self)

    async def aenqueue(self, canvas: Canvas, *, on_error: Signature | None = None,
                       workflow_id: str | None = None) -> WorkflowHandle:
        workflow_id = workflow_id or new_id()
        ready = self.prepare(canvas, on_error, workflow_id)
        now = now_ms()
        advance = await self._store.astart(workflow_id, now, ready.home, ready.nodes,
                                           ready.members, ready.on_error)
        if advance.state == wf.RUNNING:  # (again after a crash: at least once)
            await self._store.aemit(ready.home, events.pack(
                events.WORKFLOW_STARTED, workflow_id, ready.root, now))
        if advance.status == "new":
            await self._broker.aenqueue([ready.items[int(x.node)] for x in advance.launches])
        else:
            await alaunch(self._broker, self.launcher, workflow_id, advance)
        return WorkflowHandle(workflow_id, self)

    def handle(self, workflow_id: str) -> WorkflowHandle:
        return WorkflowHandle(check_id(workflow_id), self)

    # -- reading ---------------------------------------------------------------------

    def state(self, workflow_id: str) -> str:
        (state,) = self._store.fields(workflow_id, ["state"])
        return _text(state)

    async def astate(self, workflow_id: str) -> str:
        (state,) = await self._store.afields(workflow_id, ["state"])
        return _text(state)

    def progress(self, workflow_id: str) -> WorkflowProgress:
        done, total = self._store.fields(workflow_id, ["done", "total"])
        return WorkflowProgress(int(done or 0), int(total or 0))

    async def aprogress(self, workflow_id: str) -> WorkflowProgress:
        done, total = await self._store.afields(workflow_id, ["done", "total"])
        return WorkflowProgress(int(done or 0), int(total or 0))

    def inspect(self, workflow_id: str) -> wf.WorkflowInfo | None:
        """The tree, its steps' states, results and errors (None: unknown or expired)."""
        h = self._store.read(check_id(workflow_id))
        if not h:
            return None
        out = _outstanding(h)
        records = _records_by_queue(out, self._records)
        return info(h, records)

    async def ainspect(self, workflow_id: str) -> wf.WorkflowInfo | None:
        h = await self._store.aread(check_id(workflow_id))
        if not h:
            return None
        records: dict[str, Record] = {}
        for queue, ids in _by_queue(_outstanding(h)).items():
            for data in await self._arecords(queue, ids):
                if data:
                    found = Record.from_bytes(data)
                    records[found.id] = found
        return info(h, records)

    def result(self, workflow_id: str, timeout: float = 0.0) -> Any:
        state = self._store.wait(workflow_id, timeout)
        return self._value(workflow_id, state, self._store.read(workflow_id), timeout)

    async def aresult(self, workflow_id: str, timeout: float = 0.0) -> Any:
        state = await self._store.await_final(workflow_id, timeout)
        return self._value(workflow_id, state, await self._store.aread(workflow_id), timeout)

    @staticmethod
    def _value(workflow_id: str, state: str, h: dict[str, bytes], timeout: float) -> Any:
        if state == wf.SUCCEEDED:
            return unpack(wf.value(_plain(h), 0))
        failure = unpack(h["fail"]) if h.get("fail") else None
        if state == wf.FAILED:
            raise WorkflowFailed(workflow_id, state, failure)
        if state == wf.CANCELLED:
            raise WorkflowCancelled(workflow_id, state, failure)
        raise ResultTimeout(f"workflow {workflow_id!r} not final within {timeout} s"
                            + ("" if state else " (unknown: never enqueued, or expired)"))

    # -- cancelling ------------------------------------------------------------------

    def cancel(self, workflow_id: str) -> str:
        """Cancel a running workflow and each step out (queued, scheduled, running):
        its state before ("" when unknown). Nothing after it is enqueued."""
        now = now_ms()
        before, members = self._store.cancel(check_id(workflow_id), now)
        if before == wf.RUNNING:
            home = _text(self._store.fields(workflow_id, ["home"])[0])
            for message in _messages(members):
                self._cancel(message.id, queue=message.queue)
            self._store.emit(home, _cancel_event(workflow_id, self._store, now))
        return before

    async def acancel(self, workflow_id: str) -> str:
        now = now_ms()
        before, members = await self._store.acancel(check_id(workflow_id), now)
        if before == wf.RUNNING:
            home = _text((await self._store.afields(workflow_id, ["home"]))[0])
            for message in _messages(members):
                await self._acancel(message.id, queue=message.queue)
            fields = await self._store.afields(workflow_id, ["created", "t:0"])
            await self._store.aemit(home, _cancel_event_of(workflow_id, fields, now))
        return before

    def member_cancelled(self, message_id: str) -> None:
        """A step cancelled on its own (``client.cancel(id)``): its outcome is recorded
        before the message is withdrawn, so a crash in between leaves the workflow able
        to end (the step, if it still runs, changes nothing)."""
        end = _cancelled_member(message_id)
        if end is not None and self._store.fields(end.workflow_id, [f"m:{end.at}"])[0]:
            record_outcome(self._broker, self.launcher, end)

    async def amember_cancelled(self, message_id: str) -> None:
        end = _cancelled_member(message_id)
        if end is not None and (await self._store.afields(end.workflow_id,
                                                          [f"m:{end.at}"]))[0]:
            await arecord_outcome(self._broker, self.launcher, end)


def _cancelled_member(message_id: str) -> Ended | None:
    """The cancelled outcome of ``message_id`` if its id is a member's (``<workflow
    id>.<node>``; the caller checks the workflow has that member)."""
    workflow_id, _, at = message_id.rpartition(".")
    if not workflow_id or not _ID.fullmatch(workflow_id) or not (at.isdigit() or at == "e"):
        return None
    node: int | str = int(at) if at.isdigit() else at
    now = now_ms()
    failure = wf.failure_value(workflow_id=workflow_id, node=node, path="", task="",
                               message_id=message_id, state=states.CANCELLED,
                               error_type=None, error_message="cancelled")
    outcome = wf.Outcome(str(states.CANCELLED), message_id, None, now).pack()
    return Ended(workflow_id, node, str(states.CANCELLED), b"\xc0", outcome, failure)


def _cancel_event(workflow_id: str, store: Any, now: int) -> bytes:
    return _cancel_event_of(workflow_id, store.fields(workflow_id, ["created", "t:0"]), now)


def _cancel_event_of(workflow_id: str, fields: list[bytes | None], now: int) -> bytes:
    created, root = fields
    kind = wf.Node.unpack(root).kind if root else ""
    return events.pack(events.WORKFLOW_CANCELLED, workflow_id, kind, now,
                       duration_ms=max(0, now - int(created)) if created else None)


def _messages(members: Sequence[bytes]) -> list[Message]:
    return [decode(wf.Member.unpack(m).payload, 1 << 62) for m in members]


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _plain(h: dict[str, bytes]) -> dict[str, Any]:
    """The hash as core/workflow.py reads it: shapes and counters as text."""
    return {k: (v.decode() if k[:2] in ("t:", "c:", "L:") or k in _TEXT else v)
            for k, v in h.items()}


_TEXT = frozenset({"state", "created", "finished", "home", "done", "total", "F", "id"})


def _outstanding(h: dict[str, bytes]) -> list[tuple[str, str]]:
    """(queue, message id) of every step launched and not finished."""
    out = []
    for key, member in h.items():
        if key.startswith("m:"):
            at = key[2:]
            if f"l:{at}" in h and f"s:{at}" not in h:
                message = decode(wf.Member.unpack(member).payload, 1 << 62)
                out.append((message.queue, message.id))
    return out


def _by_queue(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for queue, message_id in pairs:
        out.setdefault(queue, []).append(message_id)
    return out


def _records_by_queue(pairs: list[tuple[str, str]],
                      read: Callable[[str, Sequence[str]], list[bytes | None]]
                      ) -> dict[str, Record]:
    records: dict[str, Record] = {}
    for queue, ids in _by_queue(pairs).items():
        for data in read(queue, ids):
            if data:
                found = Record.from_bytes(data)
                records[found.id] = found
    return records


def info(raw: dict[str, bytes], records: dict[str, Record]) -> wf.WorkflowInfo:
    """The WorkflowInfo of a workflow's hash and the records of its steps that are out."""
    h = _plain(raw)
    state = h["state"]

    def task_node(at: int | str, path: str) -> wf.WorkflowNode:
        message = decode(wf.Member.unpack(h[f"m:{at}"]).payload, 1 << 62)
        kind_state = h.get(f"s:{at}")
        common: dict[str, Any] = {"kind": wf.TASK, "node": at, "path": path, "task": message.task,
                  "message_id": message.id, "queue": message.queue}
        if kind_state is not None:
            done = wf.Outcome.unpack(h[f"o:{at}"])
            result = unpack(h[f"v:{at}"]) if done.state == states.SUCCEEDED else None
            return wf.WorkflowNode(state=_text(kind_state), started_ms=done.started_ms,
                                   finished_ms=done.finished_ms, attempt=done.attempt,
                                   result=result, error_type=done.error_type,
                                   error_message=done.error_message, **common)
        if f"l:{at}" not in h:
            return wf.WorkflowNode(state="pending", **common)
        found = records.get(message.id)
        if found is None:
            return wf.WorkflowNode(state=str(states.QUEUED), **common)
        return wf.WorkflowNode(state=str(found.state), started_ms=found.started_ms,
                               attempt=found.attempt, **common)

    def build(n: int, path: str) -> wf.WorkflowNode:
        shape = wf.node(h, n)
        if shape.kind == wf.TASK:
            return task_node(n, path)
        kids = [build(c, f"{path}.{i}" if path else str(i))
                for i, c in enumerate(wf.children(h, n))]
        return wf.WorkflowNode(kind=shape.kind, node=n, path=path,
                               state=_composite(kids, state), children=kids,
                               allow_failures=shape.allow_failures)

    root = build(0, "")
    on_error = task_node(wf.ON_ERROR, "e") if "m:e" in h else None
    return wf.WorkflowInfo(
        id=h.get("id", ""), state=state, created_ms=int(h.get("created", 0)),
        finished_ms=int(h["finished"]) if "finished" in h else None,
        done=int(h.get("done", 0)), total=int(h.get("total", 0)), home=h.get("home", ""),
        root=root, on_error=on_error,
        failure=unpack(raw["fail"]) if raw.get("fail") else None)


_FAILED_STATES = {str(states.FAILED), str(states.DEAD_LETTERED), str(states.CANCELLED),
                  str(states.EXPIRED)}


def _composite(kids: list[wf.WorkflowNode], workflow_state: str) -> str:
    found = {k.state for k in kids}
    if found & _FAILED_STATES:
        return wf.FAILED
    if found <= {str(states.SUCCEEDED)}:
        return wf.SUCCEEDED
    if workflow_state == wf.CANCELLED:
        return wf.CANCELLED
    if found == {"pending"}:
        return "pending"
    return wf.RUNNING


@dataclass(slots=True)
class WorkflowHandle:
    """What enqueuing a workflow returns: its id, and a way to its state and result."""

    id: str
    _workflows: Workflows

    def state(self) -> str:
        """running, succeeded, failed or cancelled ("" when unknown)."""
        return self._workflows.state(self.id)

    async def astate(self) -> str:
        return await self._workflows.astate(self.id)

    def result(self, timeout: float = 0.0) -> Any:
        """A chain's last result, a group's results in order, a chord's callback's; raises
        WorkflowFailed, WorkflowCancelled, or ResultTimeout if not final in time."""
        return self._workflows.result(self.id, timeout)

    async def aresult(self, timeout: float = 0.0) -> Any:
        return await self._workflows.aresult(self.id, timeout)

    def progress(self) -> WorkflowProgress:
        """Task steps finished, of all."""
        return self._workflows.progress(self.id)

    async def aprogress(self) -> WorkflowProgress:
        return await self._workflows.aprogress(self.id)

    def cancel(self) -> str:
        return self._workflows.cancel(self.id)

    async def acancel(self) -> str:
        return await self._workflows.acancel(self.id)

    def inspect(self) -> wf.WorkflowInfo | None:
        return self._workflows.inspect(self.id)

    async def ainspect(self) -> wf.WorkflowInfo | None:
        return await self._workflows.ainspect(self.id)

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.id}>"
