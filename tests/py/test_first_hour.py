"""A researcher's first hour (issue 38): a coherence workload given no
directory gets one made and freed by the run, so alloc-run-free loops work;
every refusal of a parameter names it, its value and what is allowed; an
unknown workload name lists the known ones; every listed workload runs from
the CLI with its defaults; the CoRM store's size is a setting."""
from __future__ import annotations

import re

import numpy as np
import pytest

import pydsm
from pydsm.memory import GlobalBuffer

# Quick sizes for the coherence workloads (a second or less each).
QUICK = {
    "kv": dict(ops=200, keys=64, buckets=16),
    "gemm": dict(n=32, tile=8),
    "dataframe": dict(rows=512, chunk=64),
    "socialnet": dict(posts=20, text=64),
}


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
@pytest.mark.parametrize("protocol", ["own", "dir"])
@pytest.mark.parametrize("name", sorted(QUICK))
def test_a_run_without_a_directory_makes_and_frees_its_own(name, protocol, dsm_cluster, monkeypatch):
    c = dsm_cluster
    freed = []
    original_free = GlobalBuffer.free

    def recording_free(self: GlobalBuffer) -> None:
        freed.append(self.address)
        original_free(self)

    monkeypatch.setattr(GlobalBuffer, "free", recording_free)
    nodes = c.live_nodes()[:2]
    # the natural loop: run, run again (a reused directory would fail the
    # second run: its counters are not zero), each on a fresh directory
    checksums = []
    for _ in range(2):
        task = c.submit(name, nodes=nodes, protocol=protocol, progress=False, **QUICK[name])
        owned = list(task._owned)
        assert len(owned) == 1 and owned[0].node == nodes[0]
        res = task.result(timeout=120)
        assert owned[0].address in freed, "the run's directory was not freed after the run"
        checksums.append(res.per_node("checksum").value[0])
    assert checksums[0] == checksums[1]
    # one given is used as it is, and left to its owner
    with c.zeros(4096, np.uint8, node=nodes[0]) as directory:
        task = c.submit(name, nodes=nodes, protocol=protocol, directory=directory, progress=False, **QUICK[name])
        assert task._owned == []
        task.result(timeout=120)
        assert directory.address not in freed


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_a_cancelled_run_frees_its_directory_once_the_nodes_stop(dsm_cluster):
    c = dsm_cluster
    task = c.submit("kv", nodes=c.live_nodes()[:2], protocol="own", ops=10 ** 9, progress=False)
    directory = task._owned[0]
    task.cancel()
    with pytest.raises(pydsm.Cancelled):
        task.result(timeout=60)
    assert directory.freed


