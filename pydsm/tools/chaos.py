"""``pydsm chaos``: a soak of the protocols under the fabric's chaos mode.

For each seed it starts a local cluster whose every fabric (the daemons',
this driver's and its client processes') runs in chaos mode ``SEED:SPEC``
(delayed messages, late and split writes, see the fabric's chaos spec),
then runs rounds of checks whose answer is known:

- ``kv`` under own and under dir: the final table's checksum against the
  single-process original, and a shorter run's history (every node's
  GETs and SETs, recorded by the workload) checked for linearizability,
  each key's value a counter that a GET reads and a SET adds to;
- a counter that every node adds to, which must come out exact;
- the heap's atomics from several client processes, each a member of the
  cluster: reads, writes and compare-and-swaps of one word and
  fetch-and-adds of another, recorded as a history (call and return times
  on the host's monotonic clock) and checked for linearizability
  (:mod:`pydsm.linearizability`, a register and a counter);
- LOCO's kvstore and shared queue (``chan_ops`` on every node), their
  recorded histories checked as a key-value map and a FIFO queue;
- SSSP on delegation across every node (partitions entrusted to each
  daemon's trustees), each node's distances against Dijkstra's;
- compactable memory: objects written, three in four freed, the size
  class compacted, and every live object read back through moved
  pointers (batched scan reads, then one by one);
- the managed heap's ``temps`` under Semeru, the stop-the-world baseline
  and the G1-like one at a 25% cache: the data kept (the digest) the same
  under all three;
- once per seed, after its rounds, on three nodes or more: the last node
  killed while SSSP runs on delegation across every node; the run must
  fail on every survivor, each naming the dead rank (fate sharing).

It stops at the first wrong answer, printing the ``DSM_CHAOS`` value that
repeats the run. With ``minutes`` the seeds rotate (a new cluster every
``rounds_per_seed`` rounds) until the time is up; each seed gets a summary
line and the run a table: operations, histories checked, faults injected
by kind, the peer failures the driver and the daemons saw before any kill
(``peers_failed`` in their stats: no member fails in the rounds, and one
that leaves cleanly is not a failure), the kills whose loss every survivor
named, violations (a wrong answer: a history that is not
linearizable, a result that differs), operations that failed (a client's
error or death: the run stops there too), the slowest check.
"""
from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import itertools
import logging
import multiprocessing
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

if TYPE_CHECKING:
    from ..cluster import Cluster
    from ..linearizability import History

KV: Dict[str, Any] = dict(buckets=16, keys=200, ops=1000)
COUNTER_ADDS = 200
HISTORY_CLIENTS = 3
HISTORY_OPS = 120          # per client: a history the checker settles in well under a second
# kv's recorded run: few keys, half of them SETs, so operations on a key overlap
KV_HISTORY: Dict[str, Any] = dict(buckets=8, keys=24, ops=150, get_pct=50)
KV_RECORD_WORDS = 7        # dsm_kvc_record_t: key, kind, initial, delta, seen, call_ns, return_ns
KV_GET, KV_SET = 1, 2
SSSP_SCALE = 8             # 256 vertices: a delegated run of well under a second
FATE_SSSP_SCALE = 16       # long enough to be under way on every node when one is killed
# deleg's messages by their number in the deleg module (csrc/deleg/remote.h):
# a slot write over tcp (DSM_DELEG_AM_PUT) and the termination probe
# (DSM_DELEG_AM_TERM); their handler ids come from the module table
DELEG_PUT_REL = 0
DELEG_TERM_REL = 2
MHEAP_DESIGNS = ("semeru", "baseline", "g1")
#: what chaos did, as the fabric counts it (``chaos_<kind>`` in the stats):
#: messages delayed, writes placed late or split, delayed items whose peer
#: was gone, and the deferred requests' batches delayed, queues held open
#: and queues sent early
FAULT_KINDS = ("delayed", "late", "split", "dropped", "defer_held", "defer_opened", "defer_early")

# (client, kind, arg, result, key, call_ns, return_ns)
OpRecord = Tuple[int, str, Any, Any, str, float, float]


