"""CoRM from Python: a daemon's store, objects as bytes and numpy, pointer
correction after compaction, release, figures per class, bad input."""
from __future__ import annotations

import numpy as np
import pytest

import pydsm
from pydsm.compact import CompactPointer

FABRICS = [pytest.param("shm", marks=pytest.mark.shm), pytest.param("tcp", marks=pytest.mark.tcp)]


@pytest.mark.parametrize("fabric", FABRICS)
def test_compact_store(fabric, dsm_cluster):
    store = dsm_cluster.compact_store(node=dsm_cluster.nodes[0])
    p = store.alloc(32)
    assert p.node == dsm_cluster.nodes[0] and p.object_id != 0
    store.write(p, b"hello compact")
    assert store.read(p) == b"hello compact"
    assert store.direct_read(p) == b"hello compact"
    assert store.scan_read(p) == b"hello compact"
    arr = np.arange(20, dtype=np.float64)
    q = store.alloc(arr.nbytes)
    store.write(q, arr)
    assert np.array_equal(store.get_array(q, np.float64), arr)
    store.free(q)
    with pytest.raises(pydsm.BadAddress):
        store.get(q)
    with pytest.raises(pydsm.TooBig):
        store.alloc(1 << 20)
    with pytest.raises(pydsm.TooBig):
        store.write(p, b"x" * 100)   # p's class holds 40 bytes
    forged = CompactPointer(p.w0, p.w1 ^ (1 << 48))
    with pytest.raises(pydsm.InvalidArgument):
        store.read(forged)
    store.free(p)


def _with(p: CompactPointer, offset: int = None, object_id: int = None) -> CompactPointer:
    """p with another offset (w0 bits 0..39) or object ID (w1 bits 32..47)."""
    w0, w1 = p.w0, p.w1
    if offset is not None:
        w0 = (w0 & ~((1 << 40) - 1)) | offset
    if object_id is not None:
        w1 = (w1 & ~(0xFFFF << 32)) | (object_id << 32)
    return CompactPointer(w0, w1)


@pytest.mark.parametrize("fabric", FABRICS)
def test_compact_bad_input(fabric, dsm_cluster):
    """Every bad input the issue lists gets its exception with a message on
    every path (RPC, one-sided, fallback), and the store keeps serving:
    a wrong ID, a freed object, a block never allocated, a size over the
    class, a forged key, and a pointer past the store's range."""
    store = dsm_cluster.compact_store(node=dsm_cluster.nodes[0])
    p = store.alloc(100)
    store.write(p, b"kept" * 25)
    u = store.usage()
    wrong_id = _with(p, object_id=(p.object_id ^ 0x5555) or 1)
    never = _with(p, offset=12 << 20)        # inside the range, a block no one allocated
    past = _with(p, offset=40 << 20)         # past the (twice 16 MiB) virtual range
    forged = CompactPointer(p.w0, p.w1 ^ (1 << 48))
    gone = store.alloc(100)
    store.free(gone)
    cases = [("wrong ID", wrong_id, pydsm.BadAddress), ("never allocated", never, pydsm.BadAddress),
             ("past the range", past, pydsm.BadAddress), ("forged key", forged, pydsm.InvalidArgument),
             ("freed", gone, pydsm.BadAddress)]
    for what, bad, exc in cases:
        for call in (store.read, store.direct_read, store.get):
            with pytest.raises(exc) as e:
                call(CompactPointer(bad.w0, bad.w1))
            assert str(e.value), (what, call.__name__)
        with pytest.raises(exc):
            store.write(CompactPointer(bad.w0, bad.w1), b"x")
        with pytest.raises(exc):
            store.free(CompactPointer(bad.w0, bad.w1))
    with pytest.raises(pydsm.BadAddress):
        store.scan_read(wrong_id)
    # sizes: over the largest class at alloc, over the object's class at write
    with pytest.raises(pydsm.TooBig, match="allocate"):
        store.alloc(1 << 20)
    with pytest.raises(pydsm.TooBig, match="write"):
        store.write(p, b"y" * 200)
    with pytest.raises(pydsm.InvalidArgument, match="size"):
        store.alloc(-1)
    with pytest.raises(pydsm.InvalidArgument, match="CompactPointer"):
        store.read((p.w0, p.w1))
    # nothing was lost and the store still serves
    assert store.read(p) == b"kept" * 25 and store.direct_read(p) == b"kept" * 25
    after = store.usage()
    assert after["objects"] == u["objects"] and after["active_bytes"] == u["active_bytes"]
    q = store.alloc(8)
    store.write(q, b"12345678")
    assert store.get(q) == b"12345678"
    store.free(q)
    store.free(p)


