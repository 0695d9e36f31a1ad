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