@dataclass
class SoakReport:
    """What a soak did: rounds and checks run, what they covered, the first failure."""

    chaos: str
    rounds: int = 0
    checks: int = 0
    operations: int = 0
    histories: int = 0
    faults: Dict[str, int] = field(default_factory=lambda: {k: 0 for k in FAULT_KINDS})
    peer_failures: int = 0
    kills: int = 0          # members killed mid-run whose loss every survivor named
    seeds: List[str] = field(default_factory=list)
    slowest: Tuple[str, float] = ("", 0.0)
    failure: Optional[str] = None
    errored: bool = False   # the failure is an operation that failed, not a wrong answer
    seconds: float = 0.0
    lines: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def table(self) -> str:
        """The run's totals as a two-column table."""
        # a long soak's seeds are each on their summary line above
        seeds = " ".join(self.seeds) if len(self.seeds) <= 4 else f"{len(self.seeds)} (each on its line above)"
        rows = [("seeds", seeds), ("rounds", str(self.rounds)),
                ("operations", f"{self.operations:,}"), ("checks", str(self.checks)),
                ("histories checked", str(self.histories))]
        rows += [(f"faults: {kind}", f"{n:,}") for kind, n in self.faults.items()]
        rows += [("peer failures seen", str(self.peer_failures)),
                 ("kills, loss named", str(self.kills)),
                 ("violations", "1" if self.failure is not None and not self.errored else "0"),
                 ("operations failed", "1" if self.errored else "0"),
                 ("slowest check", f"{self.slowest[0]} ({self.slowest[1]:.2f} s)"),
                 ("time", f"{self.seconds:.0f} s")]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _client_log_to_stderr(name: str) -> None:
    """A client process's warnings (a timed-out wait names what it waited
    for) on its stderr, which the soak shows; chaos's own banner, which
    every client would repeat, left out."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[{name}] %(name)s %(levelname)s %(message)s"))
    handler.addFilter(lambda r: not r.getMessage().startswith("chaos mode:"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def atomics_client(coordinator: str, secret: str, fabric: str, chaos: Optional[str], register: int,
                   counter: int, client: int, ops: int, seed: int) -> Tuple[List[OpRecord], Dict[str, int]]:
    """One client process of the atomics history: joins the cluster and
    runs ``ops`` random operations on the two words, recording each; returns
    the records and what chaos injected on its fabric."""
    from ..cluster import Cluster

    _client_log_to_stderr(f"atomics client {client}")
    rng = random.Random(seed)
    records: List[OpRecord] = []
    with Cluster.connect(coordinator, secret, fabric=fabric, timeout=120, op_timeout_ms=30000, chaos=chaos) as d:
        last = 0
        for i in range(ops):
            roll = rng.random()
            value = client * 1_000_000 + i + 1          # every written value unique
            result: Any = None
            arg: Any = None
            call = float(time.monotonic_ns())
            if roll < 0.3:
                kind, key = "read", "register"
                result = last = int(d.read(register, 8, dtype=np.uint64)[0])
            elif roll < 0.5:
                kind, key, arg = "write", "register", value
                d.write(register, np.uint64(value))
            elif roll < 0.7:
                kind, key, arg = "cas", "register", (last, value)
                result = d.cas(register, last, value) == last
            elif roll < 0.9:
                kind, key, arg = "fetch_add", "counter", 1
                result = d.fetch_add(counter, 1)
            else:
                kind, key = "read", "counter"
                result = int(d.read(counter, 8, dtype=np.uint64)[0])
            records.append((client, kind, arg, result, key, call, float(time.monotonic_ns())))
        stats = d.stats()
    return records, {k: int(stats.get(f"chaos_{k}", 0)) for k in FAULT_KINDS}


def atomics_history(c: Any, *, clients: int = HISTORY_CLIENTS, ops: int = HISTORY_OPS,
                    seed: int = 1, chaos: Optional[str] = None) -> Tuple[Dict[str, Any], Dict[str, int]]:
    """Record the heap atomics' history from ``clients`` processes on
    cluster ``c`` (the words on its second and last daemons), their fabrics
    in chaos mode ``chaos`` (None: as ``$DSM_CHAOS`` says); returns the
    per-word histories ({"register": History, "counter": History}) and the
    faults chaos injected in the clients."""
    from ..linearizability import History, Op

    nodes = c.nodes
    histories = {"register": History(), "counter": History()}
    faults = {k: 0 for k in FAULT_KINDS}
    with c.zeros(1, np.uint64, node=nodes[min(1, len(nodes) - 1)]) as register, \
            c.zeros(1, np.uint64, node=nodes[-1]) as counter:
        spawn = multiprocessing.get_context("spawn")   # no fork of a process holding a fabric
        with concurrent.futures.ProcessPoolExecutor(clients, mp_context=spawn) as pool:
            futures = [pool.submit(atomics_client, c.coordinator, c.secret, c.fabric, chaos, register.address,
                                   counter.address, k, ops, seed * 1000 + k) for k in range(clients)]
            for f in futures:
                records, injected = f.result()
                for client, kind, arg, result, key, call, ret in records:
                    histories[key].add(Op(client=client, kind=kind, arg=arg, result=result, call=call, ret=ret))
                for k in FAULT_KINDS:
                    faults[k] += injected[k]
    return histories, faults


def kv_history(c: Any, protocol: str, *, seed: int = 1, **params: Any) -> "History":
    """Run ``kv`` under ``protocol`` on every node of cluster ``c`` with
    each node recording its operations, and return them as a
    :class:`~pydsm.linearizability.History` for the
    :class:`~pydsm.linearizability.Counter` model, one object per key: a
    GET is a ``read`` of the key's value, a SET a ``fetch_add`` of its
    delta that saw the value before it (values counted from each key's
    initial one, modulo 2**64). ``params`` override :data:`KV_HISTORY`."""
    from ..linearizability import History, Op   # noqa: F811 (the run-time import)

    p = {**KV_HISTORY, **params}
    n, ops = len(c.nodes), int(p["ops"])
    history = History()
    with c.zeros(n * ops * KV_RECORD_WORDS, np.uint64, node=c.nodes[0]) as buf:
        c.run("kv", protocol=protocol, seed=seed, history=buf, **p)
        records = buf.read().reshape(n, ops, KV_RECORD_WORDS)
    for client in range(n):
        for key, kind, initial, delta, seen, call, ret in records[client].tolist():
            if call == 0:          # a node recorded fewer (its run ended early)
                continue
            value = (seen - initial) % 2**64
            if kind == KV_GET:
                op = Op(client=client, kind="read", result=value, key=key, call=float(call), ret=float(ret))
            elif kind == KV_SET:
                op = Op(client=client, kind="fetch_add", arg=delta, result=value, key=key, call=float(call),
                        ret=float(ret))
            else:
                raise ValueError(f"kv history: node {client} recorded an operation of kind {kind}")
            history.add(op)
    return history


CHAN_RECORD_WORDS = 7      # chan_ops' record: key, kind, arg, result, found, call_ns, return_ns
CHAN_GET, CHAN_PUT, CHAN_DELETE, CHAN_PUSH, CHAN_POP = 1, 2, 3, 4, 5
#: the result recorded for a kvstore get whose slot's checksum never settled
#: (unfenced writes interleaved): no put wrote it, so the check fails
TORN = "TORN (checksum never settled)"
_chan_rounds = itertools.count(1)


def chan_history(c: Any, obj: str = "kvstore", *, seed: int = 1, ops: int = 300, **params: Any) -> "History":
    """Run ``chan_ops`` on every node of cluster ``c`` on LOCO's ``obj``
    (``"kvstore"`` or ``"queue"``) with each node recording its operations,
    and return them as a :class:`~pydsm.linearizability.History`: for the
    :class:`~pydsm.linearizability.KVMap` model (``put``, ``get`` ->
    value or EMPTY, ``delete``, one object per key) or the
    :class:`~pydsm.linearizability.FifoQueue` one (``push``, ``pop`` ->
    value or EMPTY). ``params`` go to the workload (``keys``, ``fence``,
    ...); each call names its channels anew."""
    from ..linearizability import EMPTY, History, Op   # noqa: F811 (the run-time import)

    n = len(c.nodes)
    history = History()
    with c.zeros(n * ops * CHAN_RECORD_WORDS, np.uint64, node=c.nodes[0]) as buf:
        c.run("chan_ops", object=obj, seed=seed, ops=ops, round=next(_chan_rounds), history=buf, **params)
        records = buf.read().reshape(n, ops, CHAN_RECORD_WORDS)
    for client in range(n):
        for key, kind, arg, result, found, call, ret in records[client].tolist():
            if call == 0:          # a node recorded fewer (its stream ended at a torn read)
                continue
            if kind == CHAN_GET:
                got: Any = result if found == 1 else EMPTY if found == 0 else TORN
                op = Op(client=client, kind="get", result=got, key=key, call=float(call), ret=float(ret))
            elif kind == CHAN_PUT:
                op = Op(client=client, kind="put", arg=arg, key=key, call=float(call), ret=float(ret))
            elif kind == CHAN_DELETE:
                op = Op(client=client, kind="delete", key=key, call=float(call), ret=float(ret))
            elif kind == CHAN_PUSH:
                op = Op(client=client, kind="push", arg=arg, call=float(call), ret=float(ret))
            elif kind == CHAN_POP:
                op = Op(client=client, kind="pop", result=result if found else EMPTY, call=float(call),
                        ret=float(ret))
            else:
                raise ValueError(f"chan history: node {client} recorded an operation of kind {kind}")
            history.add(op)
    return history


COMPACT_OBJECTS = 21 * 8   # 8 blocks of 192-byte slots
COMPACT_SIZE = 150


def compact_check(c: Any) -> Optional[str]:
    """Write objects to the last daemon's compactable memory, free three in
    four, compact their size class and read every live one back (a batch
    of scan reads through the stale pointers, then get() one by one): what
    was wrong, or None."""
    from ..compact import CompactPointer

    store = c.compact_store(node=c.nodes[-1])
    held = [store.alloc(COMPACT_SIZE) for _ in range(COMPACT_OBJECTS)]
    try:
        for i, p in enumerate(held):
            store.write(p, np.full(COMPACT_SIZE, i % 251, dtype=np.uint8))
        live = [(i, p) for i, p in enumerate(held) if i % 4 == 0]
        dead = [p for i, p in enumerate(held) if i % 4]
        held = [p for _, p in live]
        for p in dead:
            store.free(p)
        store.compact(held[0].size_class)
        want = [bytes([i % 251]) * COMPACT_SIZE for i, _ in live]
        got = store.read_many([CompactPointer(p.w0, p.w1) for p in held], "scan", size=256).tolist()
        for (i, _), w, g in zip(live, want, got):
            if g != w:
                return f"object {i} read by a batched scan read as {g[:8]!r}..., not {w[:8]!r}..."
        for (i, p), w in zip(live, want):
            g = store.get(p)
            store.release(p)
            if g != w:
                return f"object {i} read by get() as {g[:8]!r}..., not {w[:8]!r}..."
        return None
    finally:
        for p in held:
            store.free(p)


def deleg_handler(rel: int) -> int:
    """The handler id of deleg's message number ``rel``."""
    from .. import _lib

    handler = int(_lib.ext().lib.dsm_module_handler_id(b"deleg", rel))
    if handler <= 0:
        raise RuntimeError("no deleg module in this build's module table")
    return handler