@pytest.mark.parametrize("fabric", [pytest.param("shm", marks=pytest.mark.shm)])
def test_compact_usage_records(fabric, dsm_cluster):
    """The memory figures are numpy records: the totals one record, the
    classes one record each, and they agree with each other."""
    from pydsm.compact import USAGE_DTYPE, USAGE_TOTALS_DTYPE
    store = dsm_cluster.compact_store(node=dsm_cluster.nodes[0])
    base = store.usage()
    ptrs = [store.alloc(60) for _ in range(100)]
    u, by = store.usage(), store.usage_by_class()
    assert u.dtype == USAGE_TOTALS_DTYPE and by.dtype == USAGE_DTYPE
    assert u["objects"] - base["objects"] == 100
    assert by["objects"].sum() == u["objects"] and by["blocks"].sum() == u["blocks"]
    assert u["active_bytes"] == u["blocks"] * u["block_size"]
    row = by[by["objects"] > 0]
    assert ((row["fragmentation"] >= 0) & (row["fragmentation"] < 1)).all()
    for p in ptrs:
        store.free(p)
    assert store.usage()["objects"] == base["objects"]


@pytest.mark.parametrize("fabric", FABRICS)
def test_compact_compaction(fabric, dsm_cluster):
    store = dsm_cluster.compact_store(node=dsm_cluster.nodes[-1])
    before = store.usage()
    ptrs = [store.alloc(150) for _ in range(21 * 8)]   # 8 blocks of 192-byte slots
    for i, p in enumerate(ptrs):
        store.write(p, np.full(150, i % 251, dtype=np.uint8))
    live = [(i, p) for i, p in enumerate(ptrs) if i % 4 == 0]
    for i, p in enumerate(ptrs):
        if i % 4:
            store.free(p)
    frag = store.usage_by_class()
    assert frag.dtype.names == ("size_class", "slot_bytes", "blocks", "objects", "fragmentation")
    row = frag[frag["slot_bytes"] == 192][0]
    assert row["objects"] == len(live) and row["fragmentation"] > 0.5
    stats = store.compact(int(row["size_class"]))
    assert stats["merges"] > 0
    after = store.usage_by_class()
    assert after[int(row["size_class"])]["blocks"] < row["blocks"]
    # a batch of scan reads corrects the moved pointers in place, as get() does
    copies = [CompactPointer(p.w0, p.w1) for _, p in live]
    reads = store.read_many(copies, "scan", size=256)
    assert reads.tolist() == [bytes([i % 251]) * 150 for i, _ in live]
    assert stats["moved"] == 0 or any((c.w0, c.w1) != (p.w0, p.w1) for c, (_, p) in zip(copies, live))
    for i, p in live:
        old = CompactPointer(p.w0, p.w1)
        assert np.array_equal(np.frombuffer(store.get(p), np.uint8), np.full(150, i % 251, np.uint8))
        assert (copies[live.index((i, p))].w0, copies[live.index((i, p))].w1) == (p.w0, p.w1)
        store.release(p)
        assert store.direct_read(p) == bytes([i % 251]) * 150
        del old
    assert store.usage()["alias_blocks"] == before["alias_blocks"]
    for _, p in live:
        store.free(p)


@pytest.mark.parametrize("fabric", FABRICS)
def test_compact_read_many(fabric, dsm_cluster):
    """A batch of reads in one C call, timed inside C; the pointers are
    corrected in place, and a failure names the pointer's index."""
    store = dsm_cluster.compact_store(node=dsm_cluster.nodes[-1])
    ptrs = [store.alloc(24 + i % 3) for i in range(50)]
    want = [bytes([i]) * (24 + i % 3) for i in range(50)]
    for p, w in zip(ptrs, want):
        store.write(p, w)
    for how in ("direct", "scan", "get", "rpc"):
        reads = store.read_many(ptrs, how)
        assert len(reads) == 50 and reads.tolist() == want and reads[7] == want[7]
        assert list(reads.lengths) == [len(w) for w in want] and reads.data.shape == (50, 4096)
        assert 0 < reads.seconds and reads.ns_per_read == pytest.approx(reads.seconds * 1e9 / 50)
    assert "timed in C" in repr(store.read_many(ptrs[:2], "direct", size=64))
    assert len(store.read_many([], "get")) == 0
    freed = ptrs.pop(10)
    store.free(freed)
    with pytest.raises(pydsm.BadAddress, match="pointer 3 of 4"):
        store.read_many(ptrs[7:10] + [freed], "direct")
    with pytest.raises(pydsm.InvalidArgument, match="how must be one of"):
        store.read_many(ptrs, "fast")
    with pytest.raises(pydsm.InvalidArgument):
        store.read_many([ptrs[0], b"not a pointer"], "get")   # type: ignore[list-item]
    with pytest.raises(pydsm.TooBig):
        store.read_many(ptrs[:1], "direct", size=8)
    for p in ptrs:
        store.free(p)


