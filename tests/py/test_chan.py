"""pydsm.chan: LOCO's objects shared by three Python processes (the driver
of a one-daemon local cluster and two processes that connect to it, each
running tests/py/chan_worker.py), over shm and tcp: a counter under the
ticket lock comes out exact, queue pops match pushes exactly once, the
kvstore's puts, gets and deletes are seen across processes (8-byte and
40-byte values), nobody leaves
a barrier early, an owned_var's stores and an sst's rows reach every
reader, a shared_region's writes are read by the others, a pop that waits
gets the push that came after it and a close of its group wakes it, as
Ctrl-C does, leaving the queue usable, a close of any object from another
thread during calls on it refuses them rather than crashing, a
ringbuffer's messages arrive in
order; and the errors
(a name collision, another size, another shape of the same bytes, a
participant that never builds, bad input) say what happened."""
from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest

import pydsm
import chan_worker

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chan_worker.py")
# Bound on a worker's start (import, join) and on one scenario: generous,
# since three processes and a daemon share two cores with other work.
WAIT_S = 120.0
_groups = itertools.count(1)


class Worker:
    """One chan_worker.py process and a thread that reads its answers."""

    def __init__(self, c: pydsm.Cluster) -> None:
        info = c.connection_info()
        self.proc = subprocess.Popen([sys.executable, WORKER, info["coordinator"], info["secret"], info["fabric"]],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.answers: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.rank = int(self.answer()["rank"])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                self.answers.put(json.loads(line[3:]))
        self.answers.put({"error": "exited", "message": f"worker exited with {self.proc.wait()}"})

    def answer(self) -> Dict[str, Any]:
        return self.answers.get(timeout=WAIT_S)

    def send(self, cmd: Dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write("\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class Trio:
    """The driver's cluster and its two workers."""

    def __init__(self, c: pydsm.Cluster, workers: List[Worker]) -> None:
        self.c, self.workers = c, workers
        self.ranks = sorted([c.rank] + [w.rank for w in workers])

    def together(self, scenario: str, **kw: Any) -> List[Dict[str, Any]]:
        """Run `scenario` in a new group on the driver and both workers at
        once; their answers, the driver's first."""
        cmd = dict(kw, scenario=scenario, group=f"t{next(_groups)}", ranks=self.ranks)
        for w in self.workers:
            w.send(cmd)
        mine = chan_worker.run(self.c, cmd)
        return [mine] + [w.answer() for w in self.workers]


@pytest.fixture(scope="module", params=["shm", "tcp"])
def trio(request: Any) -> Iterator[Trio]:
    with pydsm.Cluster.local(nodes=1, fabric=request.param, partition="16MiB",
                             op_timeout_ms=chan_worker.OP_TIMEOUT_MS,
                             peer_timeout_ms=chan_worker.PEER_TIMEOUT_MS) as c:
        workers: List[Worker] = []
        try:
            workers = [Worker(c), Worker(c)]
            yield Trio(c, workers)
        finally:
            for w in workers:
                w.stop()


def results(answers: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    for a in answers:
        assert "result" in a, a
    return [a["result"] for a in answers]


def test_counter_under_lock_is_exact(trio: Trio) -> None:
    n = 40
    for r in results(trio.together("counter", n=n)):
        assert r == {"counter": 3 * n, "hits": 3 * n, "overlaps": 0}


def test_queue_pops_match_pushes_once(trio: Trio) -> None:
    res = results(trio.together("queue", n=40))
    pushed = sorted(v for r in res for v in r["pushed"])
    popped = sorted(v for r in res for v in r["popped"])
    assert len(pushed) == 120 and len(set(pushed)) == 120
    assert popped == pushed


def test_kvstore_across_processes(trio: Trio) -> None:
    n = 20
    keys = [r * 1000 + i for r in trio.ranks for i in range(n)]
    for r in results(trio.together("kv", n=n)):
        assert r["first"]["found"] == [True] * len(keys)
        assert r["first"]["values"] == [k * 7 for k in keys]
        assert r["deleted"] == [True] * len(range(0, n, 2))
        assert r["after"] == {str(k): (None if (k % 1000) % 2 == 0 else k * 7) for k in keys}
        assert r["missing_delete"] is False


def test_kvstore_wide_values_across_processes(trio: Trio) -> None:
    n = 10
    keys = [r * 1000 + i for r in trio.ranks for i in range(n)]
    for r in results(trio.together("kv_wide", n=n)):
        assert r["one"] == [[float(k + x) for x in range(5)] for k in keys]
        assert r["shape"] == [3, n, 5] and r["found"] == [[True] * n] * 3
        assert r["many"] == [[[float(k + x) for x in range(5)] for k in keys[i * n:(i + 1) * n]] for i in range(3)]
        assert r["after"] == [[-float(k)] * 5 for k in keys]
        assert r["missing"] == "none"


def test_kvstore_value_size_mismatch_is_refused(trio: Trio) -> None:
    answers = trio.together("kv_mismatch", timeout=20.0)
    assert [a.get("error") for a in answers] == ["InvalidArgument"] * 3, answers
    for a in answers:
        assert "value_size 32, slots 8, locks 1" in a["message"], a
        assert "value_size 8, slots 8, locks 1" in a["message"], a


def test_kvstore_shape_mismatch_of_equal_bytes_is_refused(trio: Trio) -> None:
    """1 slot of 40-byte values fills the bytes of 2 of 8: the shapes differ."""
    answers = trio.together("kv_shape", timeout=20.0)
    assert [a.get("error") for a in answers] == ["InvalidArgument"] * 3, answers
    for a in answers:
        assert "its shape differs" in a["message"], a
        assert "value_size 40, slots 1, locks 1" in a["message"], a
        assert "value_size 8, slots 2, locks 1" in a["message"], a
        assert a["node"] in trio.ranks, a


def test_kvstore_dtype_mismatch_of_equal_bytes_is_refused(trio: Trio) -> None:
    """float64 and uint64 values take the same 8 bytes: the dtypes differ."""
    answers = trio.together("kv_dtype", timeout=20.0)
    assert [a.get("error") for a in answers] == ["InvalidArgument"] * 3, answers
    for a in answers:
        assert "its values are" in a["message"], a
        assert "float64" in a["message"] and "uint64" in a["message"], a
        assert "same dtype and shape" in a["message"], a
    # the lowest rank (float64) names a uint64 peer, the others it
    assert "float64 here but uint64 at rank" in answers[0]["message"] or \
        "uint64 here but float64 at rank" in answers[0]["message"], answers[0]


def test_kvstore_put_many_and_delete_many_across_processes(trio: Trio) -> None:
    n = 20
    keys = [r * 1000 + i for r in trio.ranks for i in range(n)]
    for r in results(trio.together("kv_many", n=n)):
        assert r["found"] == [True] * len(keys)
        assert r["values"] == [k * 7 for k in keys]   # the last value of a key given twice
        # the first key twice: the first delete finds it, the second nothing
        assert r["deleted"] == [True, False] + [True] * (len(range(0, n, 2)) - 1)
        assert r["after"] == [None if (k % 1000) % 2 == 0 else k * 7 for k in keys]


def test_barrier_lets_nobody_out_early(trio: Trio) -> None:
    for r in results(trio.together("barrier", rounds=8)):
        assert r == {"short": []}


@pytest.mark.parametrize("mode", ["push", "pull"])
def test_owned_var_reaches_every_reader(trio: Trio, mode: str) -> None:
    for r in results(trio.together("owned", rounds=4, mode=mode)):
        assert r["seen"] == [[k, k] for k in range(1, 5)]


def test_sst_rows_reach_every_process(trio: Trio) -> None:
    for r in results(trio.together("sst", rounds=4)):
        assert r == {"wrong": [], "shape": [3, 4, 8]}


def test_region_writes_seen_by_others(trio: Trio) -> None:
    res = results(trio.together("region"))
    order = [trio.c.rank] + [w.rank for w in trio.workers]   # the answers' ranks
    for rank, r in zip(order, res):
        prev = trio.ranks[(trio.ranks.index(rank) - 1) % 3]
        # this process's copy holds, at its predecessor's place, what the
        # predecessor wrote; the rest is still zero
        assert r["mine"] == [float(prev) if i == trio.ranks.index(prev) else 0.0 for i in range(3)], rank
        assert r["theirs"] == [float(rank)], rank
        assert r["bad"] == ["InvalidArgument", "InvalidArgument"], rank


def test_region_view_is_the_copy_and_outlives_the_group(trio: Trio) -> None:
    n = len(trio.ranks)
    order = [trio.c.rank] + [w.rank for w in trio.workers]   # the answers' ranks
    for rank, r in zip(order, results(trio.together("region_view"))):
        prev = trio.ranks[(trio.ranks.index(rank) - 1) % n]
        # the predecessor's view store, read remotely; its write(), seen in this view
        assert r["remote_read"] == [prev + 0.5] and r["seen_in_view"] == [prev + 0.25], rank
        assert r["shares"] is True
        assert r["default"] == ["|u1", [2 * n * 64], [(2 * n * 64 - 8) // 4]]
        assert r["bad"] == ["InvalidArgument"] * 4
        assert r["after_close"] == ["StateError", "StateError"]
        assert r["kept"] == [rank + 0.5, 7.0]
        assert r["rebuilt_with_view"] == "AlreadyExists"   # the view still holds the endpoint
        assert r["fresh"] == 0.0


def test_queue_pop_waits_for_a_push(trio: Trio) -> None:
    res = results(trio.together("pop_wait"))
    order = [trio.c.rank] + [w.rank for w in trio.workers]
    first = res[order.index(trio.ranks[0])]
    assert first["nowait"] is None
    assert first["empty"] == "Timeout"
    assert first["returned_early"] is False
    assert first["popped"] == 0xFEED
    assert all(r["left"] is None for r in res)


def test_group_close_wakes_a_waiting_pop(trio: Trio) -> None:
    res = results(trio.together("pop_close"))
    order = [trio.c.rank] + [w.rank for w in trio.workers]
    first = res[order.index(trio.ranks[0])]
    assert first == {"waited": True, "alive": False, "pop": ["StateError"], "after": "StateError"}


def test_ctrl_c_ends_a_waiting_pop(trio: Trio) -> None:
    """SIGINT to a worker's main thread waiting in a pop with no timeout
    raises KeyboardInterrupt there, and the queue still pushes, pops and
    closes after it."""
    worker = max(w.rank for w in trio.workers)
    res = results(trio.together("pop_interrupt", interrupted=worker))
    order = [trio.c.rank] + [w.rank for w in trio.workers]
    mine = res[order.index(worker)]
    assert mine == {"pop": "KeyboardInterrupt", "signalled": True, "waiting": 0, "after": 0xC0FFEE,
                    "closed": True}


def test_close_during_calls_is_refused_not_a_crash(trio: Trio) -> None:
    """Each kind of object closed from another thread while a thread
    calls it: every call in flight returns, each thread ends with
    StateError (a waiting ring recv within a slice), and later calls are
    refused. Run in a worker, so a crash would fail this test only."""
    racer = max(w.rank for w in trio.workers)
    res = results(trio.together("close_race", racer=racer))
    order = [trio.c.rank] + [w.rank for w in trio.workers]
    r = res[order.index(racer)]
    kinds = ["atomic", "barrier", "kvstore", "lock", "owned", "region", "ring", "sst"]
    assert r["entered"] == kinds
    assert r["ended"] == {k: "StateError" for k in kinds}
    assert r["alive"] == []
    assert r["refused"] == kinds


def test_sst_row_size_mismatch_is_refused(trio: Trio) -> None:
    answers = trio.together("sst_mismatch", timeout=20.0)
    assert [a.get("error") for a in answers] == ["InvalidArgument"] * 3, answers
    assert all("row_size 16" in a["message"] and "row_size 24" in a["message"] for a in answers), answers


def test_ring_delivers_in_order(trio: Trio) -> None:
    res = results(trio.together("ring", n=60))
    order = [trio.c.rank] + [w.rank for w in trio.workers]   # the answers' ranks; the lowest sends
    for rank, r in zip(order, res):
        bad = ["StateError", "InvalidArgument"] if rank == trio.ranks[0] else ["StateError"]
        assert r == {"wrong": [], "bad": bad}, rank


def test_name_collision_names_the_rank(trio: Trio) -> None:
    answers = trio.together("collide", timeout=20.0)
    assert [a.get("error") for a in answers] == ["AlreadyExists"] * 3, answers
    assert any("name collision" in a["message"] for a in answers), answers
    assert all(a["node"] in trio.ranks for a in answers), answers


def test_size_mismatch_is_refused(trio: Trio) -> None:
    answers = trio.together("mismatch", timeout=20.0)
    assert [a.get("error") for a in answers] == ["InvalidArgument"] * 3, answers
    assert all("capacity 8" in a["message"] and "capacity 16" in a["message"] for a in answers), answers


def test_peer_that_never_builds_is_named(trio: Trio) -> None:
    absent = trio.workers[0].rank
    with trio.c.chan.group(f"t{next(_groups)}", [trio.c.rank, absent], timeout=1.0) as g:
        with pytest.raises(pydsm.Timeout) as info:
            g.barrier("lonely")
    assert info.value.node == absent
    assert f"rank {absent} did not join" in str(info.value)


def test_bad_input(trio: Trio) -> None:
    c, me = trio.c, trio.c.rank
    other = trio.workers[0].rank
    with pytest.raises(pydsm.InvalidArgument, match="is a daemon"):
        c.chan.group("bad", [me, 0])
    with pytest.raises(pydsm.InvalidArgument, match="not among the ranks"):
        c.chan.group("bad", [other, trio.workers[1].rank])
    with pytest.raises(pydsm.InvalidArgument, match="2..64 participants"):
        c.chan.group("bad", [me])
    with pytest.raises(pydsm.InvalidArgument, match="repeat"):
        c.chan.group("bad", [me, other, other])
    for name in ("", "/x", "x/", "a//b", "sp ace", 7):
        with pytest.raises(pydsm.InvalidArgument):
            c.chan.group(name, [me, other])   # type: ignore[arg-type]
    with pytest.raises(pydsm.InvalidArgument, match="timeout"):
        c.chan.group("bad", [me, other], timeout=-1)
    with c.chan.group("bad", [me, other], timeout=1.0) as g:
        with pytest.raises(pydsm.StateError, match="open in this process"):
            c.chan.group("bad", [me, other])
        with pytest.raises(pydsm.InvalidArgument, match="host"):
            g.atomic("a", host=0)
        with pytest.raises(pydsm.InvalidArgument, match="owned_var holds"):
            g.owned("o", owner=me, shape=(1000,))
        with pytest.raises(pydsm.InvalidArgument, match="mode"):
            g.owned("o", owner=me, mode="both")
        with pytest.raises(pydsm.InvalidArgument, match="capacity"):
            g.queue("q", capacity=0)
        with pytest.raises(pydsm.InvalidArgument, match="slots"):
            g.kvstore("kv", slots=(1 << 22) + 1)
        with pytest.raises(pydsm.InvalidArgument, match="kvstore value holds 1..256 bytes"):
            g.kvstore("kv", shape=33)
        with pytest.raises(pydsm.InvalidArgument, match="sst row holds"):
            g.sst("t", shape=(0,))
        with pytest.raises(pydsm.InvalidArgument, match="shared_region holds"):
            g.region("r", nbytes=0)
        with pytest.raises(pydsm.InvalidArgument, match="longer than"):
            g.lock("x" * 200)
    with pytest.raises(pydsm.StateError, match="closed"):
        g.lock("late")


def test_values_checked_before_c(trio: Trio) -> None:
    """Bad values and closed objects are refused by Python: built on a
    group of the driver and one worker, with the worker's part run by a
    scenario that only builds and waits."""
    me, other = trio.c.rank, trio.workers[0].rank
    name = f"t{next(_groups)}"
    trio.workers[0].send({"scenario": "values", "group": name, "ranks": [me, other]})
    with trio.c.chan.group(name, [me, other]) as g:
        kv, q, a = g.kvstore("kv", slots=4, locks=1), g.queue("q", capacity=4), g.atomic("a")
        v = g.owned("v", owner=other, dtype=np.float32, shape=3)
        bar = g.barrier("bar")
        with pytest.raises(pydsm.InvalidArgument, match="key"):
            kv.put(-1, 0)
        with pytest.raises(pydsm.InvalidArgument, match="value"):
            q.push(1 << 64)
        with pytest.raises(pydsm.InvalidArgument, match="uint64"):
            q.extend(np.array([1.5]))
        with pytest.raises(pydsm.StateError, match="its owner, rank"):
            v.store([1, 2, 3])
        with pytest.raises(KeyError):
            kv[12345]
        for i in range(4):
            kv[i] = i
        with pytest.raises(pydsm.OutOfMemory):
            kv[99] = 1        # this process's 4 slots are taken
        assert a.cas(0, 5) == 0 and a.load() == 5
        bar.wait()            # the worker's owned_var store is placed
        assert v.load().tolist() == [1.0, 2.0, 3.0]
        bar.wait()            # both done: the worker destroys its part
        a.close()
        with pytest.raises(pydsm.StateError, match="closed"):
            a.load()
    assert trio.workers[0].answer() == {"result": {}}


def test_close_destroys_open_objects(caplog: Any) -> None:
    """Objects still open when the cluster closes are destroyed first:
    the C core does not warn of a channel left behind."""
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="16MiB", op_timeout_ms=chan_worker.OP_TIMEOUT_MS,
                             peer_timeout_ms=chan_worker.PEER_TIMEOUT_MS) as c:
        w = Worker(c)
        try:
            name = f"t{next(_groups)}"
            w.send({"scenario": "hold", "group": name, "ranks": [c.rank, w.rank]})
            g = c.chan.group(name, [c.rank, w.rank])
            bar, kv = g.barrier("bar"), g.kvstore("kv", slots=8, locks=1)
            kv[c.rank] = 1
            assert kv.get(c.rank) == 1
            bar.wait()
            assert w.answer() == {"result": {}}   # the worker destroyed its part
            with caplog.at_level(logging.WARNING, logger="pydsm"):
                c.close()
            assert bar.closed and kv.closed
        finally:
            w.stop()
    assert not [r for r in caplog.records if "not destroyed" in r.getMessage()]


def test_cluster_close_keeps_a_viewed_region(caplog: Any) -> None:
    """A view alive when the cluster closes keeps the node, and so its
    memory: the view still reads what was stored, and a warning says why
    the node stayed. (The node then lives until this process exits.)"""
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="16MiB", op_timeout_ms=chan_worker.OP_TIMEOUT_MS,
                             peer_timeout_ms=chan_worker.PEER_TIMEOUT_MS) as c:
        w = Worker(c)
        try:
            name = f"t{next(_groups)}"
            w.send({"scenario": "hold", "group": name, "ranks": [c.rank, w.rank], "region": True})
            g = c.chan.group(name, [c.rank, w.rank])
            bar, kv = g.barrier("bar"), g.kvstore("kv", slots=8, locks=1)
            reg = g.region("r", nbytes=64)
            view = reg.view(np.int64)
            view[:] = np.arange(8)
            kv[c.rank] = 1
            bar.wait()
            assert w.answer() == {"result": {}}
            with caplog.at_level(logging.WARNING, logger="pydsm"):
                c.close()
            assert reg.closed and bar.closed and kv.closed
        finally:
            w.stop()
    assert view.tolist() == list(range(8))
    assert any("views of shared_region" in r.getMessage() and f"'{name}/r'" in r.getMessage()
               for r in caplog.records), caplog.records