# Each parameter of each workload of the apps plugin, and a value it
# refuses; None where every number is allowed (then the bad value is a
# non-number, which the catalog check refuses by name). A parameter added
# to a workload without an entry here fails the walk below.
BAD = {
    "fetch_add": {"counter": 0, "iters": None},
    "echo": {"target": 300, "iters": 0, "size": 1 << 21, "window": 0},
    "kv": {"protocol": "bogus", "lock": "bogus", "buckets": 0, "keys": 0, "ops": None, "get_pct": 150,
           "theta_milli": None, "seed": None, "checks": 3, "guard": 2, "directory": 0, "streams": 0,
           "history": 1, "timing": 2},
    "gemm": {"protocol": "bogus", "seed": None, "checks": 3, "directory": 0, "n": 48, "tile": 0, "threads": 0},
    "dataframe": {"protocol": "bogus", "seed": None, "checks": 3, "directory": 0, "rows": 0, "chunk": 0,
                  "groups": 0, "min_value": None, "affinity": 2, "per_node": 2, "timing": 2, "queries": 0,
                  "threads": 0},
    "socialnet": {"protocol": "bogus", "seed": None, "checks": 3, "directory": 0, "posts": 0, "text": 0,
                  "values": 2, "fused": 2, "boxes": 2, "timing": 2},
    "semeru": {"app": "bogus", "design": "bogus", "cache_pct": 0, "heap_mib": 1, "size": 21, "iters": 1001,
               "order": "bogus", "fetch_delay_us": 2000000, "gc_trigger_pct": 100, "probe": 2},
    "sssp": {"scale": 0, "edge_factor": 0, "seed": None},
    "chan_ops": {"object": "bogus", "ops": 0, "seed": None, "round": None, "keys": 0, "slots": 0, "locks": 0,
                 "get_pct": 150, "delete_pct": 100, "settle_ms": 0, "fence": 2, "capacity": 0, "push_pct": 150,
                 "history": 1, "window": 0},
}


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_every_refusal_names_the_parameter_and_the_value(dsm_cluster):
    c = dsm_cluster
    ws = c.workloads()
    node, other = c.live_nodes()[:2]
    directory = c.zeros(64, np.uint8, node=node)
    # what a run needs besides the parameter under test to reach its check
    base = {"semeru": {"memory_nodes": str(other)}, "socialnet": {"directory": directory.address}}
    tried = 0
    for name, bad in BAD.items():
        declared = {p.name: p for p in ws[name].params or ()}
        assert set(declared) == set(bad), f"{name}: parameters {sorted(declared)} vs the table {sorted(bad)}"
        for param, value in bad.items():
            values = [] if value is None else [value]
            if declared[param].type != "str":
                values.append("x")     # not a number
            for v in values:
                # spawn passes exactly these arguments (no directory made)
                task = c.spawn(node, name, {**base.get(name, {}), param: v})
                exc = task.exception(timeout=60)
                assert isinstance(exc, pydsm.InvalidArgument), (name, param, v, exc)
                msg = str(exc)
                assert re.search(rf"\b{re.escape(param)}\b", msg), (name, param, v, msg)
                assert str(v) in msg, (name, param, v, msg)
                assert "must be" in msg or "takes" in msg, (name, param, v, msg)
                tried += 1
    assert tried > 60
    directory.free()


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_the_refusals_the_researcher_met(dsm_cluster):
    """The messages of issue 38's first experiment, which all said
    'invalid argument'."""
    c = dsm_cluster
    nodes = c.live_nodes()[:2]
    cases = [
        (dict(protocol="bogus"), "kv: protocol=bogus refused: must be own, dir or local"),
        (dict(lock="bogus"), "kv: lock=bogus refused: must be cas, deleg or auto for protocol own"),
        (dict(keys=0), "kv: keys=0 refused: must be 1.."),
        (dict(get_pct=150), "kv: get_pct=150 refused: must be 0..100"),
    ]
    for params, text in cases:
        with pytest.raises(pydsm.InvalidArgument, match=re.escape(text)):
            c.run("kv", nodes=nodes, **params)
    # no directory, where the run cannot make one (spawn passes what it is given)
    with pytest.raises(pydsm.InvalidArgument, match=r"kv: directory not given \(default 0\): must be the global "
                                                    r"address of 8\*\(1\+2\*buckets\) = 1032 zeroed shared bytes"):
        c.spawn(nodes[0], "kv", {"protocol": "own"}).result(timeout=60)


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_an_unknown_workload_lists_the_known_and_suggests_the_closest(dsm_cluster):
    c = dsm_cluster
    with pytest.raises(pydsm.NoHandler) as err:
        c.run("kb")
    msg = str(err.value)
    assert "unknown workload 'kb'" in msg and "did you mean 'kv'?" in msg, msg
    for name in ("fetch_add", "echo", "kv", "gemm", "dataframe", "socialnet", "semeru", "sssp"):
        assert name in msg, msg
    with pytest.raises(pydsm.NoHandler, match="did you mean 'socialnet'"):
        c.spawn(c.live_nodes()[0], "social_net")
    with pytest.raises(pydsm.NoHandler) as err:
        c.run("zzzzzz")
    assert "did you mean" not in str(err.value) and "known: " in str(err.value)


# Every workload `pydsm run list` shows, with its defaults, from the CLI;
# quick sizes where the defaults take longer than a few seconds here.
CLI_QUICK = {
    "fetch_add": ["iters=200"], "echo": ["iters=50"], "kv": ["ops=500"], "gemm": ["n=32", "tile=8"],
    "dataframe": ["rows=1024"], "socialnet": ["posts=20"], "semeru": ["app=temps", "size=2000"],
    "sssp": ["scale=6"], "chan_ops": ["ops=50"],
}


def _listed(run_pydsm):
    out = run_pydsm("run", "list").stdout
    return [line.split()[0] for line in out.splitlines()[1:] if line.startswith("  ")]


def test_the_cli_quick_table_covers_every_listed_workload(run_pydsm):
    assert sorted(_listed(run_pydsm)) == sorted(CLI_QUICK)


@pytest.mark.parametrize("name", sorted(CLI_QUICK))
def test_every_listed_workload_runs_from_the_cli(name, run_pydsm):
    out = run_pydsm("run", name, *CLI_QUICK[name], "--nodes", "2", timeout=120).stdout
    assert "ops" in out or "seconds" in out or "latency" in out or "_s" in out, out


def test_cli_memory_nodes_flag(run_pydsm):
    out = run_pydsm("run", "semeru", "app=temps", "size=2000", "--nodes", "3", "--memory-nodes", "1,2",
                    timeout=120).stdout
    assert "gc_s" in out, out
    p = run_pydsm("run", "semeru", "--memory-nodes", "one", check=False)
    assert p.returncode == 2 and "--memory-nodes takes ranks" in p.stderr


@pytest.mark.shm
def test_compact_store_size_is_a_setting():
    """The default store (16 MiB) holds 131,072 objects of 48 bytes (128-byte
    slots); a 32 MiB one set from Cluster.local holds more."""
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="8MiB", compact_store="32MiB") as c:
        store = c.compact.store(c.nodes[0])
        ptrs = [store.alloc(48) for _ in range(131_073 + 1000)]
        assert store.usage()["objects"] == len(ptrs)