def _host_interrupts(rows):
    """Each /proc/interrupts row named (e.g. "TLB:") summed over the CPUs,
    0 for a row the host lacks."""
    counts = dict.fromkeys(rows, 0)
    with open("/proc/interrupts") as f:
        for line in f:
            name, _, rest = line.strip().partition(" ")
            if name in counts:
                for word in rest.split():
                    if not word.isdigit():
                        break
                    counts[name] += int(word)
    return counts


def test_compact_compaction_run_series(tmp_path):
    """The compaction run's throughput over time reaches the JSON as a series
    (reads per 5 ms, the compaction window shaded), the figure beside it,
    and `pydsm bench --plot` draws it."""
    from pydsm.tools import bench, cli

    irq_rows = ("TLB:", "RES:", "CAL:")
    irq_before = _host_interrupts(irq_rows)
    report = bench.run("corm", quick=True, extra_args=["--only", "run"], echo=False)
    irq_after = _host_interrupts(irq_rows)
    series = {s["name"]: s for s in report["series"]}
    assert set(series) == {"corm_scan_read_over_time/shm", "corm_scan_read_over_time/tcp"}
    for s in series.values():
        x, y = np.array(s["x"]), np.array(s["y"])
        assert s["better"] == "higher" and s["y_unit"] == "reads/s" and len(x) == len(y) > 10
        lo, hi = s["shade"]
        assert 0 < lo < hi <= x[-1] + 5
        # the scan_read client kept reading while the store compacted
        assert y[(x >= lo) & (x < hi)].sum() > 0
        tr = s["name"].rsplit("/", 1)[1]
        run = report["env"][f"compaction_run_{tr}"]
        assert run["merges"] > 0 and abs(run["ms"] - (hi - lo)) < 1.0
        # no unavailability: every scan_read while the store compacted
        # returned its object (none failed or came back wrong), the series
        # counts exactly the reads the run counted, and compaction freed blocks
        assert run["failed_reads"] == 0
        step = x[1] - x[0]                      # ms per bucket; y is reads/s
        b0, b1 = int(lo // step), int(np.ceil(hi / step))
        assert round(y[b0:b1].sum() * step / 1000) == run["reads_during"] > 0
        assert round(y[1:b0].sum() * step / 1000) == run["reads_before"] > 0   # bucket 0 warms up
        assert run["blocks_after"] < run["blocks_before"]
        # where the server's CPU went per read: over tcp each read is a get
        # the server's progress thread wakes for (at most once a read, give
        # or take a stray message); over shm a read is a load from the
        # mapping and wakes nobody: the server wakes only for the few
        # reads that met a locked object (an RPC) and, while it compacts,
        # for the answers to its remap notices
        for kind, acct in report["env"][f"compaction_run_breakdown_{tr}"].items():
            assert acct["reads"] > 0, kind
            if tr == "tcp":
                assert 0 < acct["server_wakeups"] <= acct["reads"] + 50, (kind, acct)
                assert acct["server_progress_cpu_us_per_read"] > 0, (kind, acct)
            else:
                notices = run["remap_notices"] if kind == "compacting" else 0
                assert acct["server_wakeups"] <= acct["scan_rpcs"] + notices + 50, (kind, acct)
            # how long the server's progress thread and the reader waited, ready,
            # for a CPU (the kernel's run delay, counted as each wait ends; 0
            # where the kernel keeps none): no longer than the windows lasted,
            # give or take the waits that straddle their edges and rounding
            wall_us = acct["reads"] / acct["reads_per_s"] * 1e6
            for delay in ("server_progress_run_delay_us_per_read", "reader_run_delay_us_per_read"):
                assert 0 <= acct[delay] * acct["reads"] <= 1.05 * wall_us + 5000, (kind, delay, acct)
            assert acct["server_progress_faults"] >= 0, (kind, acct)
    figs = {f["name"]: f for f in report["figures"]}
    assert figs["corm_scan_read_during_compaction/shm"]["value"] > 0
    # the control windows, a thread spinning where the other windows compact,
    # then spinning and remapping pages of its own as often as the compaction
    # merged blocks so far (against the spinner): paced near that rate, far
    # below what an unpaced loop remaps
    spinner = figs["corm_scan_read_beside_a_spinner/shm"]
    assert spinner["value"] > 0 and spinner["anchor_value"] > 0 and len(spinner["reps"]) == 16
    remaps = figs["corm_scan_read_beside_remaps/shm"]
    assert remaps["anchor_value"] == spinner["value"] and len(remaps["reps"]) == 16
    # the host's interrupts between CPUs, counted per window: the windows
    # are parts of the run, so together they count no more than the host
    # took over the whole run (rows this host lacks count 0)
    for key, row in zip(("tlb_shootdowns", "resched_ipis", "call_ipis"), irq_rows):
        counted = sum(acct[key] for tr in ("shm", "tcp")
                      for acct in report["env"][f"compaction_run_breakdown_{tr}"].values())
        assert 0 <= counted <= irq_after[row] - irq_before[row], (key, counted)
    for tr in ("shm", "tcp"):
        run = report["env"][f"compaction_run_{tr}"]
        merges_per_ms = run["merges_per_ms_compacting"]
        assert 0.5 * merges_per_ms < run["remaps_per_ms_control"] < 1.5 * merges_per_ms
        breakdown = report["env"][f"compaction_run_breakdown_{tr}"]
        assert set(breakdown) == {"quiet", "compacting", "spinner", "remapper"}
    png = tmp_path / "run.png"
    assert bench.plot_series(report, str(png)) == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no series"):
        bench.plot_series(report, str(png), names=["nonesuch"])
    out = tmp_path / "cli.png"
    assert cli.main(["bench", "corm", "--quick", "--plot", str(out), "--", "--only", "run"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compact_throughput_split():
    """Beside each uniform YCSB ratio the JSON carries what a read and a
    write cost in each mode (timed runs) and the ratio they give: the quotient
    of the modes' mean op costs, never above the bound with free direct reads
    (RPC mode's cost over the writes alone)."""
    from pydsm.tools import bench

    report = bench.run("corm", quick=True, extra_args=["--only", "throughput"], echo=False)
    figs = {f["name"]: f for f in report["figures"]}
    for tr in ("shm", "tcp"):
        for mix, fig in (("50_50", "corm_direct_read_vs_rpc"), ("95_5", "corm_direct_read_vs_rpc_95_5")):
            sp = report["env"][f"ycsb_split_{mix}_uniform_{tr}"]
            f, t = sp["read_fraction"], sp["us_per_op"]
            assert f == int(mix.split("_")[0]) / 100
            assert all(t[k] > 0 for k in ("rpc_read", "rpc_write", "direct_read", "direct_write")), t
            rpc_op = f * t["rpc_read"] + (1 - f) * t["rpc_write"]
            direct_op = f * t["direct_read"] + (1 - f) * t["direct_write"]
            assert sp["ratio_predicted"] == pytest.approx(rpc_op / direct_op, rel=2e-3)
            assert sp["ratio_bound_free_direct_reads"] == pytest.approx(rpc_op / ((1 - f) * t["direct_write"]),
                                                                        rel=2e-3)
            assert sp["ratio_bound_free_direct_reads"] >= sp["ratio_predicted"]
            assert sp["ratio_measured"] == pytest.approx(figs[f"{fig}/{tr}"]["ratio"], rel=2e-3)


def test_compact_memory_figures():
    """The active-memory figures: for 32 B to 2 KiB objects and 50/75/90%
    freed, CoRM-16, CoRM-8 and CoRM-0 (Mesh) against no compaction and the
    ideal compactor. No compactor beats the ideal or does worse than none,
    and the two headlines are the 75% rows they name."""
    from pydsm.tools import bench

    report = bench.run("corm", quick=True, extra_args=["--only", "memory"], echo=False)
    figs = {f["name"]: f for f in report["figures"]}
    for size in ("32B", "256B", "1000B", "2KiB"):
        for pct in (50, 75, 90):
            ideal = figs[f"corm16_vs_ideal_{size}_{pct}pct"]
            none = figs[f"corm16_vs_none_{size}_{pct}pct"]
            c8 = figs[f"corm8_vs_none_{size}_{pct}pct"]
            mesh = figs[f"corm16_vs_mesh_{size}_{pct}pct"]
            c16 = ideal["value"]
            assert none["value"] == c16 == mesh["value"] and ideal["better"] == "lower"
            assert 0 < ideal["anchor_value"] <= c16 <= none["anchor_value"], (size, pct)
            assert ideal["anchor_value"] <= c8["value"] <= c8["anchor_value"] == none["anchor_value"], (size, pct)
            assert ideal["anchor_value"] <= mesh["anchor_value"] <= none["anchor_value"], (size, pct)
            # freeing more leaves less live data: the ideal shrinks
            prev = {75: 50, 90: 75}.get(pct)
            if prev:
                assert ideal["anchor_value"] <= figs[f"corm16_vs_ideal_{size}_{prev}pct"]["anchor_value"]
    for head, row in (("corm16_vs_ideal_2KiB", "corm16_vs_ideal_2KiB_75pct"),
                      ("corm16_vs_none_75pct", "corm16_vs_none_32B_75pct")):
        assert (figs[head]["value"], figs[head]["anchor_value"]) == (figs[row]["value"], figs[row]["anchor_value"])
