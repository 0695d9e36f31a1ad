"""Running C workloads on the nodes: fetch_add totals, placement, results."""
from __future__ import annotations

import numpy as np
import pytest

import pydsm

FABRICS = [pytest.param("shm", marks=pytest.mark.shm), pytest.param("tcp", marks=pytest.mark.tcp)]


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("threads", [1, 2])
def test_fetch_add_from_every_node_totals_exactly(fabric, threads, dsm_cluster):
    c = dsm_cluster
    iters = 500
    with c.alloc(np.zeros(1, np.uint64), node=c.nodes[0]) as counter:
        res = c.run("fetch_add", pydsm.Placement(threads=threads), counter=counter, iters=iters)
        assert int(counter.read()[0]) == iters * threads * len(c.nodes)
    assert res.nodes == c.nodes
    assert res["ops"] == iters * threads * len(c.nodes)
    assert res["ops_per_sec"] > 0 and res.unit("ops_per_sec") == "ops/s"
    assert res["mean_latency_us"] > 0
    assert set(res.stats.node) == set(c.nodes)
    assert res.stats.spawns_run.sum() == len(c.nodes)
    # the remote nodes did atomics on node 0's word
    assert res.stats.atomics.sum() >= iters * threads * (len(c.nodes) - 1)


@pytest.mark.tcp
@pytest.mark.dsm_nodes(4)
def test_four_nodes_over_tcp(dsm_cluster):
    assert dsm_cluster.fabric == "tcp" and len(dsm_cluster.nodes) == 4
    with dsm_cluster.alloc(np.zeros(1, np.uint64), node=3) as counter:
        dsm_cluster.run("fetch_add", counter=counter, iters=300)
        assert int(counter.read()[0]) == 1200


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_two_nodes_subset_and_echo(dsm_cluster):
    c = dsm_cluster
    assert c.nodes == [0, 1]
    with c.alloc(np.zeros(1, np.uint64), node=1) as counter:
        res = c.run("fetch_add", nodes=[1], counter=counter, iters=100)
        assert res.nodes == [1] and int(counter.read()[0]) == 100
    er = c.run("echo", nodes=[0], target=1, iters=50)
    assert er["mean_latency_us"] > 0


def test_result_table_plot_json(dsm_cluster, tmp_path):
    c = dsm_cluster
    with c.alloc(np.zeros(1, np.uint64), node=0) as counter:
        res = c.run("fetch_add", counter=counter, iters=200)
    text = res.table()
    assert "ops_per_sec" in text and "node 0" in text
    fig = res.plot(str(tmp_path / "fa.png"))
    assert (tmp_path / "fa.png").stat().st_size > 1000 and fig.axes
    assert '"workload": "fetch_add"' in res.to_json(str(tmp_path / "fa.json"))
    assert "fetch_add" in repr(res)
    df = res.to_pandas()
    assert list(df.columns) == ["node", "name", "value", "unit"] and len(df) == len(res.figures)
    ops = df[df.name == "ops"]
    assert sorted(ops.node) == res.nodes and ops.value.sum() == pytest.approx(res["ops"])
    st = res.to_pandas("stats")
    assert list(st.node) == [int(n) for n in res.stats.node] and "bytes_read" in st.columns
    with pytest.raises(ValueError):
        res.to_pandas("nope")


def test_spawn_and_join_one_task(dsm_cluster):
    with dsm_cluster.alloc(np.zeros(1, np.uint64), node=0) as counter:
        task = dsm_cluster.spawn(1, "fetch_add", {"counter": counter, "iters": 10})
        out = task.join(timeout=30)
        assert b"ops_per_sec" in out
        assert int(counter.read()[0]) == 10
        with pytest.raises(pydsm.ClusterClosed):
            task.join()  # already joined


def test_unknown_workload_and_bad_params(dsm_cluster):
    with pytest.raises(pydsm.NoHandler):
        dsm_cluster.run("no_such_workload")
    with pytest.raises(pydsm.InvalidArgument):
        dsm_cluster.run("fetch_add", iters=10)  # no counter
    with pytest.raises(pydsm.InvalidArgument):
        dsm_cluster.run("fetch_add", counter="not-a-number")
    with pytest.raises(pydsm.NoPeer):
        dsm_cluster.run("fetch_add", nodes=[42], counter=1)


def test_workloads_listed(dsm_cluster):
    names = dsm_cluster.workloads()
    assert "fetch_add" in names


@pytest.mark.shm
@pytest.mark.parametrize("pin", ["compact", "scatter"])
def test_pinned_placement_runs_and_bad_placement_is_refused(pin, dsm_cluster):
    c = dsm_cluster
    with c.alloc(np.zeros(1, np.uint64), node=c.nodes[0]) as counter:
        c.run("fetch_add", pydsm.Placement(threads=2, pin=pin), counter=counter, iters=200)
        assert int(counter.read()[0]) == 200 * 2 * len(c.nodes)
        # the C side checks the placement too: a node index outside the run
        with pytest.raises(pydsm.InvalidArgument):
            c.spawn(c.nodes[0], "fetch_add", {"counter": counter.addr(), "pin": pin,
                                              "rank_index": 5, "nodes": 2}).join()
