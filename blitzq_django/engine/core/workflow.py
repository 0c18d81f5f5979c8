"""Workflows (chains, groups, chords): the tree of one workflow and how it advances
(pure: no I/O). docs/workflows.md has the API, docs/architecture.md the protocol.

A workflow is flattened at enqueue into nodes numbered in pre-order (the root is node 0);
a node's children are ``n + 1``, then each next one ``c + size(c)``, so reaching a
sibling, a parent or the next step costs O(1) whatever the size of a group. Its state is
one hash per workflow (on Redis ``bq:{ns:wf:<id>}``, its own hash tag), with one field
per fact, each written once:

==============  ==============================================================
field           holds
==============  ==============================================================
``state``       running | succeeded | failed | cancelled
``created``     ms; ``finished`` ms once final
``total``       task nodes (the on_error task aside); ``done``: those with an outcome
``home``        the queue its workflow events go to (the first task's)
``t:<n>``       the shape of node n: ``"<kind> <parent> <pos> <children> <size> <prev>
                <flags>"`` (``Node.pack``)
``m:<n>``       a task node's message, encoded, with its id and options (``Member``)
``l:<n>``       1 once the task node was launched (enqueued)
``s:<n>``       the task node's final state: set once (HSETNX), the guard of its outcome
``o:<n>``       the task node's outcome for inspect (``Outcome``, packed)
``v:<n>``       a node's value: a task's result, or the failure in place of one
                (allow_failures); packed
``c:<n>``       a group's children that completed (the O(1) counter)
``L:<n>``       the task nodes launched by n's outcome (``L:start``: by the start), so a
                step that runs again launches the same ones again (deduplicated)
``F``           the node whose outcome made the workflow final
``fail``        the failure that failed it (the first), packed
==============  ==============================================================

``advance`` (``settle``) below is the memory store's; ``brokers/redis/scripts/
workflow.lua`` is the same steps in one script.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .message import pack, unpack

#: The header a workflow member carries: [workflow id, node, path].
WORKFLOW_HEADER = "workflow"

TASK, CHAIN, GROUP, CHORD = "task", "chain", "group", "chord"
_KIND_CODE = {TASK: "T", CHAIN: "C", GROUP: "G", CHORD: "D"}
_CODE_KIND = {v: k for k, v in _KIND_CODE.items()}

RUNNING, SUCCEEDED, FAILED, CANCELLED = "running", "succeeded", "failed", "cancelled"
#: A workflow's states: running, then one final state.
WORKFLOW_STATES = (RUNNING, SUCCEEDED, FAILED, CANCELLED)
FINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})

#: The task that runs when a workflow fails (``on_error=``) is node "e".
ON_ERROR = "e"
START = "start"


def member_id(workflow_id: str, node: int | str) -> str:
    """The message id of a member: fixed, so every enqueue of it is deduplicated."""
    return f"{workflow_id}.{node}"


def member_key(workflow_id: str, node: int | str) -> str:
    """The idempotency key of a member's message."""
    return f"workflow:{workflow_id}.{node}"


@dataclass(frozen=True, slots=True)
class Node:
    """One node of the flattened tree."""

    kind: str
    parent: int  # -1: the root
    pos: int  # its place among its parent's children
    children: int
    size: int  # nodes in its subtree, itself included
    prev: int  # its previous sibling, or -1
    allow_failures: bool = False

    def pack(self) -> str:
        return (f"{_KIND_CODE[self.kind]} {self.parent} {self.pos} {self.children} "
                f"{self.size} {self.prev} {'a' if self.allow_failures else '-'}")

    @classmethod
    def unpack(cls, text: str | bytes) -> Node:
        if isinstance(text, bytes):
            text = text.decode()
        k, parent, pos, children, size, prev, flags = text.split(" ")
        return cls(_CODE_KIND[k], int(parent), int(pos), int(children), int(size), int(prev),
                   flags == "a")