def term_probes(c: "Cluster", node: int, *, answered: bool) -> int:
    """Delegation termination probes node has answered (they flow only
    while another node is inside a run: its join waves) or sent (from the
    start of its own run to its end)."""
    s = c.session.stats_record(node)
    counts = s.am_recv_by_handler if answered else s.am_sent_by_handler
    return int(counts[deleg_handler(DELEG_TERM_REL)])


def sssp_killed_mid_run(c: "Cluster", place: Any, timeout: float = 120.0) -> str:
    """Kill the cluster's last node while SSSP runs on delegation across
    every node; returns the text of the run's failure. RuntimeError if the
    run ended before the kill, was not under way on every node in time, or
    succeeded all the same."""
    from ..errors import DsmError

    victim, survivors = c.nodes[-1], c.nodes[:-1]
    before = term_probes(c, victim, answered=True)
    sent = [term_probes(c, n, answered=False) for n in survivors]

    def under_way() -> bool:
        # the victim answers the others' probes, and every survivor sends
        # them: a survivor whose run began only after the kill would start
        # without the victim instead of losing it mid-run
        return (term_probes(c, victim, answered=True) >= before + 20 and
                all(term_probes(c, n, answered=False) >= b + 10 for n, b in zip(survivors, sent)))

    task = c.submit("sssp", place, scale=FATE_SSSP_SCALE, progress=False)
    deadline = time.monotonic() + timeout
    while not under_way():
        if task.done():
            raise RuntimeError(f"sssp ended before rank {victim} could be killed mid-run")
        if time.monotonic() > deadline:
            raise RuntimeError(f"sssp was not under way on every node after {timeout:.0f} s")
        time.sleep(0.01)
    c.kill(victim)
    try:
        task.result(timeout=timeout)
    except DsmError as exc:
        return str(exc)
    raise RuntimeError(f"sssp succeeded though rank {victim} was killed mid-run")