@pytest.mark.shm
def test_a_small_compact_store_fills_at_its_size():
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="8MiB", compact_store="1MiB",
                             compact_block="64KiB") as c:
        store = c.compact.store(c.nodes[0])
        assert store.usage()["block_size"] == 64 << 10
        n = 0
        with pytest.raises(pydsm.OutOfMemory):
            while n < 100_000:
                store.alloc(48)
                n += 1
        # 1 MiB of 128-byte slots: 8192, less what the blocks' own records take
        assert 4096 <= n <= 8192, n


def test_compact_settings_are_checked_before_any_daemon_starts():
    with pytest.raises(pydsm.InvalidArgument, match="compact_block must be a multiple of 4KiB"):
        pydsm.Cluster.local(nodes=1, compact_block="5000")
    with pytest.raises(pydsm.InvalidArgument, match="compact_workers must be an int in 1..16"):
        pydsm.Cluster.local(nodes=1, compact_workers=0)
    with pytest.raises(pydsm.InvalidArgument, match="compact_store must hold at least one block"):
        pydsm.Cluster.local(nodes=1, compact_store="4KiB", compact_block="64KiB")


def test_own_cache_budget_is_a_setting():
    with pytest.raises(pydsm.InvalidArgument, match="own_cache"):
        pydsm.Cluster.local(nodes=1, own_cache="lots")
    # every daemon takes the flag (a daemon refusing it would not start)
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="8MiB", own_cache="1MiB") as c:
        assert "own's cache budget" not in c.log(c.nodes[0])


@pytest.mark.shm
def test_own_cache_budget_shows_in_a_runs_figures():
    """The budget's effect is seen from the driver: with none, a node keeps
    no copy it is not using (copies evicted, fewer hits); with the default
    (64 MiB) kv's few keys stay cached and nothing is evicted."""
    figs = {}
    for budget in (0, None):
        with pydsm.Cluster.local(nodes=2, fabric="shm", partition="16MiB", own_cache=budget) as c:
            res = c.run("kv", protocol="own", keys=16, ops=2000, get_pct=95, progress=False)
            figs[budget] = {k: res[k] for k in ("cache_hits", "cache_misses", "cache_evictions")}
    assert figs[0]["cache_evictions"] > 0 and figs[None]["cache_evictions"] == 0, figs
    assert figs[0]["cache_hits"] < figs[None]["cache_hits"], figs


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
def test_a_counter_of_another_dtype_is_refused_by_name(dsm_cluster):
    """fetch_add's adds are 64-bit integer adds: a float64 counter would read
    back bit patterns, so its declared dtypes refuse it before the run."""
    c = dsm_cluster
    nodes = c.live_nodes()[:2]
    assert c.workloads["fetch_add"].params[0].dtypes == ("uint64", "int64")
    with c.zeros(1, np.float64, node=nodes[0]) as counter:
        with pytest.raises(pydsm.InvalidArgument, match=r"fetch_add: counter is a float64 buffer; "
                                                        r"must be uint64 or int64"):
            c.run("fetch_add", nodes=nodes, counter=counter, iters=10)
        with pytest.raises(pydsm.InvalidArgument, match="counter is a float64 buffer"):
            c.spawn(nodes[0], "fetch_add", {"counter": counter, "iters": 10})
        assert counter.read()[0] == 0.0
    for dtype in (np.uint64, np.int64):
        with c.zeros(1, dtype, node=nodes[0]) as counter:
            c.run("fetch_add", nodes=nodes, counter=counter, iters=10, progress=False)
            assert int(counter.read()[0]) == 20


@pytest.mark.shm
@pytest.mark.dsm_nodes(2)
@pytest.mark.parametrize("name", ["kv", "gemm"])
def test_a_reused_directory_is_refused_by_name(name, dsm_cluster):
    """A directory serves one run: its rendezvous counter and handles are
    left behind, and a second run would meet on them. The workload refuses
    it, naming ``directory``; zeroed again it serves a new run."""
    c = dsm_cluster
    nodes = c.live_nodes()[:2]
    with c.zeros(4096, np.uint8, node=nodes[0]) as directory:
        first = c.run(name, nodes=nodes, directory=directory, progress=False, **QUICK[name])
        with pytest.raises(pydsm.InvalidArgument,
                           match=rf"{name}: directory=\d+ refused: must be \d+ freshly zeroed shared bytes, "
                                 r"not reused: its first word holds [1-9]\d*, left by an earlier run"):
            c.run(name, nodes=nodes, directory=directory, progress=False, **QUICK[name])
        directory[:] = 0
        again = c.run(name, nodes=nodes, directory=directory, progress=False, **QUICK[name])
        assert again.per_node("checksum").value[0] == first.per_node("checksum").value[0]


def test_the_fabric_bench_ends_without_a_peer_failure(run_pydsm):
    """The tcp target leaving at the end was reported by UCX's error handler
    as "Endpoint timeout" and warned about as a failed peer; the bench now
    says the target leaves first. One tcp figure, one run: under a second."""
    p = run_pydsm("bench", "fabric", "--quick", "--", "--transport", "tcp", "--only", "get_8B_latency",
                  "--runs", "1", timeout=60)
    assert "get_8B_latency/tcp" in p.stdout
    assert "peer failed" not in p.stderr and "Endpoint timeout" not in p.stderr, p.stderr
