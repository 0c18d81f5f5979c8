"""Keyspace: the only code that formats Redis key and channel names.

Every key of one queue carries the same hash tag ``{<ns>:<queue>}``, so each Lua
script touches one cluster slot and different queues may live on different nodes.
The keys ``bq:{ns}:...`` (worker registry and infos, revocation and schedules
channels, rate buckets, seen queues) are the namespace's, in the slot of ``{ns}``:
no script spans them and a queue (pipelines do, never as a transaction). On a Redis
Cluster a queue's channels are shard channels (SPUBLISH / SSUBSCRIBE on the node of
its slot); the namespace's are plain ones. Each script lists in KEYS every key it
touches (tests/engine/test_topologies.py runs the flows under MONITOR to check it).
The table: queue slot above ``bq:{ns}:workers``, namespace slot from it on.

======================================  ========  =============================================
key                                     type      holds
======================================  ========  =============================================
``bq:{ns:queue}:s``                     stream    messages ready to run (reliable mode);
                                                  consumer group ``workers``
``bq:{ns:queue}:hi:s`` / ``:lo:s``      stream    the same, priority high / low (each
                                                  priority is a lane: its own stream,
                                                  list, schedule and schedule data, with
                                                  ``hi:``/``lo:`` before the suffix)
``bq:{ns:queue}:l``                     list      messages ready to run (fast mode): LPUSH
                                                  in, RPOP / BRPOP out, RPUSH to requeue
                                                  one next in line; no group, no lease
``bq:{ns:queue}:z``                     zset      scheduled message ids (delayed, ETA, retry
                                                  backoff), scored by due time in ms
``bq:{ns:queue}:zd``                    hash      scheduled message id -> encoded message
``bq:{ns:queue}:dlq``                   zset      dead-letter ids scored by dead-letter time ms
``bq:{ns:queue}:dlqd``                  hash      dead-letter id -> encoded dead letter
``bq:{ns:queue}:r:<id>``                string    record of one message; TTL result_ttl
``bq:{ns:queue}:u:<key>``               string    idempotency key -> message id; TTL
``bq:{ns:queue}:uq:<key>``              string    unique marker (unique=True, or a chosen
                                                  task_id) -> id of the unfinished message
                                                  holding it; deleted by its final
                                                  settlement; TTL idempotency_ttl
``bq:{ns:queue}:ev``                    stream    events: every transition of the queue's
                                                  messages (core/events.py); MAXLEN ~
                                                  events_maxlen; the same for every lane
``bq:{ns:queue}:hl``                    string    lease of the queue's one task history writer
                                                  (blitzq_django.history): its token; PX 15 s;
                                                  taken, renewed and released by
                                                  lease_hold.lua / lease_release.lua
``bq:{ns:queue}:hh``                    hash      the history's health: events trimmed before
                                                  the writer read them (events_read.lua),
                                                  events it could not write; counts and last
``bq:{ns:queue}:rv``                    zset      revocations (cancel of a queued or running
                                                  message): id -> expiry ms (now +
                                                  revoke_ttl); pruned by score on write
``bq:{ns:queue}:done:<id>``             channel   published when a final record is written
``bq:{ns:queue}:k:[<lane>:]<token>``    string    receipt of one settle batch in one lane
                                                  (its reply); TTL
``bq:{ns:queue}:pc``                     hash      periodic claims: schedule name -> the latest
                                                  occurrence (ms) handled; compare-and-set by
                                                  periodic.lua with the dispatch itself
``bq:{ns:queue}:pl``                     hash      schedule name -> its last dispatch (packed)
``bq:{ns:queue}:wake``                   channel   "<due ms>", published by enqueue.lua when a
                                                  delayed message becomes the earliest of a
                                                  lane's schedule: promoters wake at once
``bq:{ns:queue}:p:<id>``                hash      progress of one message (engine/progress.py):
                                                  done, total, note, time, owner; TTL record_ttl
``bq:{ns:queue}:pg:<id>``               channel   published with each progress write
``bq:{ns:queue}:dc:<id>``               string    the django.tasks call of one message (the
                                                  Task as enqueued, its arguments), written
                                                  by blitzq_django.backend; TTL
``bq:{ns:queue}:mx``                    hash      metrics folded from the events stream
                                                  (engine/metrics.py): counters, histogram
                                                  buckets, the events cursor folded up to
``bq:{ns:queue}:mxs``                   hash      metrics: message id -> enqueued ms, until
                                                  its first start (queue latency)
``bq:{ns:queue}:ml``                    string    lease of the one metrics folder at a time; PX
                                                  30 s; the same scripts as ``hl``
``bq:{ns:queue}:run:<worker>``          hash      running index of one worker: message id ->
                                                  its attempt (task, attempt, started ms,
                                                  created ms), for attempts running past
                                                  RUNNING_INDEX_DELAY_S; removed by their
                                                  settlement; PX the worker's registry TTL,
                                                  renewed with each heartbeat
``bq:{ns}:workers``                     zset      worker registry: name -> expiry of its entry
``bq:{ns}:w:<name>``                    string    one worker's info (WorkerInfo); TTL
``bq:{ns}:revoked``                     channel   "<queue> <id>", published by each revocation
                                                  (workers also re-read ``rv``, so a lost
                                                  message still applies)
``bq:{ns}:rl:<bucket>``                 hash      rate limit token bucket (tokens, last refill
                                                  ms, deferral horizon ms); TTL. Shared by
                                                  every queue, so under the namespace's tag;
                                                  its take is an atomic step of its own
``bq:{ns}:schedules``                   channel   "schedules changed": a scheduler reloads its
                                                  schedule sources (a database edit)
``bq:{ns}:schedules:v``                 string    version of the schedules, INCR with each
                                                  change (read every 2 s: a missed publish)
``bq:{ns:wf:<id>}``                     hash      one workflow's state (engine/core/workflow.py
                                                  lists its fields): its own hash tag, so its
                                                  steps (workflow.lua) touch one slot; no TTL
                                                  until final, then record_ttl
``bq:{ns:wf:<id>}:done``                channel   published when the workflow becomes final
``bq:{ns}:queues``                      set       every queue a message was written to: SADD by
                                                  producers the first time a process writes
                                                  to a queue (and again every few minutes),
                                                  never in a queue's script (another slot)
======================================  ========  =============================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...core.names import check_name

GROUP = "workers"
PREFIX = "bq"


#: Lane of each priority (None is normal), highest first: the order workers read them in.
LANE_PREFIXES = {"high": "hi:", None: "", "low": "lo:"}
_LANE_INDEX = {priority: i for i, priority in enumerate(LANE_PREFIXES)}


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names of one queue; those of ready and scheduled messages are per lane.

    A lane is where messages of one priority wait: ``lane(priority)`` gives its keys.
    Everything else (records, dead letters, events...) is the queue's, whatever the lane.
    """

    tag: str  # "bq:{ns:queue}"
    priority: str | None = None  # this lane's priority (None: normal)
    stream: str = ""
    list: str = ""
    schedule: str = ""
    schedule_data: str = ""
    #: every lane of the queue, highest priority first; shared by the lanes, built once
    lanes: tuple[QueueKeys, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def of(cls, tag: str, priority: str | None = None) -> QueueKeys:
        """The keys of the queue with hash tag ``tag``, in its lane of ``priority``."""
        lanes = tuple(cls(tag, p, f"{tag}:{prefix}s", f"{tag}:{prefix}l", f"{tag}:{prefix}z",
                          f"{tag}:{prefix}zd") for p, prefix in LANE_PREFIXES.items())
        for lane in lanes:
            object.__setattr__(lane, "lanes", lanes)  # frozen: set once, here
        return lanes[_LANE_INDEX[priority]]

    def lane(self, priority: str | None) -> QueueKeys:
        """The keys of this queue's lane of ``priority`` ("high", None or "low")."""
        return self.lanes[_LANE_INDEX[priority]]

    @property
    def dead_letters(self) -> str:
        return f"{self.tag}:dlq"

    @property
    def dead_letter_data(self) -> str:
        return f"{self.tag}:dlqd"

    def record(self, message_id: str) -> str:
        return f"{self.tag}:r:{message_id}"

    def unique(self, idempotency_key: str) -> str:
        return f"{self.tag}:u:{idempotency_key}"

    def unique_marker(self, key: str) -> str:
        """Held by the unfinished message of a unique key (``args:<digest>``, ``id:<id>``)."""
        return f"{self.tag}:uq:{key}"

    @property
    def events(self) -> str:
        """The queue's events stream (one for every lane)."""
        return f"{self.tag}:ev"

    @property
    def history_lease(self) -> str:
        """Held by the one history writer of this queue (blitzq_django.history)."""
        return f"{self.tag}:hl"

    @property
    def history_health(self) -> str:
        """What the history of this queue lacks: events lost to the stream's cap, events
        its writer could not write (blitzq_django.history.health)."""
        return f"{self.tag}:hh"

    @property
    def revocations(self) -> str:
        """Revoked message ids (cancelled while queued or running) -> expiry ms."""
        return f"{self.tag}:rv"

    def done_channel(self, message_id: str) -> str:
        return f"{self.tag}:done:{message_id}"

    def receipt(self, token: str) -> str:
        # One per lane: a settle batch spanning lanes makes one script call per lane
        # under one token, and each call must find only its own receipt.
        lane = f"{self.priority}:" if self.priority else ""
        return f"{self.tag}:k:{lane}{token}"

    def starts(self, entry_id: str) -> str:
        """How many times this lane's recovered entry ``entry_id`` started (start.lua)."""
        lane = f"{self.priority}:" if self.priority else ""
        return f"{self.tag}:st:{lane}{entry_id}"

    @property
    def periodic_claims(self) -> str:
        """Schedule name -> latest occurrence ms handled (engine/scheduler, periodic.lua)."""
        return f"{self.tag}:pc"

    @property
    def periodic_last(self) -> str:
        """Schedule name -> its last dispatch (packed by the scheduler)."""
        return f"{self.tag}:pl"

    def progress(self, message_id: str) -> str:
        """Progress of one message (engine/progress.py), a hash with a TTL."""
        return f"{self.tag}:p:{message_id}"

    def progress_channel(self, message_id: str) -> str:
        """Published with each progress write of one message."""
        return f"{self.tag}:pg:{message_id}"

    def django_call(self, message_id: str) -> str:
        """The django.tasks call of one message (blitzq_django.backend_calls), with a TTL."""
        return f"{self.tag}:dc:{message_id}"

    @property
    def metrics(self) -> str:
        """Metrics folded from the events stream (engine/metrics.py)."""
        return f"{self.tag}:mx"

    @property
    def metrics_starts(self) -> str:
        """Metrics: message id -> enqueued ms until its first start (queue latency)."""
        return f"{self.tag}:mxs"

    @property
    def metrics_lease(self) -> str:
        """Held by the one metrics folder of this queue at a time."""
        return f"{self.tag}:ml"

    def lease(self, purpose: str) -> str:
        """The lease of ``purpose`` (capabilities.LEASE_PURPOSES): "history" or "metrics"."""
        if purpose == "history":
            return self.history_lease
        if purpose == "metrics":
            return self.metrics_lease
        raise ValueError(f"no lease for {purpose!r}")

    def running(self, worker: str) -> str:
        """Running index of one worker in this queue (engine/running.py): message id ->
        its attempt, for attempts running past RUNNING_INDEX_DELAY_S."""
        return f"{self.tag}:run:{worker}"

    @property
    def wake_channel(self) -> str:
        """Published when a delayed message becomes the earliest of a lane's schedule."""
        return f"{self.tag}:wake"


class Keyspace:
    def __init__(self, namespace: str) -> None:
        # Checked here, where names become keys: (ns "a", queue "b:c") must not share
        # keys with (ns "a:b", queue "c"), nor a brace break the hash tag.
        self.namespace = check_name("namespace", namespace)
        self._queues: dict[tuple[str, str | None], QueueKeys] = {}

    def queue(self, name: str, priority: str | None = None) -> QueueKeys:
        """The keys of queue ``name`` (of its lane of ``priority``: "high", None, "low")."""
        keys = self._queues.get((name, priority))
        if keys is None:
            if priority is None:
                check_name("queue", name)
                keys = QueueKeys.of(f"{PREFIX}:{{{self.namespace}:{name}}}")
            else:  # the same lanes as the queue's, not a second set
                keys = self.queue(name).lane(priority)
            self._queues[(name, priority)] = keys
        return keys

    @property
    def workers(self) -> str:
        return f"{PREFIX}:{{{self.namespace}}}:workers"

    def worker(self, name: str) -> str:
        return f"{PREFIX}:{{{self.namespace}}}:w:{name}"

    @property
    def revocation_channel(self) -> str:
        """Where each revocation is published as "<queue> <id>" (one per namespace)."""
        return f"{PREFIX}:{{{self.namespace}}}:revoked"

    def rate_bucket(self, name: str) -> str:
        """The token bucket of a rate limit (core/rates.py checks the name's shape)."""
        return f"{PREFIX}:{{{self.namespace}}}:rl:{name}"

    @property
    def schedules_channel(self) -> str:
        """Where "the schedules changed" is published (a database edit of a schedule)."""
        return f"{PREFIX}:{{{self.namespace}}}:schedules"

    @property
    def schedules_version(self) -> str:
        """INCR with each schedule change; schedulers compare it every few seconds."""
        return f"{PREFIX}:{{{self.namespace}}}:schedules:v"

    @property
    def seen_queues(self) -> str:
        """The set of every queue a message was written to (runworker serves them)."""
        return f"{PREFIX}:{{{self.namespace}}}:queues"

    def workflow(self, workflow_id: str) -> str:
        """The hash of one workflow, under a hash tag of its own (a queue name cannot hold
        ':', so no queue's tag is ``{ns:wf:...}``)."""
        return f"{PREFIX}:{{{self.namespace}:wf:{workflow_id}}}"

    def workflow_channel(self, workflow_id: str) -> str:
        """Published with the workflow's final state."""
        return f"{PREFIX}:{{{self.namespace}:wf:{workflow_id}}}:done"

    def all_keys_pattern(self) -> str:
        """Glob over every key of this namespace (for purge in tests and tools).

        ``bq:{ns:*`` and ``bq:{ns}:*`` but not ``bq:{ns2:...``: the namespace must end
        at ':' or '}'. Valid names hold no glob metacharacter; escaped all the same.
        """
        namespace = re.sub(r"([*?\[\]\\])", r"\\\1", self.namespace)
        return f"{PREFIX}:{{{namespace}[:}}]*"
