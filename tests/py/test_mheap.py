"""Semeru's managed heap driven from Python (pydsm.mheap): the workloads run
on a CPU server daemon with the heap on the others, under the Semeru design
and the CPU-only baseline, and come back as numpy records whose fields mean
what they say: the pauses add up to the GC time, Semeru moves fewer bytes
during GC than the baseline, and the data each workload keeps (its digest)
is the same under every design and cache size."""
from __future__ import annotations

import numpy as np
import pytest

import pydsm
from pydsm import mheap

#: Small runs: each collects several times (buffers keeps a 2.5 MiB window).
SMALL = dict(iters=6)
SIZES = {"temps": 2500, "buffers": 300, "graph": 10}
HEAP_MIB = {"temps": 2, "buffers": 4, "graph": 2}


@pytest.fixture(scope="module")
def temps_runs(dsm_cluster_pool):
    c = dsm_cluster_pool.get("shm", 3)
    return c.mheap.compare(workloads=["temps"], caches=[100, 25], size=SIZES["temps"],
                          heap_mib=HEAP_MIB["temps"], **SMALL)


def test_records_have_the_fields_and_add_up(temps_runs):
    runs = temps_runs
    assert runs.dtype == mheap.RUN_DTYPE
    assert len(runs) == 4
    assert list(runs.design) == ["semeru", "baseline"] * 2
    assert list(runs.cache_pct) == [100, 100, 25, 25]
    for r in runs:
        pauses = r["pauses_ms"]
        assert isinstance(pauses, np.ndarray) and pauses.dtype == np.float64
        assert len(pauses) == r["n_pauses"] > 0, "a 2 MiB heap collects"
        assert (pauses > 0).all()
        # every pause is a collection: together they are the GC time
        assert pauses.sum() / 1e3 == pytest.approx(r["gc_s"], rel=1e-6, abs=1e-6)
        assert pauses.max() == pytest.approx(r["pause_max_ms"], rel=1e-6)
        assert r["mutator_s"] + r["gc_s"] == pytest.approx(r["total_s"], rel=1e-9, abs=1e-9)
        assert r["fabric_bytes"] >= r["fabric_bytes_gc"]
    base = runs[runs.design == "baseline"]
    sem = runs[runs.design == "semeru"]
    assert (base.full_gcs > 0).all() and (base.csscs == 0).all(), "the baseline collects only by full GCs"
    assert (sem.csscs > 0).all()


def test_semeru_moves_fewer_bytes_in_gc_than_the_baseline(temps_runs):
    at25 = temps_runs[temps_runs.cache_pct == 25]
    sem, base = at25[at25.design == "semeru"][0], at25[at25.design == "baseline"][0]
    # the baseline's full GC pulls the evicted pages; Semeru's servers trace in place
    assert base["fabric_bytes_gc"] > 0
    assert sem["fabric_bytes_gc"] < base["fabric_bytes_gc"]
    assert sem["pages_fetched"] < base["pages_fetched"]
    r = mheap.ratios(temps_runs, "fabric_bytes_gc")
    assert r.dtype.names == ("workload", "cache_pct", "ratio")
    assert r[r.cache_pct == 25].ratio[0] > 1


def test_digests_equal_across_designs_and_caches(temps_runs, dsm_cluster_pool):
    assert len(set(int(d) for d in temps_runs.digest)) == 1
    assert int(temps_runs.digest[0]) != 0
    c = dsm_cluster_pool.get("shm", 3)
    for wl in ("buffers", "graph"):
        runs = c.mheap.compare(workloads=[wl], caches=[100, 25], designs=["semeru", "baseline", "no_msct"],
                              size=SIZES[wl], heap_mib=HEAP_MIB[wl], **SMALL)
        assert len(runs) == 6
        assert (runs.n_pauses > 0).all(), (wl, runs.n_pauses)
        assert len(set(int(d) for d in runs.digest)) == 1, (wl, runs.digest)
    # a different workload size keeps different data
    other = c.mheap.run("graph", "semeru", 100, size=9, heap_mib=2, **SMALL)
    assert int(other.digest[0]) != int(runs.digest[0])


def test_same_data_over_tcp(temps_runs, dsm_cluster_pool):
    """The same workload over tcp keeps the same data as over shm, under
    Semeru and the baseline, at 100% and 25% cache."""
    c = dsm_cluster_pool.get("tcp", 3)
    runs = c.mheap.compare(workloads=["temps"], caches=[100, 25], size=SIZES["temps"],
                          heap_mib=HEAP_MIB["temps"], **SMALL)
    assert set(int(d) for d in runs.digest) == {int(temps_runs.digest[0])}
    assert (runs[runs.design == "semeru"].csscs > 0).all()


def test_fetch_delay_is_paid_on_every_fetch(dsm_cluster_pool):
    """fetch_delay_us (a slower device than loopback) is added to every fetch
    request of either design (a readahead brings several pages in one): the
    run lasts at least requests x delay, and the data kept does not change."""
    c = dsm_cluster_pool.get("shm", 3)
    kw = dict(size=SIZES["temps"], heap_mib=HEAP_MIB["temps"], **SMALL)
    for design in ("semeru", "baseline"):
        plain = c.mheap.run("temps", design, 25, **kw)
        slow = c.mheap.run("temps", design, 25, fetch_delay_us=400, **kw)
        assert 0 < slow.fetch_requests[0] <= slow.pages_fetched[0]
        assert slow.total_s[0] >= slow.fetch_requests[0] * 400e-6
        assert int(slow.digest[0]) == int(plain.digest[0])


