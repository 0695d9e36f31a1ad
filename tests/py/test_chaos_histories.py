"""Histories recorded under the fabric's chaos mode (delayed messages,
late and split writes) are linearizable, and the checker would see it if
one result were wrong: the heap's atomics as several cluster members
(client processes) see them, and kv's GETs and SETs under own and dir as
every node's workload recorded them."""
import copy

import pytest

import pydsm
from pydsm.linearizability import Counter, Register, check
from pydsm.tools.chaos import KV_HISTORY, atomics_history, kv_history


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_atomics_histories_linearizable_under_chaos(monkeypatch, fabric):
    monkeypatch.delenv("DSM_CHAOS", raising=False)   # the node option alone switches it on
    chaos = "11:all"                                 # fixed seed: a failure repeats
    with pydsm.Cluster.local(nodes=3, fabric=fabric, op_timeout_ms=30000, peer_timeout_ms=10000,
                             chaos=chaos) as c:
        histories, faults = atomics_history(c, clients=3, ops=80, seed=11, chaos=chaos)
    assert len(histories["register"]) + len(histories["counter"]) == 3 * 80
    if fabric == "tcp":
        # over tcp every operation is a message chaos may delay; over shm a
        # client's reads, writes and atomics are loads and stores on the
        # mapped partition, which chaos does not touch
        assert faults["delayed"] > 0, faults
    register, counter = check(histories["register"], Register(initial=0)), check(histories["counter"], Counter())
    assert register.ok, register.explain()
    assert counter.ok, counter.explain()
    # the same history with the last register read's result changed to a
    # value nobody wrote is refused: the check bites on a real history
    ops = copy.deepcopy(histories["register"].ops)
    reads = [op for op in ops if op.kind == "read"]
    assert reads
    reads[-1].result = 999_999_999
    assert not check(ops, Register(initial=0)).ok


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_kv_histories_linearizable_under_chaos(monkeypatch, fabric):
    monkeypatch.delenv("DSM_CHAOS", raising=False)
    with pydsm.Cluster.local(nodes=3, fabric=fabric, op_timeout_ms=30000, peer_timeout_ms=10000,
                             chaos="12:all") as c:
        for protocol in ("own", "dir"):
            history = kv_history(c, protocol, seed=12)
            assert len(history) == 3 * KV_HISTORY["ops"], protocol
            # every node's stream touched keys others touched: the check
            # has concurrent operations on one object to order
            keys = {op.key: {o.client for o in history.ops if o.key == op.key} for op in history.ops}
            assert any(len(clients) == 3 for clients in keys.values()), protocol
            verdict = check(history, Counter(initial=0))
            assert verdict.ok, f"{protocol}: {verdict.explain()}"
            # a SET that saw a value no order of the adds reaches is refused
            # (every delta is below 2**16, so all of them sum below 2**26)
            ops = copy.deepcopy(history.ops)
            sets = [op for op in ops if op.kind == "fetch_add"]
            assert sets, protocol
            sets[-1].result += 2**40
            assert not check(ops, Counter(initial=0)).ok, protocol
        stats = [c.stats(node) for node in c.nodes]
    assert sum(int(s.get("chaos_delayed", 0)) + int(s.get("chaos_late", 0)) + int(s.get("chaos_split", 0))
               for s in stats) > 0