class Member(NamedTuple):
    """What is kept of a task node until it is launched: its encoded message (id, queue,
    options; times relative to ``created_ms``, shifted to the launch) and whether the
    previous step's result is prepended to its arguments."""

    payload: bytes
    immutable: bool

    def pack(self) -> bytes:
        return pack([self.payload, self.immutable])

    @classmethod
    def unpack(cls, data: bytes) -> Member:
        payload, immutable = unpack(data)
        return cls(payload, bool(immutable))


class Outcome(NamedTuple):
    """A task node's final outcome, as inspect shows it."""

    state: str
    message_id: str
    started_ms: int | None = None
    finished_ms: int | None = None
    attempt: int | None = None
    error_type: str | None = None
    error_message: str | None = None

    def pack(self) -> bytes:
        return pack(list(self))

    @classmethod
    def unpack(cls, data: bytes) -> Outcome:
        return cls(*unpack(data))


class Launch(NamedTuple):
    """One task node to enqueue: its member and the previous step's value (packed), or
    None when it has none (a first step)."""

    node: int | str
    member: bytes  # Member, packed
    input: bytes | None


class Advance(NamedTuple):
    """What recording one outcome (or a start, or a cancel) leads to."""

    #: "new": recorded now; "again": recorded before (a step that ran again: the same
    #: launches are returned, to enqueue again, deduplicated); "gone": no such workflow
    status: str
    state: str  # the workflow's state after it ("" when gone)
    launches: list[Launch] = []
    #: this outcome made the workflow final (its end event is this caller's to write)
    finished: bool = False
    home: str = ""  # the queue of its events
    root: str = ""  # the root's kind: chain, group, chord or task
    created_ms: int = 0


def _about(h: Hash) -> dict[str, Any]:
    return {"home": _text(h.get("home", "")), "root": node(h, 0).kind,
            "created_ms": int(h.get("created", 0))}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def failure_value(*, workflow_id: str, node: int | str, path: str, task: str,
                  message_id: str, state: str, error_type: str | None,
                  error_message: str | None) -> bytes:
    """What a failed member passes on: to ``on_error``, or in place of its result
    (``allow_failures``)."""
    return pack({"workflow": workflow_id, "node": node, "path": path, "task": task,
                 "id": message_id, "state": state, "error_type": error_type,
                 "error_message": error_message})


def array_of(items: Sequence[bytes]) -> bytes:
    """A msgpack array of already packed items (a group's value, built without decoding)."""
    n = len(items)
    if n < 16:
        head = bytes([0x90 + n])
    elif n < 0x10000:
        head = b"\xdc" + n.to_bytes(2, "big")
    else:
        head = b"\xdd" + n.to_bytes(4, "big")
    return head + b"".join(items)


# -- the tree, as kept in the hash -------------------------------------------------

Hash = MutableMapping[str, Any]  # field -> bytes or str (the memory store's hash)


def node(h: Hash, n: int) -> Node:
    return Node.unpack(h[f"t:{n}"])


def children(h: Hash, n: int) -> Iterator[int]:
    shape = node(h, n)
    c = n + 1
    for _ in range(shape.children):
        yield c
        c += node(h, c).size


def last_child(h: Hash, n: int) -> int:
    *_, c = children(h, n)
    return c


def value(h: Hash, n: int, memo: dict[int, bytes] | None = None) -> bytes:
    """Node n's value, packed: a task's result (or failure), a chain's last value, a
    group's values in order, a chord's callback's value."""
    memo = {} if memo is None else memo
    if n in memo:
        return memo[n]
    own = h.get(f"v:{n}")
    if own is not None:
        out = own if isinstance(own, bytes) else own.encode()
    else:
        shape = node(h, n)
        if shape.kind == CHAIN:
            out = value(h, last_child(h, n), memo)
        elif shape.kind == GROUP:
            out = array_of([value(h, c, memo) for c in children(h, n)])
        elif shape.kind == CHORD:
            out = value(h, n + 1 + node(h, n + 1).size, memo)
        else:
            out = pack(None)
    memo[n] = out
    return out