def fate_check(c: "Cluster", place: Any) -> Optional[str]:
    """sssp_killed_mid_run, and every survivor must name the dead rank.
    None if so; otherwise what went wrong."""
    try:
        text = sssp_killed_mid_run(c, place)
    except RuntimeError as exc:
        return str(exc)
    victim, survivors = c.nodes[-1], len(c.nodes) - 1
    named = text.count(f"rank {victim} died mid-run")
    if named != survivors:
        return f"{named} of the {survivors} survivors named rank {victim} as lost: {text}"
    return None


def soak(*, seed: Optional[int] = None, spec: str = "all", nodes: int = 3, fabric: str = "shm",
         rounds: Optional[int] = None, minutes: Optional[float] = None, rounds_per_seed: int = 5,
         echo: bool = True) -> SoakReport:
    """Run rounds under chaos until ``rounds`` are done or ``minutes`` pass
    (one round when neither is given); see the module's docstring. A given
    ``seed`` is kept for the whole run; otherwise, with ``minutes``, a new
    seed (and cluster) every ``rounds_per_seed`` rounds."""
    rotate = seed is None and minutes is not None
    seed = seed if seed is not None else random.SystemRandom().randrange(1, 2**31)
    report = SoakReport(chaos=f"{seed}:{spec}")

    def say(line: str) -> None:
        report.lines.append(line)
        if echo:
            print(line, file=sys.stderr, flush=True)

    deadline = time.monotonic() + minutes * 60 if minutes else None
    limit = rounds if rounds is not None else (None if minutes else 1)

    def more() -> bool:
        return ((limit is None or report.rounds < limit) and (deadline is None or time.monotonic() < deadline)
                and report.failure is None)

    start = time.monotonic()
    say(f"pydsm chaos: {nodes} node(s) over {fabric}, spec {spec}")
    try:
        while more():
            report.chaos = f"{seed}:{spec}"
            report.seeds.append(str(seed))
            _soak_seed(report, say, seed, spec, nodes, fabric,
                       lambda done: more() and (not rotate or done < rounds_per_seed))
            seed = random.SystemRandom().randrange(1, 2**31)
    finally:
        report.seconds = time.monotonic() - start
    if report.failure:
        s = report.chaos.split(":", 1)[0]
        say(f"FAILED {report.failure}\nrepeat with: DSM_CHAOS={report.chaos} (pydsm chaos --seed {s} "
            f"--spec {spec} --nodes {nodes} --fabric {fabric})")
    else:
        say(f"pydsm chaos: {report.rounds} round(s), {report.checks} checks right in {report.seconds:.1f} s")
    say(report.table())
    return report


