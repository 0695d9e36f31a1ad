"""The heap's atomics as several cluster members (client processes) see
them under the fabric's chaos mode (delayed messages, late and split
writes): the history they record is linearizable, and the checker would
see it if one result were wrong."""
import copy

import pytest

import pydsm
from pydsm.linearizability import Counter, Register, check
from pydsm.tools.chaos import atomics_history


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
