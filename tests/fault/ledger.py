"""The ledger the fault tasks write (see app.py), and the checker every scenario reports with.

Vocabulary (docs/delivery-guarantees.md and the reliability research, section 0):

- enqueued: ids the producer was told are queued (enqueue returned them)
- executed: distinct ids whose body ran to completion at least once (a ``done`` line,
  or ``fail`` for tasks that are meant to fail)
- lost: enqueued ids that never executed and are not accounted for otherwise
  (dead-lettered, deliberately deleted ...). Must be 0.
- duplicated: completed runs of the same (id, attempt) beyond the first. A retry is a
  new attempt, not a duplicate; a redelivery of the same attempt is.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

FINISHED = ("done", "fail")

#: every report of the session, printed again in the terminal summary (conftest.py)
REPORTS: list[str] = []


@dataclass(frozen=True, slots=True)
class Line:
    id: str
    attempt: int
    pid: int
    dc: int  # delivery count
    phase: str  # start | done | fail
    t: float
    extra: dict[str, object]


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def lines(self) -> list[Line]:
        """Every complete line; one that is not valid (LedgerTail counts those) is skipped."""
        out = []
        with open(self.path) as f:
            for raw in f:
                if not raw.endswith("\n"):
                    break  # a line being written right now
                line = parse_line(raw)
                if line is not None:
                    out.append(line)
        return out

    def of(self, message_id: str) -> list[Line]:
        return [x for x in self.lines() if x.id == message_id]

    def done_ids(self, phases: Iterable[str] = ("done",)) -> set[str]:
        wanted = set(phases)
        return {x.id for x in self.lines() if x.phase in wanted}

    def count(self, phase: str) -> int:
        return sum(1 for x in self.lines() if x.phase == phase)


@dataclass
class Report:
    scenario: str
    enqueued: int
    executed: int
    lost: int
    duplicated: int
    lost_ids: list[str]
    extra: dict[str, object] = field(default_factory=dict)

    def line(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.extra.items())
        return (f"[fault] {self.scenario}: enqueued={self.enqueued} executed={self.executed} "
                f"lost={self.lost} duplicated={self.duplicated} {extra}").rstrip()


def check(scenario: str, ledger: Ledger, enqueued: Iterable[str], *,
          accounted: Iterable[str] = (), finished: Iterable[str] = ("done",),
          **extra: object) -> Report:
    """Count one scenario from the ledger, print its line, and remember it for the summary.

    ``accounted``: enqueued ids that legitimately never complete (dead-lettered poison,
    entries the test deleted). ``finished``: the phases that count as "ran to completion".
    """
    ids = list(enqueued)
    lines = ledger.lines()
    wanted = set(finished)
    runs: Counter[tuple[str, int]] = Counter()
    executed_ids: set[str] = set()
    for x in lines:
        if x.phase in FINISHED:
            runs[(x.id, x.attempt)] += 1
        if x.phase in wanted:
            executed_ids.add(x.id)
    known = set(ids)
    executed = executed_ids & known
    lost = sorted(known - executed - set(accounted))
    duplicated = sum(n - 1 for (i, _a), n in runs.items() if i in known and n > 1)
    unexpected = {x.id for x in lines} - known
    if unexpected:
        extra["unexpected"] = len(unexpected)
    report = Report(scenario, len(known), len(executed), len(lost), duplicated, lost[:10], extra)
    print(report.line(), flush=True)
    REPORTS.append(report.line())
    return report


def duplicates(ledger: Ledger) -> dict[tuple[str, int], list[Line]]:
    """Completed runs per (id, attempt) that ran more than once."""
    runs: dict[tuple[str, int], list[Line]] = defaultdict(list)
    for x in ledger.lines():
        if x.phase in FINISHED:
            runs[(x.id, x.attempt)].append(x)
    return {k: v for k, v in runs.items() if len(v) > 1}


def parse_line(raw: str) -> Line | None:
    """One complete ledger line, or None when it is not a valid one (see LedgerTail)."""
    try:
        d = json.loads(raw)
        return Line(d.pop("id"), d.pop("attempt"), d.pop("pid"), d.pop("dc"), d.pop("phase"),
                    d.pop("t"), d)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class LedgerTail:
    """Reads a growing ledger incrementally: each update() parses only the new lines.

    For long runs (tens of thousands of lines) where re-reading the whole file on every
    poll would eat the CPU the workers need. A line being written right now (no newline
    yet) is left for the next update(); a complete line that is not valid JSON (which an
    interleaved partial write would produce) is counted in ``corrupt`` and skipped.
    """

    def __init__(self, path: Path, finished: Iterable[str] = ("done",)) -> None:
        self.path = path
        self.offset = 0
        self.lines: list[Line] = []
        self.corrupt: list[str] = []
        self._finished = set(finished)
        #: ids with a line of a ``finished`` phase
        self.done: set[str] = set()

    def update(self) -> list[Line]:
        """Parse what was appended since the last call; return the new lines."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        new: list[Line] = []
        for raw in chunk[:end].decode(errors="replace").split("\n"):
            line = parse_line(raw)
            if line is None:
                self.corrupt.append(raw)
                continue
            new.append(line)
            if line.phase in self._finished:
                self.done.add(line.id)
        self.lines.extend(new)
        return new
