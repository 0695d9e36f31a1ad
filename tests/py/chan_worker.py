"""A Python process that joins a cluster and runs pydsm.chan scenarios on
command, for tests/py/test_chan.py: the driver runs the same scenario
beside its workers, so every participant of a group is a Python process.

Run as ``python chan_worker.py COORDINATOR SECRET FABRIC``: it prints
``@@ {"rank": R}``, then reads one JSON command a line
(``{"scenario": NAME, "group": G, "ranks": [...], ...}``) and answers
each with ``@@ {"result": ...}`` or ``@@ {"error": CLASS, "message": ...,
"node": RANK}``; an empty line or end of input ends it.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List

import numpy as np

import pydsm
from pydsm.chan import Group

#: Each operation's bound (a barrier's wait, a lock's) and the silence
#: before a peer counts as dead, the driver's too: generous, for three
#: processes and a daemon on two loaded cores (as the C tests' clusters).
OP_TIMEOUT_MS = 20000
PEER_TIMEOUT_MS = 10000


def _counter(g: Group, n: int = 50, **_: Any) -> Dict[str, Any]:
    """n increments of a kvstore key under the ticket lock (a read, then a
    write: exact only if the lock excludes), an atomic beside it, and a
    holder word that every holder must find free."""
    kv, lock, hits, holder = g.kvstore("kv", slots=16, locks=2), g.lock("lock"), g.atomic("hits"), g.atomic("holder")
    bar = g.barrier("bar")
    bar.wait()
    overlaps = 0
    for _i in range(n):
        with lock:
            overlaps += holder.cas(0, g.rank) != 0
            kv[0] = kv.get(0, 0) + 1
            overlaps += holder.cas(g.rank, 0) != g.rank
        hits.fetch_add(1)
    bar.wait()
    out = {"counter": kv[0], "hits": hits.load(), "overlaps": overlaps}
    bar.wait()   # nobody destroys what another still reads
    return out


def _queue(g: Group, n: int = 40, **_: Any) -> Dict[str, Any]:
    """Pushes of values no other process pushes, pops between them, then
    a drain once everyone has pushed: what each pushed and popped."""
    q, bar = g.queue("q", capacity=256), g.barrier("bar")
    bar.wait()
    pushed: List[int] = []
    popped: List[int] = []
    for i in range(n):
        v = g.rank << 32 | i
        q.push(v)
        pushed.append(v)
        if i % 2:
            got = q.pop_nowait()
            if got is not None:
                popped.append(got)
    bar.wait()
    popped += q.drain().tolist()
    bar.wait()
    return {"pushed": pushed, "popped": popped}


def _kv(g: Group, n: int = 20, **_: Any) -> Dict[str, Any]:
    """Each process puts its keys; all read everyone's; each deletes its
    even keys; all read again. What each process saw."""
    kv, bar = g.kvstore("kv", slots=64, locks=4), g.barrier("bar")
    mine = [g.rank * 1000 + i for i in range(n)]
    for k in mine:
        kv.put(k, k * 7)
    bar.wait()
    keys = np.array([r * 1000 + i for r in g.ranks for i in range(n)], dtype=np.uint64)
    values, found = kv.get_many(keys)
    bar.wait()
    deleted = [kv.delete(k) for k in mine[::2]]
    bar.wait()
    after = {str(k): kv.get(int(k)) for k in keys.tolist()}
    bar.wait()
    return {"first": {"values": values.tolist(), "found": found.tolist()}, "deleted": deleted, "after": after,
            "missing_delete": kv.delete(g.rank * 1000 + n + 1)}


def _kv_wide(g: Group, n: int = 10, **_: Any) -> Dict[str, Any]:
    """The kv scenario with values of 5 float64 (40 bytes): each process
    puts its keys, all read everyone's one by one and at once; then each
    overwrites its keys and all read again."""
    kv, bar = g.kvstore("kv", slots=32, locks=4, dtype=np.float64, shape=5), g.barrier("bar")
    mine = [g.rank * 1000 + i for i in range(n)]
    for k in mine:
        kv[k] = np.arange(5) + k
    bar.wait()
    keys = np.array([r * 1000 + i for r in g.ranks for i in range(n)], dtype=np.uint64)
    one = [kv[int(k)].tolist() for k in keys.tolist()]
    values, found = kv.get_many(keys.reshape(-1, n))
    bar.wait()
    for k in mine:
        kv.put(k, -float(k))
    bar.wait()
    after = [kv.get(int(k)).tolist() for k in keys.tolist()]
    bar.wait()
    return {"one": one, "many": values.tolist(), "found": found.tolist(), "after": after,
            "shape": list(values.shape), "missing": kv.get(1, "none")}


def _kv_mismatch(g: Group, **_: Any) -> Dict[str, Any]:
    """kvstores named alike whose values are 32 bytes at the lowest rank."""
    g.kvstore("kv", slots=8, locks=1, shape=4 if g.rank == g.ranks[0] else ())
    return {}


def _kv_dtype(g: Group, **_: Any) -> Dict[str, Any]:
    """kvstores named alike whose values are 8 bytes everywhere: float64 at
    the lowest rank, uint64 elsewhere."""
    g.kvstore("kv", slots=8, locks=1, dtype=np.float64 if g.rank == g.ranks[0] else np.uint64)
    return {}


def _kv_many(g: Group, n: int = 20, **_: Any) -> Dict[str, Any]:
    """Each process puts its n keys in one put_many (its first key twice,
    the second time with its final value), all read everyone's; then each
    deletes its even keys in one delete_many (its first key twice), and
    all read again."""
    kv, bar = g.kvstore("kv", slots=64, locks=4), g.barrier("bar")
    mine = [g.rank * 1000 + i for i in range(n)]
    kv.put_many([mine[0]] + mine, [1] + [k * 7 for k in mine])
    bar.wait()
    keys = np.array([r * 1000 + i for r in g.ranks for i in range(n)], dtype=np.uint64)
    values, found = kv.get_many(keys)
    bar.wait()
    deleted = kv.delete_many(np.array([mine[0]] + mine[::2], dtype=np.uint64))
    bar.wait()
    after, still = kv.get_many(keys)
    bar.wait()
    return {"values": values.tolist(), "found": found.tolist(), "deleted": deleted.tolist(),
            "after": [int(v) if f else None for v, f in zip(after.tolist(), still.tolist())]}


def _kv_shape(g: Group, **_: Any) -> Dict[str, Any]:
    """kvstores named alike whose slots take the same bytes: 1 slot of 40-byte
    values (5 float64) at the lowest rank, 2 of 8-byte values elsewhere."""
    if g.rank == g.ranks[0]:
        g.kvstore("kv", slots=1, locks=1, dtype=np.float64, shape=5)
    else:
        g.kvstore("kv", slots=2, locks=1)
    return {}


def _barrier(g: Group, rounds: int = 10, **_: Any) -> Dict[str, Any]:
    """Each round: count in, wait; everyone must see every arrival."""
    arrived, bar = g.atomic("arrived"), g.barrier("bar")
    short = []
    for r in range(1, rounds + 1):
        arrived.fetch_add(1)
        bar.wait()
        seen = arrived.load()
        if seen < r * len(g.ranks):
            short.append([r, seen])
    bar.wait()
    return {"short": short}


def _owned(g: Group, rounds: int = 5, mode: str = "push", **_: Any) -> Dict[str, Any]:
    """The lowest rank stores a round's array; after a barrier everyone
    loads it (pushed to every copy, or pulled from the owner's)."""
    owner = g.ranks[0]
    v, bar = g.owned("v", owner=owner, dtype=np.int32, shape=(4, 8), mode=mode), g.barrier("bar")
    seen = []
    for r in range(1, rounds + 1):
        if g.rank == owner:
            v.store(np.full((4, 8), r))
        bar.wait()
        a = v.load()
        seen.append([int(a.min()), int(a.max())])
        bar.wait()
    return {"seen": seen}


def _ring(g: Group, n: int = 60, **_: Any) -> Dict[str, Any]:
    """The lowest rank broadcasts n arrays of mixed lengths on a small
    ring (it wraps, and the sender waits for the slowest); the others
    receive them in order. What each received that differs, and the
    errors of the wrong role's call and of an oversized message."""
    sender = g.ranks[0]
    ring, bar = g.ring("r", sender=sender, capacity=1024), g.barrier("bar")
    wrong = []
    bad = []
    if g.rank == sender:
        for i in range(n):
            ring.send(np.arange(i % 40 + 1, dtype=np.uint32) * (i + 1))
        for call in (lambda: ring.recv(timeout=0.01), lambda: ring.send(bytes(ring.max_message + 1))):
            try:
                call()
            except pydsm.DsmError as exc:
                bad.append(type(exc).__name__)
    else:
        for i in range(n):
            got = ring.recv(dtype=np.uint32)
            if got.tolist() != (np.arange(i % 40 + 1, dtype=np.uint32) * (i + 1)).tolist():
                wrong.append(i)
        try:
            ring.send(b"x")
        except pydsm.DsmError as exc:
            bad.append(type(exc).__name__)
    bar.wait()
    return {"wrong": wrong, "bad": bad}


def _sst(g: Group, rounds: int = 4, **_: Any) -> Dict[str, Any]:
    """Each round every process stores its row (a (4, 8) int32 array of
    its rank and the round, over 8 bytes: checksummed); after a barrier
    everyone reads every row. The rows each saw that were not the ones
    stored."""
    t, bar = g.sst("t", dtype=np.int32, shape=(4, 8)), g.barrier("bar")
    wrong = []
    for r in range(1, rounds + 1):
        t.store(np.arange(32, dtype=np.int32).reshape(4, 8) + g.rank * 100 + r)
        bar.wait()
        rows = t.rows()
        for i, rank in enumerate(g.ranks):
            if not np.array_equal(rows[i], np.arange(32, dtype=np.int32).reshape(4, 8) + rank * 100 + r) or \
                    not np.array_equal(t[rank], rows[i]):
                wrong.append([r, rank])
        bar.wait()
    return {"wrong": wrong, "shape": list(t.rows().shape)}


def _region(g: Group, **_: Any) -> Dict[str, Any]:
    """Each process writes 16 float64 of its rank into its next
    participant's copy, at its own index's place; after a barrier each
    reads its own copy and its next one's. What each read, and the
    errors of a write past the end and of a read of a non-participant."""
    n = len(g.ranks)
    reg, bar = g.region("r", nbytes=n * 128), g.barrier("bar")
    me = g.ranks.index(g.rank)
    nxt = g.ranks[(me + 1) % n]
    reg.write(nxt, np.full(16, float(g.rank)), offset=me * 128)
    bar.wait()
    mine = reg.read(g.rank, dtype=np.float64).reshape(n, 16)
    theirs = reg.read(nxt, offset=me * 128, count=16, dtype=np.float64)
    bad = []
    for call in (lambda: reg.write(g.rank, b"x" * 9, offset=n * 128 - 8), lambda: reg.read(0, count=1)):
        try:
            call()
        except pydsm.DsmError as exc:
            bad.append(type(exc).__name__)
    bar.wait()
    return {"mine": mine[:, 0].tolist(), "theirs": sorted(set(theirs.tolist())), "bad": bad}


def _region_view(g: Group, **_: Any) -> Dict[str, Any]:
    """Each process stores its rank + 0.5 into its own row of plane 0
    through a view of its copy, and writes rank + 0.25 into its next
    participant's copy (plane 1, at its own row) with write(); after a
    barrier each reads its predecessor's plane-0 row remotely and looks at
    plane 1 through the view taken before. Then it closes the group with
    the view alive: the region refuses its calls, the view still holds the
    values and the name stays taken until the view is gone; afterwards
    the region is built anew, zero."""
    n = len(g.ranks)
    me = g.ranks.index(g.rank)
    prev, nxt = g.ranks[(me - 1) % n], g.ranks[(me + 1) % n]
    reg, bar = g.region("r", nbytes=2 * n * 64), g.barrier("bar")
    v = reg.view(np.float64, (2, n, 8))
    v[0, me] = g.rank + 0.5
    reg.write(nxt, np.full(8, g.rank + 0.25), offset=(n + me) * 64)
    bar.wait()
    out: Dict[str, Any] = {
        "remote_read": sorted(set(reg.read(prev, offset=(me - 1) % n * 64, count=8, dtype=np.float64).tolist())),
        "seen_in_view": sorted(set(v[1, (me - 1) % n].tolist())),
        "shares": bool(np.shares_memory(v, reg.view())),
        "default": [reg.view().dtype.str, list(reg.view().shape), list(reg.view(np.float32, offset=8).shape)],
    }
    bad = []
    for call in (lambda: reg.view(np.float64, 2 * n * 8 + 1), lambda: reg.view(offset=-1),
                 lambda: reg.view(object), lambda: reg.view(np.float64, (2, n, 8), offset=8)):
        try:
            call()
        except pydsm.DsmError as exc:
            bad.append(type(exc).__name__)
    out["bad"] = bad
    bar.wait()   # everyone is done with everyone's copy
    row = v[0, me]           # an array taken from the view holds the copy too
    chan = g._chan
    g.close()
    after = []
    for call in (lambda: reg.read(g.rank), lambda: reg.view()):
        try:
            call()
        except pydsm.DsmError as exc:
            after.append(type(exc).__name__)
    out["after_close"] = after
    v[1, 0, 0] = 7.0         # still this process's memory: a store is harmless
    out["kept"] = [float(row[0]), float(v[1, 0, 0])]
    again = chan.group(g.name, g.ranks, timeout=g.timeout)
    try:
        again.region("r", nbytes=2 * n * 64)
        out["rebuilt_with_view"] = "no error"
    except pydsm.DsmError as exc:
        out["rebuilt_with_view"] = type(exc).__name__
    del v, row
    gc.collect()
    with again:
        fresh = again.region("r", nbytes=2 * n * 64)
        out["fresh"] = float(np.abs(fresh.view(np.float64)).max())
        again.barrier("bar").wait()
    return out


def _pop_wait(g: Group, **_: Any) -> Dict[str, Any]:
    """The lowest rank finds the queue empty without waiting (None) and
    with a short timeout (a Timeout), then starts a thread in a pop with
    no timeout and, once that thread waits in it, sets a word; the next
    rank pushes only once it saw the word: the pop returns exactly that
    value, and had not returned before the word was set."""
    q, flag, bar = g.queue("q", capacity=4), g.atomic("waiting"), g.barrier("bar")
    out: Dict[str, Any] = {}
    # bounds on the waits below: the op timeout, ample on two loaded cores
    bound = OP_TIMEOUT_MS / 1000
    if g.rank == g.ranks[0]:
        out["nowait"] = q.pop_nowait()
        try:
            q.pop(timeout=0.01)
            out["empty"] = "no error"
        except pydsm.DsmError as exc:
            out["empty"] = type(exc).__name__
        got: List[Any] = []
        popper = threading.Thread(target=lambda: got.append(q.pop()))
        popper.start()
        deadline = time.monotonic() + bound
        while q.waiting == 0 and time.monotonic() < deadline:
            os.sched_yield()
        out["returned_early"] = bool(got) or not popper.is_alive()
        flag.fetch_add(1)
        popper.join(2 * bound)   # the push comes within `bound` of the word
        out["popped"] = got[0] if got else None
    elif g.rank == g.ranks[1]:
        deadline = time.monotonic() + bound
        while flag.load() == 0 and time.monotonic() < deadline:
            os.sched_yield()
        q.push(0xFEED)
    bar.wait()
    out["left"] = q.pop_nowait()
    bar.wait()
    return out


def _pop_close(g: Group, **_: Any) -> Dict[str, Any]:
    """Everyone builds a queue; after a barrier the lowest rank starts a
    thread in a pop with no timeout on the empty queue and, once it waits,
    closes the group: the pop ends with the error it raised, and the
    queue's later calls are refused. The others leave after the barrier."""
    q, bar = g.queue("q", capacity=4), g.barrier("bar")
    bar.wait()
    out: Dict[str, Any] = {}
    if g.rank != g.ranks[0]:
        return out
    got: List[Any] = []

    def pop() -> None:
        try:
            got.append(q.pop())
        except pydsm.DsmError as exc:
            got.append(type(exc).__name__)

    popper = threading.Thread(target=pop)
    popper.start()
    # bounds: the op timeout, ample on two loaded cores; a close ends the
    # wait within SharedQueue.WAIT_SLICE_S
    deadline = time.monotonic() + OP_TIMEOUT_MS / 1000
    while q.waiting == 0 and time.monotonic() < deadline:
        os.sched_yield()
    out["waited"] = q.waiting == 1 and not got
    g.close()
    popper.join(OP_TIMEOUT_MS / 1000)
    out["alive"] = popper.is_alive()
    out["pop"] = got
    try:
        q.pop_nowait()
        out["after"] = "no error"
    except pydsm.DsmError as exc:
        out["after"] = type(exc).__name__
    return out


def _pop_interrupt(g: Group, interrupted: int = -1, **_: Any) -> Dict[str, Any]:
    """Ctrl-C in a waiting pop: rank ``interrupted`` (a worker process, so
    that the signal never reaches pytest) waits in a pop with no timeout
    on the empty queue on its main thread while a helper thread, once the
    pop waits, sends the main thread SIGINT. The pop must end with
    KeyboardInterrupt (not a value, not a hang), and the queue must still
    work: a push and a pop, then a close that returns. The others keep
    their parts until it is done."""
    q, bar = g.queue("q", capacity=4), g.barrier("bar")
    bar.wait()
    out: Dict[str, Any] = {}
    if g.rank != interrupted:
        bar.wait()
        return out
    # Python turns SIGINT into KeyboardInterrupt only if the process did
    # not start with it ignored, as a job started in the background by a
    # non-interactive shell (a CI runner) does: Ctrl-C's handler is the
    # condition of this scenario, so it is put in place here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _pop_interrupted(q, bar)
    finally:
        signal.signal(signal.SIGINT, previous)


def _pop_interrupted(q: Any, bar: Any) -> Dict[str, Any]:
    """_pop_interrupt's interrupted rank, with Python's SIGINT handler."""
    out: Dict[str, Any] = {}
    # bound on each wait below: the op timeout, ample on two loaded cores;
    # the signal ends the pop within SharedQueue.WAIT_SLICE_S
    bound = OP_TIMEOUT_MS / 1000
    sent = threading.Event()

    def interrupt() -> None:
        deadline = time.monotonic() + bound
        while q.waiting == 0 and time.monotonic() < deadline:
            os.sched_yield()
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        sent.set()
        # a pop the signal did not end is ended by a close, so the
        # scenario answers (StateError) rather than hangs
        if not done.wait(bound):
            q.close()

    done = threading.Event()
    helper = threading.Thread(target=interrupt)
    helper.start()
    try:
        out["pop"] = q.pop()
    except KeyboardInterrupt:
        out["pop"] = "KeyboardInterrupt"
    except pydsm.DsmError as exc:
        out["pop"] = type(exc).__name__
    done.set()
    out["signalled"] = sent.wait(bound)
    helper.join(bound)
    out["waiting"] = q.waiting
    q.push(0xC0FFEE)
    out["after"] = q.pop(timeout=bound)
    bar.wait()
    closer = threading.Thread(target=q.close)
    closer.start()
    closer.join(bound)
    out["closed"] = q.closed and not closer.is_alive()
    return out


def _close_race(g: Group, racer: int = -1, **_: Any) -> Dict[str, Any]:
    """A close from another thread while calls are under way: every
    participant builds one object of each kind; rank ``racer`` (a worker
    process, so that a crash fails one scenario, not pytest) starts a
    thread per object that calls it again and again (a waiting ring
    recv, whose sender never sends, waits in one call), and once each
    has entered its first call closes them all from the main thread.
    Each thread must end with StateError, none may still run, and a
    later call must be refused. The others keep their parts until the
    barrier."""
    me, other = g.rank, [r for r in g.ranks if r != g.rank][0]
    objs: Dict[str, Any] = {
        "kvstore": g.kvstore("kv", slots=16, locks=2),
        "atomic": g.atomic("a", host=g.ranks[0]),
        "owned": g.owned("v", owner=g.ranks[0], dtype=np.float64, shape=4, mode="pull"),
        "region": g.region("r", nbytes=256),
        "sst": g.sst("t", dtype=np.int64, shape=2),
        "lock": g.lock("l"),
        "barrier": g.barrier("b"),
        "ring": g.ring("ring", sender=g.ranks[0], capacity=1024),
    }
    bar = g.barrier("bar")
    bar.wait()
    out: Dict[str, Any] = {}
    if me != racer:
        bar.wait()
        return out

    def lock_cycle() -> None:
        with objs["lock"]:
            pass

    def barrier_round() -> None:
        try:
            objs["barrier"].wait(timeout=0.02)   # nobody else enters: a Timeout
        except pydsm.Timeout:
            pass

    calls: Dict[str, Callable[[], Any]] = {
        "kvstore": lambda: (objs["kvstore"].put(me, 1), objs["kvstore"].get(me)),
        "atomic": lambda: objs["atomic"].fetch_add(1),
        "owned": lambda: objs["owned"].load(),
        "region": lambda: (objs["region"].write(other, b"x" * 8), objs["region"].read(other, count=8)),
        "sst": lambda: (objs["sst"].store([me, 1]), objs["sst"].rows()),
        "lock": lock_cycle,
        "barrier": barrier_round,
        "ring": lambda: objs["ring"].recv(),
    }
    entered = {k: threading.Event() for k in calls}
    ended: Dict[str, Any] = {}

    def hammer(kind: str) -> None:
        try:
            while True:
                entered[kind].set()
                calls[kind]()
        except pydsm.DsmError as exc:
            ended[kind] = type(exc).__name__

    threads = {k: threading.Thread(target=hammer, args=(k,)) for k in calls}
    for t in threads.values():
        t.start()
    # bound on each wait: the op timeout, ample on two loaded cores (a
    # call in flight ends within its own bound, a waiting one in a slice)
    bound = OP_TIMEOUT_MS / 1000
    out["entered"] = sorted(k for k, ev in entered.items() if ev.wait(bound))
    for obj in objs.values():
        obj.close()
    for t in threads.values():
        t.join(2 * bound)
    out["ended"] = ended
    out["alive"] = sorted(k for k, t in threads.items() if t.is_alive())
    refused = []
    for kind, call in calls.items():
        try:
            call()
        except pydsm.StateError:
            refused.append(kind)
    out["refused"] = sorted(refused)
    bar.wait()
    return out


def _sst_mismatch(g: Group, **_: Any) -> Dict[str, Any]:
    """SSTs named alike with rows of another shape at the lowest rank."""
    g.sst("t", dtype=np.float64, shape=2 if g.rank == g.ranks[0] else 3)
    return {}


def _collide(g: Group, **_: Any) -> Dict[str, Any]:
    """The lowest rank builds a lock named "x", the others a barrier."""
    if g.rank == g.ranks[0]:
        g.lock("x")
    else:
        g.barrier("x")
    return {}


def _mismatch(g: Group, **_: Any) -> Dict[str, Any]:
    """Queues named alike of another capacity at the lowest rank."""
    g.queue("q", capacity=8 if g.rank == g.ranks[0] else 16)
    return {}


def _values(g: Group, **_: Any) -> Dict[str, Any]:
    """The partner of test_values_checked_before_c: builds the same
    objects, stores the owned_var it owns, and waits twice."""
    g.kvstore("kv", slots=4, locks=1), g.queue("q", capacity=4), g.atomic("a")
    v = g.owned("v", owner=g.rank, dtype=np.float32, shape=3)
    bar = g.barrier("bar")
    v.store([1, 2, 3])
    bar.wait()
    bar.wait()
    return {}


def _hold(g: Group, region: bool = False, **_: Any) -> Dict[str, Any]:
    """Builds a barrier and a kvstore (and with ``region`` a 64-byte
    shared_region), puts a key, waits once."""
    bar, kv = g.barrier("bar"), g.kvstore("kv", slots=8, locks=1)
    if region:
        g.region("r", nbytes=64)
    kv[g.rank] = 1
    bar.wait()
    return {}


SCENARIOS: Dict[str, Callable[..., Dict[str, Any]]] = {
    "counter": _counter, "queue": _queue, "kv": _kv, "barrier": _barrier, "ring": _ring, "owned": _owned,
    "collide": _collide, "mismatch": _mismatch, "values": _values, "hold": _hold, "sst": _sst, "region": _region,
    "pop_wait": _pop_wait, "sst_mismatch": _sst_mismatch, "kv_wide": _kv_wide, "kv_mismatch": _kv_mismatch,
    "kv_shape": _kv_shape, "kv_dtype": _kv_dtype, "kv_many": _kv_many,
    "pop_close": _pop_close, "region_view": _region_view, "pop_interrupt": _pop_interrupt,
    "close_race": _close_race,
}


def run(c: pydsm.Cluster, cmd: Dict[str, Any]) -> Dict[str, Any]:
    """Run one command's scenario in its group; the answer as JSON data."""
    args = dict(cmd)
    scenario, name, ranks = SCENARIOS[args.pop("scenario")], args.pop("group"), args.pop("ranks")
    timeout = args.pop("timeout", None)
    try:
        with c.chan.group(name, ranks, timeout=timeout) as g:
            return {"result": scenario(g, **args)}
    except pydsm.DsmError as exc:
        return {"error": type(exc).__name__, "message": str(exc), "node": exc.node}


def main() -> None:
    coordinator, secret, fabric = sys.argv[1:4]
    with pydsm.Cluster.connect(coordinator, secret, fabric=fabric, op_timeout_ms=OP_TIMEOUT_MS,
                               peer_timeout_ms=PEER_TIMEOUT_MS) as c:
        print("@@ " + json.dumps({"rank": c.rank}), flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            print("@@ " + json.dumps(run(c, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