def _soak_seed(report: SoakReport, say: Any, seed: int, spec: str, nodes: int, fabric: str,
               go_on: Any) -> None:
    """Rounds on one cluster under DSM_CHAOS=seed:spec while go_on(rounds done)."""
    from ..cluster import Cluster
    from ..errors import DsmError
    from ..linearizability import Counter, FifoQueue, KVMap, Register, check
    from ..result import OversubscribedWarning
    from ..workloads import Placement

    chaos = f"{seed}:{spec}"
    t_seed = time.monotonic()
    done = 0
    faults = {k: 0 for k in FAULT_KINDS}
    peer_failures = 0

    def linearizable(history: "History", model: Any, what: str) -> bool:
        """Check one recorded history against ``model``, counting it; a
        violation is the run's failure (``what``: whose history)."""
        verdict = check(history, model)
        report.histories += 1
        report.operations += len(history)
        if not verdict.ok:
            report.failure = f"round {report.rounds + 1}: {what} is not linearizable:\n{verdict.explain()}"
        return verdict.ok

    def timed(name: str, t0: float) -> None:
        took = time.monotonic() - t0
        if took > report.slowest[1]:
            report.slowest = (name, took)
        report.checks += 1

    try:
        place = Placement(threads=2, trustees="shared")   # a delegation runtime on every daemon, for sssp
        # daemons at log level 2 (info): a failed round's lines carry the joins and departures
        with warnings.catch_warnings(), Cluster.local(nodes=nodes, fabric=fabric, op_timeout_ms=30000,
                                                      peer_timeout_ms=10000, chaos=chaos, placement=place,
                                                      log_level=2) as c, \
                contextlib.ExitStack() as closing:
            warnings.simplefilter("ignore", OversubscribedWarning)   # a soak fights for the cores

            tallied = False

            def tally() -> None:
                """Count, once, what the members saw (a member that saw a
                peer fail says which side lost whom): before a kill, or
                however the rounds end while the cluster is still up."""
                nonlocal peer_failures, tallied
                if tallied:
                    return
                tallied = True
                for node in [None] + list(c.nodes):
                    stats = c.stats(node)
                    for k in FAULT_KINDS:
                        faults[k] += int(stats.get(f"chaos_{k}", 0))
                    peer_failures += int(stats.get("peers_failed", 0))

            def wind_up(exc_type: Any, exc: Any, tb: Any) -> bool:
                """However the rounds end: tally, and if they failed, show
                the daemons' side before their logs go."""
                failing = report.failure is not None or exc_type is not None
                try:
                    tally()
                except DsmError:
                    if not failing:
                        raise
                if failing:
                    say(c.log_tails(40))
                return False

            closing.push(wind_up)
            n = len(c.nodes)
            original = c.run("kv", nodes=[c.nodes[0]], protocol="local", streams=n, seed=seed, **KV)
            want = int(original.per_node("checksum").value[0])
            while go_on(done):
                t_round = time.monotonic()
                passed: List[str] = []
                for protocol, lock in (("own", "deleg"), ("dir", "cas")):
                    t0 = time.monotonic()
                    with c.zeros(1 + 2 * KV["buckets"], np.uint64, node=c.nodes[0]) as directory:
                        res = c.run("kv", protocol=protocol, lock=lock, directory=directory, seed=seed, **KV)
                    got = int(res.per_node("checksum").value[0])
                    timed(f"kv/{protocol}", t0)
                    report.operations += KV["ops"] * n
                    if got != want:
                        report.failure = (f"round {report.rounds + 1}: kv under {protocol}: checksum {got:#x}, "
                                          f"the original's {want:#x}")
                        return
                    passed.append(f"kv/{protocol}")
                    t0 = time.monotonic()
                    recorded = kv_history(c, protocol, lock=lock, seed=seed + report.rounds)
                    ok = linearizable(recorded, Counter(initial=0), f"kv under {protocol}")
                    timed(f"kv/{protocol} history", t0)
                    if not ok:
                        return
                    passed.append(f"kv/{protocol} history linearizable")
                t0 = time.monotonic()
                with c.zeros(1, np.uint64, node=c.nodes[-1]) as counter:
                    c.run("fetch_add", counter=counter, iters=COUNTER_ADDS)
                    total = int(counter.read()[0])
                timed("counter", t0)
                report.operations += COUNTER_ADDS * n
                if total != COUNTER_ADDS * n:
                    report.failure = (f"round {report.rounds + 1}: a counter every node added to "
                                      f"{COUNTER_ADDS} times reads {total}, not {COUNTER_ADDS * n}")
                    return
                passed.append("counter")
                t0 = time.monotonic()
                try:
                    histories, injected = atomics_history(c, seed=seed + report.rounds, chaos=chaos)
                except DsmError as exc:   # a client's operation failed: no fault here should make one
                    report.failure = f"round {report.rounds + 1}: a client of the atomics history failed: {exc}"
                    report.errored = True
                    return
                except concurrent.futures.process.BrokenProcessPool as exc:   # one died (a signal, an abort)
                    report.failure = (f"round {report.rounds + 1}: a client process of the atomics history died: "
                                      f"{exc} (its output above says why)")
                    report.errored = True
                    return
                for k in FAULT_KINDS:
                    faults[k] += injected[k]
                for name, model in (("register", Register(initial=0)), ("counter", Counter(initial=0))):
                    if not linearizable(histories[name], model, f"the heap's atomics ({name})"):
                        return
                timed("atomics history", t0)
                passed.append("atomics history linearizable")
                chan_checks: Tuple[Tuple[str, Any, Dict[str, int]], ...] = (
                    ("kvstore", KVMap(), dict(keys=8)), ("queue", FifoQueue(), dict(capacity=8)))
                for obj, obj_model, params in chan_checks:
                    t0 = time.monotonic()
                    recorded = chan_history(c, obj, seed=seed + report.rounds, ops=200, **params)
                    ok = linearizable(recorded, obj_model, f"LOCO's {obj}")
                    timed(f"chan {obj} history", t0)
                    if not ok:
                        return
                    passed.append(f"chan {obj} history linearizable")
                t0 = time.monotonic()
                res = c.run("sssp", place, scale=SSSP_SCALE, seed=seed + report.rounds, timeout=120)
                timed("sssp", t0)
                matches = [int(v) for v in res.per_node("matches_dijkstra")["value"]]
                checked = int(np.sum(res.per_node("vertices_checked")["value"]))
                report.operations += int(np.sum(res.per_node("relaxations")["value"]))
                if matches != [1] * n or checked != 2 ** SSSP_SCALE:
                    report.failure = (f"round {report.rounds + 1}: sssp on delegation: distances equal to "
                                      f"Dijkstra's per node {matches}, {checked} of {2 ** SSSP_SCALE} vertices "
                                      "checked")
                    return
                passed.append("sssp")
                t0 = time.monotonic()
                wrong = compact_check(c)
                timed("compact", t0)
                report.operations += COMPACT_OBJECTS * 2
                if wrong:
                    report.failure = f"round {report.rounds + 1}: compactable memory: {wrong}"
                    return
                passed.append("compact reads right")
                if n >= 2:
                    t0 = time.monotonic()
                    digests = {d: int(c.mheap.run("temps", d, 25, timeout=120).digest[0]) for d in MHEAP_DESIGNS}
                    timed("mheap digests", t0)
                    if len(set(digests.values())) != 1 or 0 in digests.values():
                        report.failure = (f"round {report.rounds + 1}: the managed heap kept different data "
                                          f"under its collectors: {digests}")
                        return
                    passed.append("mheap digests equal")
                done += 1
                report.rounds += 1
                say(f"round {report.rounds}: {', '.join(passed)} ({time.monotonic() - t_round:.1f} s)")
            if n >= 3 and done > 0:
                tally()   # what the rounds saw, before a member dies on purpose
                t0 = time.monotonic()
                lost = fate_check(c, place)
                timed("fate", t0)
                if lost:
                    report.failure = f"seed {seed}: a node killed mid-run: {lost}"
                    return
                report.kills += 1
                say(f"seed {seed}: rank {c.nodes[-1]} killed mid-sssp; each of the {n - 1} survivors named it")
    finally:
        for k in FAULT_KINDS:
            report.faults[k] += faults[k]
        report.peer_failures += peer_failures
        say(f"seed {seed}: {done} round(s) in {time.monotonic() - t_seed:.1f} s, faults injected: "
            + ", ".join(f"{faults[k]:,} {k}" for k in FAULT_KINDS) + f" (DSM_CHAOS={chaos})")