def input_of(h: Hash, n: int, memo: dict[int, bytes] | None = None) -> bytes | None:
    """What node n receives: the value of the step before it, or None."""
    shape = node(h, n)
    if shape.parent < 0:
        return None
    parent = node(h, shape.parent)
    if parent.kind == CHAIN and shape.pos > 0:
        return value(h, shape.prev, memo)
    if parent.kind == CHORD and shape.pos == 1:
        return value(h, shape.parent + 1, memo)
    return input_of(h, shape.parent, memo)


def task_nodes(h: Hash, n: int) -> Iterator[int]:
    """The task nodes a launch of n starts now: n, or its first steps."""
    shape = node(h, n)
    if shape.kind == TASK:
        yield n
    elif shape.kind == GROUP:
        for c in children(h, n):
            yield from task_nodes(h, c)
    else:  # a chain's first step, a chord's header
        yield from task_nodes(h, n + 1)


def _launches(h: Hash, ids: Sequence[int | str]) -> list[Launch]:
    memo: dict[int, bytes] = {}
    out = []
    for n in ids:
        if f"s:{n}" in h:  # has its outcome: only a late replay asks for it again
            continue
        if n == ON_ERROR:
            out.append(Launch(n, h["m:e"], h.get("fail")))
        else:
            out.append(Launch(n, h[f"m:{n}"], input_of(h, int(n), memo)))
    return out


def _store_launches(h: Hash, at: str, ids: list[int | str]) -> None:
    h[f"L:{at}"] = ",".join(str(i) for i in ids)
    for n in ids:
        h[f"l:{n}"] = "1"


def _stored_launches(h: Hash, at: str) -> list[int | str]:
    text = h.get(f"L:{at}")
    if not text:
        return []
    if isinstance(text, bytes):
        text = text.decode()
    return [i if i == ON_ERROR else int(i) for i in text.split(",")]


# -- the steps (the memory store's; workflow.lua is the same) ------------------------

def start(h: Hash, *, workflow_id: str, now_ms: int, home: str,
          nodes: Sequence[Node], members: dict[int, bytes], on_error: bytes | None
          ) -> Advance:
    """Store the tree and launch its first steps; again: the same launches."""
    if "state" in h:
        return Advance("again", h["state"], _launches(h, _stored_launches(h, START)),
                       **_about(h))
    h.update({"id": workflow_id, "state": RUNNING, "created": str(now_ms), "home": home,
              "done": "0", "total": str(sum(1 for s in nodes if s.kind == TASK))})
    for n, shape in enumerate(nodes):
        h[f"t:{n}"] = shape.pack()
    for n, member in members.items():
        h[f"m:{n}"] = member
    if on_error is not None:
        h["m:e"] = on_error
    ids: list[int | str] = list(task_nodes(h, 0))
    _store_launches(h, START, ids)
    return Advance("new", RUNNING, _launches(h, ids), **_about(h))


def settle(h: Hash, *, at: int | str, state: str, value_: bytes, outcome: bytes,
           failure: bytes, now_ms: int) -> Advance:
    """Record task node ``at``'s final outcome once and advance: launch what follows,
    complete its parents, finish the workflow. ``state`` is the member's record state
    ("succeeded" passes ``value_`` on; any other fails it unless allow_failures)."""
    if "state" not in h:
        return Advance("gone", "")
    if f"s:{at}" in h:
        finished = h.get("F") == str(at)
        return Advance("again", h["state"], _launches(h, _stored_launches(h, str(at))),
                       finished, **_about(h))
    h[f"s:{at}"] = state
    h[f"o:{at}"] = outcome
    h[f"v:{at}"] = value_ if state == SUCCEEDED else failure
    if at == ON_ERROR:
        return Advance("new", h["state"])
    h["done"] = str(int(h["done"]) + 1)
    if h["state"] != RUNNING:
        _store_launches(h, str(at), [])
        return Advance("new", h["state"])
    ids: list[int | str] = []
    final = _walk(h, int(at), state == SUCCEEDED, failure, ids)
    if final:
        h["state"] = final
        h["finished"] = str(now_ms)
        h["F"] = str(at)
        if final == FAILED:
            h.setdefault("fail", failure)
            if "m:e" in h:
                ids.append(ON_ERROR)
    _store_launches(h, str(at), ids)
    return Advance("new", h["state"], _launches(h, ids), bool(final), **_about(h))


