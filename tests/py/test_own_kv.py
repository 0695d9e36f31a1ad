"""The "kv" workload across dsmd processes under own (DRust) and dir (the
directory baseline), switched by one parameter: the final table's checksum
equals the single-process original's (protocol="local" running the same
streams one after the other)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import wait_until

FABRICS = [pytest.param("shm", marks=pytest.mark.shm), pytest.param("tcp", marks=pytest.mark.tcp)]
PARAMS = dict(buckets=16, keys=100, ops=60, seed=7)


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("protocol,lock", [("own", "deleg"), ("dir", "cas")])
def test_kv_checksum_equals_the_original(fabric, protocol, lock, dsm_cluster):
    c = dsm_cluster
    n = len(c.nodes)
    original = c.run("kv", nodes=[c.nodes[0]], protocol="local", streams=n, **PARAMS)
    with c.alloc(np.zeros(1 + 2 * PARAMS["buckets"], np.uint64), node=c.nodes[0]) as directory:
        res = c.run("kv", protocol=protocol, lock=lock, directory=directory, **PARAMS)
    assert res["ops"] == PARAMS["ops"] * n
    sums = dict(zip(res.per_node("checksum").node, res.per_node("checksum").value))
    first = sums.pop(c.nodes[0])   # rank_index 0 computes it
    assert first != 0 and all(v == 0 for v in sums.values())
    assert first == original.per_node("checksum").value[0]
    # The nodes talked: every node sent protocol or lock messages.
    assert all(m > 0 for m in res.per_node("messages").value)
    # The run's figures combine by what each is (declared by the workload):
    # a ratio of totals, not a sum of the nodes' ratios; the checksum is
    # rank_index 0's, not an average with the others' zeros.
    assert res.kind("messages_per_op") == "ratio" and res.kind("checksum") == "first"
    assert res["messages_per_op"] == pytest.approx(res["messages"] / res["ops"])
    assert res["bytes_per_op"] == pytest.approx(res["bytes"] / res["ops"])
    assert res["checksum"] == first
    assert res.summary()["messages_per_op"] == (res["messages_per_op"], "msgs")


def test_kv_refuses_bad_parameters(dsm_cluster):
    import pydsm

    with pytest.raises(pydsm.DsmError):
        dsm_cluster.run("kv", nodes=[dsm_cluster.nodes[0]], protocol="gam")
    # no directory: spawn passes exactly what it is given (run would make one)
    with pytest.raises(pydsm.InvalidArgument, match="kv: directory not given"):
        dsm_cluster.spawn(dsm_cluster.nodes[0], "kv", {"protocol": "own"}).result(timeout=60)


@pytest.mark.parametrize("protocol,lock", [("own", "deleg"), ("local", "local")])
def test_kv_stops_when_cancelled(protocol, lock, dsm_cluster):
    """kv polls its stop flag in its operation loop (then meets the other
    nodes and drops its buckets as usual): a cancelled run ends with
    Cancelled, the daemons stay up, and the cluster takes the next run."""
    import pydsm

    c = dsm_cluster
    nodes = c.nodes if protocol != "local" else [c.nodes[0]]
    with c.alloc(np.zeros(1 + 2 * PARAMS["buckets"], np.uint64), node=c.nodes[0]) as directory:
        extra = {"directory": directory} if protocol != "local" else {}
        task = c.submit("kv", nodes=nodes, protocol=protocol, lock=lock, buckets=16, keys=100,
                        ops=10**10, **extra)
        if protocol != "local":
            # cancelled mid-run: once it has made its buckets (their
            # handles fill the directory; the bound only catches a hang)
            assert wait_until(lambda: directory.read().any(), timeout=60, interval=0.01)
        else:
            task.wait_started(60)   # generous: a daemon's thread starting on a loaded host
        assert not task.done()
        assert task.cancel()
        with pytest.raises(pydsm.Cancelled) as info:
            task.result(timeout=60)
        # stopped by its flag, not ended by its daemon after the grace
        assert "ignored its stop flag" not in str(info.value)
    assert all(c.stats(n) is not None for n in nodes)   # every daemon still serves
    res = c.run("kv", nodes=[c.nodes[0]], protocol="local", **PARAMS)
    assert res["ops"] == PARAMS["ops"]
