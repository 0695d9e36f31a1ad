"""CoRM from Python: a daemon's store, objects as bytes and numpy, pointer
correction after compaction, release, figures per class, bad input."""
from __future__ import annotations

import numpy as np
import pytest

import pydsm
from pydsm.corm import CormPointer

FABRICS = [pytest.param("shm", marks=pytest.mark.shm), pytest.param("tcp", marks=pytest.mark.tcp)]


@pytest.mark.parametrize("fabric", FABRICS)
def test_corm_store(fabric, dsm_cluster):
    store = dsm_cluster.corm_store(node=dsm_cluster.nodes[0])
    p = store.alloc(32)
    assert p.node == dsm_cluster.nodes[0] and p.object_id != 0
    store.write(p, b"hello corm")
    assert store.read(p) == b"hello corm"
    assert store.direct_read(p) == b"hello corm"
    assert store.scan_read(p) == b"hello corm"
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
    forged = CormPointer(p.w0, p.w1 ^ (1 << 48))
    with pytest.raises(pydsm.InvalidArgument):
        store.read(forged)
    store.free(p)


@pytest.mark.parametrize("fabric", FABRICS)
def test_corm_compaction(fabric, dsm_cluster):
    store = dsm_cluster.corm_store(node=dsm_cluster.nodes[-1])
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
    for i, p in live:
        old = CormPointer(p.w0, p.w1)
        assert np.array_equal(np.frombuffer(store.get(p), np.uint8), np.full(150, i % 251, np.uint8))
        store.release(p)
        assert store.direct_read(p) == bytes([i % 251]) * 150
        del old
    assert store.usage()["alias_blocks"] == before["alias_blocks"]
    for _, p in live:
        store.free(p)


def test_corm_compaction_run_series(tmp_path):
    """The compaction run's throughput over time reaches the JSON as a series
    (reads per 5 ms, the compaction window shaded), the figure beside it,
    and `pydsm bench --plot` draws it."""
    from pydsm import bench, cli

    report = bench.run("corm", quick=True, extra_args=["--only", "run"], echo=False)
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
    figs = {f["name"]: f for f in report["figures"]}
    assert figs["corm_scan_read_during_compaction/shm"]["value"] > 0
    png = tmp_path / "run.png"
    assert bench.plot_series(report, str(png)) == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no series"):
        bench.plot_series(report, str(png), names=["nonesuch"])
    out = tmp_path / "cli.png"
    assert cli.main(["bench", "corm", "--quick", "--plot", str(out), "--", "--only", "run"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
