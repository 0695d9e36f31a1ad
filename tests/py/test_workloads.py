"""Running C workloads on the nodes: fetch_add totals, placement, results."""
from __future__ import annotations

import time

import numpy as np
import pytest

import pydsm
from conftest import wait_until

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


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_an_echo_to_itself_stays_out_of_the_combined_figures(dsm_cluster):
    """A node told to echo itself measures no network: its figures are
    self_*, and the nodes' combined latency is the remote echoes' alone."""
    c = dsm_cluster
    er = c.run("echo", target=c.nodes[0], iters=50)
    to_self, remote = er.per_node("self_latency_us"), er.per_node("mean_latency_us")
    assert [int(n) for n in to_self.node] == c.nodes[:1]
    assert [int(n) for n in remote.node] == c.nodes[1:]
    assert er["mean_latency_us"] == pytest.approx(float(np.mean(remote.value)))
    assert [int(n) for n in er.per_node("self_round_trips_per_sec").node] == c.nodes[:1]


def test_result_table_plot_json(dsm_cluster, tmp_path):
    c = dsm_cluster
    with c.alloc(np.zeros(1, np.uint64), node=0) as counter:
        res = c.run("fetch_add", counter=counter, iters=200)
    text = res.table()
    assert "ops_per_sec" in text and "node 0" in text
    fig = res.plot(path=str(tmp_path / "fa.png"))
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


def test_spawn_returns_the_one_task_type(dsm_cluster):
    """spawn runs a workload on one node with exactly its arguments and
    returns the same future as submit: result(), done(), exception()."""
    with dsm_cluster.zeros(1, np.uint64, node=0) as counter:
        task = dsm_cluster.spawn(1, "fetch_add", {"counter": counter, "iters": 10})
        assert isinstance(task, pydsm.Task) and task.nodes == [1] and not hasattr(task, "join")
        res = task.result(timeout=30)
        assert isinstance(res, pydsm.Result) and "ops_per_sec" in res
        assert list(res.per_node("ops_per_sec").node) == [1]
        assert task.done() and task.exception() is None and task.result() is res
        assert int(counter.read()[0]) == 10
        assert "fetch_add on nodes [1]: done" in repr(task)


def test_task_exception_and_result_agree_on_a_failure(dsm_cluster):
    """A run refused on the node: exception() returns what result() raises,
    for a task from spawn and from submit alike."""
    with dsm_cluster.zeros(1, np.uint64, node=0) as counter:
        bad = {"counter": counter.addr(), "rank_index": 5, "nodes": 2}   # index outside the run
        spawned = dsm_cluster.spawn(dsm_cluster.nodes[0], "fetch_add", bad)
        exc = spawned.exception(timeout=30)
        assert isinstance(exc, pydsm.InvalidArgument) and f"node {dsm_cluster.nodes[0]}" in str(exc)
        assert spawned.done() and not spawned.cancelled()
        with pytest.raises(pydsm.InvalidArgument):
            spawned.result()
        good = dsm_cluster.submit("fetch_add", counter=counter, iters=5, progress=False)
        assert good.exception(timeout=30) is None
        assert good.result().per_node("ops_per_sec").node.tolist() == dsm_cluster.nodes


def test_unknown_workload_and_bad_params(dsm_cluster):
    with pytest.raises(pydsm.NoHandler):
        dsm_cluster.run("no_such_workload")
    with pytest.raises(pydsm.InvalidArgument):
        dsm_cluster.run("fetch_add", iters=10)  # no counter
    with pytest.raises(pydsm.InvalidArgument):
        dsm_cluster.run("fetch_add", counter="not-a-number")
    with pytest.raises(pydsm.NoPeer):
        dsm_cluster.run("fetch_add", nodes=[42], counter=1)


def test_submit_returns_a_future_of_the_result(dsm_cluster):
    c = dsm_cluster
    with c.alloc(np.zeros(1, np.uint64), node=0) as counter:
        task = c.submit("fetch_add", counter=counter, iters=200)
        assert isinstance(task, pydsm.Task) and "fetch_add" in repr(task)
        res = task.result(timeout=60)
        assert task.done() and not task.cancelled() and task.result() is res
        assert "done" in repr(task) and task.cancel() is False
        assert int(counter[0]) == 200 * len(res.nodes)


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_cancel_and_timeout_stop_the_work_on_the_daemons(dsm_cluster, how, fabric):
    c = dsm_cluster
    with c.alloc(np.zeros(1, np.uint64), node=0) as counter:
        task = c.submit("fetch_add", counter=counter, iters=10**12)
        task.wait_started(60)   # generous: each daemon starts a thread, on a loaded host
        assert task.running()
        assert wait_until(lambda: int(counter[0]) > 0, 30)
        if how == "cancel":
            assert task.cancel() is True and task.cancelled()
            with pytest.raises(pydsm.Cancelled):
                task.result(timeout=60)
        else:
            with pytest.raises(pydsm.Timeout, match="cancelled"):
                task.result(timeout=0.2)
        assert task.done() and not task.running()
        before = int(counter[0])
        time.sleep(0.3)
        assert int(counter[0]) == before      # nothing runs any more
        # and the cluster takes the next run
        counter[0] = 0
        res = c.run("fetch_add", counter=counter, iters=50)
        assert int(counter[0]) == 50 * len(res.nodes)


