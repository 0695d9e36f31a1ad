"""The driver across many Cluster.local create/close cycles keeps nothing
per cycle: Python objects here (tracemalloc; a ctypes CDLL per daemon start
kept ~70 B each; the ~25 kB per cycle once reported did not reproduce), the C
side in tests/c/test_runtime_cycles.c (RSS, and LeakSanitizer in the
sanitizer build)."""
import gc
import tracemalloc

import pydsm


def test_create_close_cycles_keep_nothing():
    for _ in range(10):  # first-use caches
        with pydsm.Cluster.local(nodes=1, fabric="shm", partition="4MiB"):
            pass
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(60):
            with pydsm.Cluster.local(nodes=1, fabric="shm", partition="4MiB"):
                pass
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    stats = after.compare_to(before, "filename")
    grown = sum(s.size_diff for s in stats if "tracemalloc" not in s.traceback[0].filename)
    print(f"60 create/close cycles: Python heap {grown:+d} B")
    assert grown < 2048, [str(s) for s in stats[:5]]  # was ~4 kB per 60 cycles