def test_colocation_and_batched_round_trips(dsm_cluster_pool):
    """The graph's regions reference each other: a memory server evacuates
    some of them into one (co-location); and its collections cost a few
    control round trips per server, counted in the record."""
    c = dsm_cluster_pool.get("shm", 3)
    r = c.mheap.run("graph", "semeru", 25, size=11, heap_mib=4, iters=6)
    assert r.csscs[0] > 0
    assert r.regions_colocated[0] > 0
    assert r.ctl_requests[0] > 0
    base = c.mheap.run("graph", "baseline", 25, size=11, heap_mib=4, iters=6)
    assert base.regions_colocated[0] == 0
    assert int(base.digest[0]) == int(r.digest[0])


def test_g1_like_baseline_marks_on_the_cpu(temps_runs, dsm_cluster_pool):
    """The G1-like baseline: CSSC pauses run on the CPU server along the
    marking a CPU thread did concurrently (pulling pages); no memory server
    traces, and the data kept is the same. (Its pauses evacuate live objects
    into the first region of a group, as Semeru's servers do, so regions
    may be co-located.)"""
    c = dsm_cluster_pool.get("shm", 3)
    g = c.mheap.run("temps", "g1", 25, size=SIZES["temps"], heap_mib=HEAP_MIB["temps"], **SMALL)
    assert g.design[0] == "g1"
    assert g.csscs[0] > 0
    assert g.bytes_traced_cpu[0] > 0 and g.bytes_traced_server[0] == 0
    assert int(g.digest[0]) == int(temps_runs.digest[0])
    sem = temps_runs[(temps_runs.design == "semeru") & (temps_runs.cache_pct == 25)][0]
    assert sem["bytes_traced_cpu"] == 0


def test_tracing_throughput_probe(dsm_cluster_pool):
    """Table 5 like for like: with the graph's pages evicted, the memory
    servers trace it (Semeru) or the CPU server marks it pulling pages
    (baseline); both report a throughput, and the probe changes no data."""
    c = dsm_cluster_pool.get("shm", 3)
    kw = dict(size=9, heap_mib=2, iters=2, probe=True)
    sem = c.mheap.run("graph", "semeru", 25, **kw)
    base = c.mheap.run("graph", "baseline", 25, **kw)
    assert sem.trace_mbps[0] > 0 and base.trace_mbps[0] > 0
    assert int(sem.digest[0]) == int(base.digest[0])
    plain = c.mheap.run("graph", "semeru", 25, size=9, heap_mib=2, iters=2)
    assert plain.trace_mbps[0] == 0 and int(plain.digest[0]) == int(sem.digest[0])


def test_gc_trigger_collects_before_the_heap_fills(dsm_cluster_pool):
    c = dsm_cluster_pool.get("shm", 3)
    plain = c.mheap.run("temps", "semeru", 100, size=SIZES["temps"], heap_mib=4)
    early = c.mheap.run("temps", "semeru", 100, size=SIZES["temps"], heap_mib=4, gc_trigger_pct=30)
    assert plain.trigger_gcs[0] == 0
    assert early.trigger_gcs[0] > 0
    assert early.n_pauses[0] > plain.n_pauses[0]
    assert int(early.digest[0]) == int(plain.digest[0])


def test_pause_plot_is_labelled(temps_runs, tmp_path):
    path = tmp_path / "pauses.png"
    fig = mheap.pause_plot(temps_runs, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = fig.axes[0]
    assert "lower is better" in ax.get_ylabel()
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"semeru", "baseline"}


def test_bad_arguments_are_refused_with_a_message(dsm_cluster_pool):
    c = dsm_cluster_pool.get("shm", 3)
    with pytest.raises(pydsm.InvalidArgument, match="workload must be one of"):
        c.mheap.run("sort")
    with pytest.raises(pydsm.InvalidArgument, match="design must be one of"):
        c.mheap.run("temps", "zgc")
    with pytest.raises(pydsm.InvalidArgument, match="cache_pct"):
        c.mheap.run("temps", "semeru", 0)
    with pytest.raises(pydsm.InvalidArgument, match="memory server"):
        c.mheap.run("temps", memory_nodes=[])
    # the daemon's own checks, reached directly
    with pytest.raises(pydsm.DsmError, match="semeru: app=sort refused: must be graph, temps or buffers"):
        c.run("semeru", pydsm.Placement(memory_nodes=c.nodes[1:]), nodes=[c.nodes[0]], app="sort")
    with pytest.raises(pydsm.DsmError, match="semeru: memory_nodes not given: must be a list"):
        c.run("semeru", nodes=[c.nodes[0]], app="temps")
    with pytest.raises(pydsm.DsmError, match="cannot create"):   # more than the servers hold
        c.mheap.run("temps", heap_mib=4096)
