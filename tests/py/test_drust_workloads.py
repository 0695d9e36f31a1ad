"""The gemm, dataframe and socialnet workloads across dsmd processes under
own (DRust) and dir (the directory baseline), switched by one parameter:
rank_index 0's checksum equals the single-process original's
(protocol="local"), and every node reports the per-run counters the drust
benchmark reads. dataframe's own run places its parts with spawn_to on other
daemons, socialnet's passes posts through channels between them."""
from __future__ import annotations

import numpy as np
import pytest

FABRICS = [pytest.param("shm", marks=pytest.mark.shm), pytest.param("tcp", marks=pytest.mark.tcp)]
COUNTERS = ("messages", "bytes", "cache_hits", "cache_misses", "cache_evictions", "moves", "invalidations",
            "held_back", "messages_per_op", "bytes_per_op")

# name -> (parameters, directory words for n nodes)
WORKLOADS = {
    "gemm": (dict(n=32, tile=8, seed=5), lambda n: 1 + 3 * 4 * 4),
    "dataframe": (dict(rows=1000, chunk=64, groups=8, seed=9), lambda n: 1 + 2 * 16 + 2 * n),
    "socialnet": (dict(posts=30, text=128, seed=3), lambda n: 3),
}


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("protocol", ["own", "dir"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_checksum_equals_the_original(fabric, protocol, name, dsm_cluster):
    c = dsm_cluster
    params, words = WORKLOADS[name]
    original = c.run(name, nodes=[c.nodes[0]], protocol="local", **params)
    with c.alloc(np.zeros(words(len(c.nodes)), np.uint64), node=c.nodes[0]) as directory:
        res = c.run(name, protocol=protocol, directory=directory, **params)
    sums = dict(zip(res.per_node("checksum").node, res.per_node("checksum").value))
    first = sums.pop(c.nodes[0])   # rank_index 0 computes it
    assert first != 0 and all(v == 0 for v in sums.values())
    assert first == original.per_node("checksum").value[0]
    for key in COUNTERS:
        assert len(res.per_node(key).value) == len(c.nodes), key
    assert sum(res.per_node("messages").value) > 0


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_bad_parameters_are_refused(name, dsm_cluster):
    import pydsm

    with pytest.raises(pydsm.DsmError):
        dsm_cluster.run(name, nodes=[dsm_cluster.nodes[0]], protocol="gam")
    # no directory: spawn passes exactly what it is given (run would make one)
    with pytest.raises(pydsm.InvalidArgument, match=f"{name}: directory not given"):
        dsm_cluster.spawn(dsm_cluster.nodes[0], name, {"protocol": "own"}).result(timeout=60)


def test_socialnet_without_boxes_on_one_node(dsm_cluster):
    """boxes=0 passes the original's plain pointers through own's channels
    (the bench's ceiling for own on one node): the same checksum as the
    original, only under own on one node, and refused elsewhere with a reason."""
    import pydsm

    c = dsm_cluster
    params = dict(posts=40, text=64, seed=11)
    original = c.run("socialnet", nodes=[c.nodes[0]], protocol="local", **params)
    with c.alloc(np.zeros(3, np.uint64), node=c.nodes[0]) as directory:
        bare = c.run("socialnet", nodes=[c.nodes[0]], protocol="own", directory=directory, boxes=0, **params)
        assert bare.per_node("checksum").value[0] == original.per_node("checksum").value[0] != 0
        assert bare.per_node("ops").value[0] == 3 * params["posts"]
        for where, protocol in (([c.nodes[0], c.nodes[1]], "own"), ([c.nodes[0]], "dir")):
            with pytest.raises(pydsm.DsmError, match="boxes=0 refused: must be 1, or 0 only for protocol own on one node"):
                c.run("socialnet", nodes=where, protocol=protocol, directory=directory, boxes=0, **params)
    with pytest.raises(pydsm.DsmError, match="boxes=2 refused"):
        c.run("socialnet", nodes=[c.nodes[0]], protocol="local", boxes=2, **params)


PHASES = {
    "socialnet": ("alloc", "acquire", "work", "release", "send", "recv", "drop"),
    "kv": ("acquire", "work", "release"),
}
TIMED = {
    "socialnet": (dict(posts=30, text=128, seed=3), lambda n: 3),
    "kv": (dict(buckets=16, keys=100, ops=60, seed=7), lambda n: 1 + 2 * 16),
}


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("protocol", ["own", "dir"])
@pytest.mark.parametrize("name", sorted(TIMED))
def test_timing_says_where_the_time_goes(fabric, protocol, name, dsm_cluster):
    """timing=1 (what dsm-bench-drust --profile reads): every node reports
    the ns its operations spent in each phase, which fit in its measured
    phase, and what its fabric sent meanwhile. Refused for the original."""
    import pydsm

    c = dsm_cluster
    params, words = TIMED[name]
    with c.alloc(np.zeros(words(len(c.nodes)), np.uint64), node=c.nodes[0]) as directory:
        res = c.run(name, protocol=protocol, directory=directory, timing=1, **params)
    seconds = res.per_node("seconds").value
    spent = sum(np.asarray(res.per_node(f"t_{p}_ns").value, dtype=float) for p in PHASES[name])
    assert all(0 < s <= 1e9 * t * 1.01 + 1e5 for s, t in zip(spent, seconds)), (spent, seconds)
    # a node's operations wait for others: some node took time to acquire
    assert max(res.per_node("t_acquire_ns").value) > 0
    # What each node's fabric sent over its own phase: something wherever
    # the node counted messages; socialnet's compose (rank_index 1) sends
    # each post on to the text service's channel, a request of its own.
    am = dict(zip(res.per_node("fabric_am_sent").node, res.per_node("fabric_am_sent").value))
    ones = dict(zip(res.per_node("fabric_onesided").node, res.per_node("fabric_onesided").value))
    for node, m in zip(res.per_node("messages").node, res.per_node("messages").value):
        assert m == 0 or am[node] + ones[node] > 0, (node, m)
    if name == "socialnet":
        assert am[c.nodes[1]] >= params["posts"]
    with pytest.raises(pydsm.DsmError, match="timing=1 refused"):
        c.run(name, nodes=[c.nodes[0]], protocol="local", timing=1, **params)


@pytest.mark.parametrize("protocol", ["own", "dir"])
def test_dataframe_timing_names_node0s_phases(protocol, dsm_cluster):
    """dataframe's timing=1 (what --profile prints per query): node 0's send,
    work and receive phases each took time and fit in its measured phase;
    under own its tasks ran, and their start and tail are never negative."""
    c = dsm_cluster
    params, words = WORKLOADS["dataframe"]
    with c.alloc(np.zeros(words(len(c.nodes)), np.uint64), node=c.nodes[0]) as directory:
        res = c.run("dataframe", protocol=protocol, directory=directory, timing=1, **params)

    def node0(key: str) -> float:
        return float(dict(zip(res.per_node(key).node, res.per_node(key).value))[c.nodes[0]])

    phases = [node0(f"t_{p}_ns") for p in ("send", "work", "recv")]
    assert all(p > 0 for p in phases), phases
    assert sum(phases) <= 1e9 * node0("seconds") * 1.01 + 1e5, (phases, node0("seconds"))
    task = {p: node0(f"t_task_{p}_ns") for p in ("start", "run", "tail")}
    if protocol == "own":
        assert task["run"] > 0 and task["start"] >= 0 and task["tail"] >= 0, task
    else:
        assert task == {"start": 0, "run": 0, "tail": 0}, task