def _walk(h: Hash, n: int, ok: bool, failure: bytes, ids: list[int | str]) -> str:
    """Complete node n (ok or failed) and its ancestors as far as it goes, collecting
    the task nodes to launch; the workflow's final state when the root completes."""
    while True:
        shape = node(h, n)
        if shape.parent < 0:
            return SUCCEEDED if ok else FAILED
        p = shape.parent
        parent = node(h, p)
        if parent.kind == CHAIN:
            if ok and shape.pos < parent.children - 1:
                ids.extend(task_nodes(h, n + shape.size))
                return ""
        elif parent.kind == GROUP:
            if not ok:
                grand = node(h, parent.parent) if parent.parent >= 0 else None
                if grand is None or grand.kind != CHORD or parent.pos != 0 \
                        or not grand.allow_failures:
                    n = p
                    continue
                h.setdefault(f"v:{n}", failure)
                ok = True
            done = int(h.get(f"c:{p}", 0)) + 1
            h[f"c:{p}"] = str(done)
            if done < parent.children:
                return ""
        elif parent.kind == CHORD and shape.pos == 0 and ok:
            ids.extend(task_nodes(h, n + shape.size))
            return ""
        n = p


def cancel(h: Hash, *, now_ms: int) -> tuple[str, list[bytes]]:
    """Make a running workflow cancelled: (its state before, the members launched and
    not finished, to cancel)."""
    if "state" not in h:
        return "", []
    before = h["state"]
    if before != RUNNING:
        return before, []
    h["state"] = CANCELLED
    h["finished"] = str(now_ms)
    # From the launch marks, not the tree: a damaged workflow can still be cancelled.
    out = [h[f"m:{k[2:]}"] for k in list(h) if k.startswith("l:")
           and f"s:{k[2:]}" not in h and f"m:{k[2:]}" in h]
    return before, out


# -- what inspect shows -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class WorkflowNode:
    """One node of a workflow as inspect sees it. ``state``: a task's record state
    ("pending" before it is enqueued), or for a chain, group or chord "pending",
    "running", "succeeded", "failed" or "cancelled"."""

    kind: str  # task | chain | group | chord
    node: int | str  # its number in the flattened tree ("e": the on_error task)
    path: str  # positions from the root, dotted ("" is the root, "1.0" ...)
    state: str
    task: str | None = None  # task nodes: the task name, message id, queue ...
    message_id: str | None = None
    queue: str | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    attempt: int | None = None
    result: Any = None  # a succeeded task's result
    error_type: str | None = None
    error_message: str | None = None
    allow_failures: bool = False  # chords
    children: list[WorkflowNode] = field(default_factory=list)

    def walk(self) -> Iterator[WorkflowNode]:
        """This node and every node under it, in order."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """What is known of a workflow now (``client.workflows.inspect(id)``)."""

    id: str
    state: str  # running | succeeded | failed | cancelled
    created_ms: int
    finished_ms: int | None
    done: int  # task nodes with a final outcome
    total: int  # task nodes (on_error aside)
    home: str  # the queue of its workflow events
    root: WorkflowNode
    on_error: WorkflowNode | None = None
    #: the failure that failed it: workflow, node, path, task, id, state, error_type,
    #: error_message
    failure: dict[str, Any] | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL

    def members(self) -> list[WorkflowNode]:
        """Every task node, in order (the on_error task last, when there is one)."""
        out = [n for n in self.root.walk() if n.kind == TASK]
        return out + ([self.on_error] if self.on_error is not None else [])
