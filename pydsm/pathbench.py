"""The driver's request path, measured: what a single operation from Python
costs next to the same operation from C in this process (the CFFI call and
pydsm's checks are the difference), and what a batch gains over single calls.

Each figure is measured ``reps`` times, ours and its anchor interleaved, and
reported as the median over the repetitions (see :func:`driver_figures`)."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

import numpy as np

from . import _lib


def _median(values: List[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def _per_call_us(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def _c_per_call_us(cluster: Any, op: int, addr: int, n: int) -> float:
    """The same single operation ``n`` times from C (the extension's timing loop)."""
    e = _lib.ext()
    node = cluster._begin_call()
    try:
        ns = e.lib._pydsm_time_ops(node, op, addr, n)
    finally:
        cluster._end_call()
    _lib.check(int(ns) if ns < 0 else 0, "timing loop", address=addr)
    return ns / n / 1e3


def driver_figures(cluster: Any, fabric: str, quick: bool = True, reps: int = 3,
                   node: int = 0, label: str = "") -> List[Dict[str, Any]]:
    """Figures of the driver's path on ``cluster`` (over ``fabric``), to a word
    on daemon ``node``:

    - ``driver_fadd_8B_latency/F`` and ``driver_read_8B_latency/F``: µs per
      ``GlobalBuffer.fetch_add(1)`` / 8-byte ``GlobalBuffer.read()`` from
      Python; anchor: ``dsm_fetch_add`` / ``dsm_read`` from C in this process;
    - ``driver_fadd_batch_10k/F``: ops/s of one ``fetch_add_many`` of 10,000
      words; anchor: single ``fetch_add`` calls from Python (ops/s).

    ``label`` goes into each name before the fabric (``_blocking`` for a
    cluster whose daemons run blocking progress). Returns dicts with name,
    value, unit, anchor, anchor_value, ratio and better; the word is checked
    for lost updates at the end.
    """
    e = _lib.ext()
    fast = fabric == "shm"
    n = (5000 if quick else 20000) if fast else (300 if quick else 2000)
    batch = 10000
    buf = cluster.alloc(np.zeros(8, np.uint64), node=node)
    try:
        addr = buf.address
        read_buf = cluster.alloc(np.zeros(1, np.uint64), node=node)
        py_fadd, c_fadd, py_read, c_read, batch_rate = [], [], [], [], []
        done = 0
        for _ in range(reps):
            py_fadd.append(_per_call_us(lambda: buf.fetch_add(1), n))
            c_fadd.append(_c_per_call_us(cluster, e.lib.PYDSM_OP_FETCH_ADD, addr, n))
            py_read.append(_per_call_us(read_buf.read, n))
            c_read.append(_c_per_call_us(cluster, e.lib.PYDSM_OP_READ8, read_buf.address, n))
            t = time.perf_counter()
            buf.fetch_add_many(np.zeros(batch, np.int64), 1)
            batch_rate.append(batch / (time.perf_counter() - t))
            done += 2 * n + batch
        got = int(buf.read()[0])
        if got != done:
            raise AssertionError(f"driver path lost updates: the word holds {got}, expected {done}")
        read_buf.free()
    finally:
        buf.free()

    def fig(name: str, value: float, unit: str, anchor: str, anchor_value: float, better: str) -> Dict[str, Any]:
        return {"name": name, "value": value, "unit": unit, "anchor": anchor, "anchor_value": anchor_value,
                "ratio": value / anchor_value if anchor_value else None, "better": better}

    single_rate = [1e6 / v for v in py_fadd]
    return [
        fig(f"driver_fadd_8B_latency{label}/{fabric}", _median(py_fadd), "us",
            "dsm_fetch_add from C in the driver", _median(c_fadd), "lower"),
        fig(f"driver_read_8B_latency{label}/{fabric}", _median(py_read), "us",
            "dsm_read from C in the driver", _median(c_read), "lower"),
        fig(f"driver_fadd_batch_10k{label}/{fabric}", _median(batch_rate), "ops/s",
            "single fetch_add calls from Python", _median(single_rate), "higher"),
    ]