def test_progress_bar_also_when_stderr_is_not_a_terminal(dsm_cluster, capsys):
    c = dsm_cluster
    with c.alloc(np.zeros(1, np.uint64), node=0) as counter:
        res = c.run("fetch_add", counter=counter, iters=100, progress=True)
        n = len(res.nodes)
    err = capsys.readouterr().err
    assert "fetch_add" in err and f"{n}/{n}" in err and "node" in err, err


def test_workloads_listed_with_their_parameters(dsm_cluster):
    ws = dsm_cluster.workloads()
    assert "fetch_add" in ws and "echo" in ws
    echo = ws["echo"]
    assert isinstance(echo, pydsm.WorkloadInfo) and echo.help
    target = echo.params[0]
    assert (target.name, target.type, target.default) == ("target", "u64", "next")
    assert [p.name for p in ws["fetch_add"].params] == ["counter", "iters"]
    assert ws["fetch_add"].params[1].default == "10000"
    assert "counter (addr:uint64,int64, required)" in ws["fetch_add"].describe()
    assert ws["fetch_add"].params[0].dtypes == ("uint64", "int64") and ws["fetch_add"].params[1].dtypes is None
    # every workload of the apps plugin declares what it takes (the registry
    # is the process's: plugins other tests loaded are listed too)
    apps = {"fetch_add", "echo", "kv", "gemm", "dataframe", "socialnet", "semeru", "sssp", "chan_ops"}
    assert apps <= set(ws), ws
    assert all(ws[n].params is not None and ws[n].help for n in apps), ws
    assert {"protocol", "lock", "directory"} <= {p.name for p in ws["kv"].params}


def test_parameters_are_checked_by_name(dsm_cluster):
    c = dsm_cluster
    with pytest.raises(pydsm.InvalidArgument, match="fetch_add: missing parameter 'counter'"):
        c.run("fetch_add", iters=3)
    with pytest.raises(pydsm.InvalidArgument, match="echo: unknown parameter 'tagret'"):
        c.run("echo", tagret=1)
    with pytest.raises(pydsm.InvalidArgument, match="'iters' takes an unsigned integer"):
        c.run("echo", target=0, iters="many")
    # a key the run sets from its Placement is refused, never silently dropped
    with c.alloc(np.zeros(1, np.uint64), node=0) as counter:
        with pytest.raises(pydsm.InvalidArgument, match="threads set by the run itself"):
            c.run("fetch_add", counter=counter, threads=2)


def test_failure_on_several_nodes_is_reported_once(dsm_cluster):
    c = dsm_cluster
    nodes = c.live_nodes()[:2]
    # passes the parameter check, and every node refuses it the same way
    with pytest.raises(pydsm.InvalidArgument) as err:
        c.run("echo", nodes=nodes, target=300, iters=1)
    text = str(err.value)
    assert text.count("echo: target=300 refused: must be the rank of a live node") == 1, text
    assert f"nodes {', '.join(map(str, nodes))}:" in text, text


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
                                              "rank_index": 5, "nodes": 2}).result()


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
@pytest.mark.parametrize("trustees,threads,want_trustees", [("shared", 2, 2), ("dedicated", 3, 2),
                                                           ("dedicated", 2, 1)])
def test_sssp_placement_trustees_reach_the_runtime(dsm_cluster, trustees, threads, want_trustees):
    """Placement(threads=..., trustees=...) reaches the C delegation runtime of
    the sssp workload: the partitions go to the threads it says, and the
    delegated distances equal Dijkstra's on every node."""
    res = dsm_cluster.run("sssp", pydsm.Placement(threads=threads, trustees=trustees), scale=8)
    assert res.nodes == dsm_cluster.nodes
    for name, want in (("trustees", want_trustees), ("dedicated", int(trustees == "dedicated")),
                       ("matches_dijkstra", 1)):
        assert [int(v) for v in res.per_node(name)["value"]] == [want] * len(res.nodes), name
    assert (res.per_node("relaxations")["value"] >= 256 / 4).all()


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_sssp_refuses_dedicated_trustees_without_a_client_thread(dsm_cluster):
    with pytest.raises(pydsm.InvalidArgument, match="at least 2 with dedicated trustees"):
        dsm_cluster.run("sssp", pydsm.Placement(threads=1, trustees="dedicated"), scale=6)
