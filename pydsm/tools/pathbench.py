"""The driver's request path, measured: what a single operation from Python
costs next to the same operation from C in this process (the CFFI call and
pydsm's checks are the difference), and what a batch gains over single calls.

Each figure is measured ``reps`` times, ours and its anchor interleaved, and
reported as the median over the repetitions, its ratio the median of the
repetitions' own ratios (see :func:`driver_figures`), after a warm-up of
single calls. A repetition of single calls is the median over groups of the
group's mean per call (ucx_perftest's statistic, with the clock read per
group): a mean over all calls let one preemption of a few milliseconds move
a repetition of a few milliseconds by half."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import _lib


def _median(values: List[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def _per_call_us(fn: Callable[[], Any], group: int, groups: int) -> float:
    """µs per call of ``fn``: the median over ``groups`` groups of the
    group's mean over ``group`` calls."""
    per = np.empty(groups)
    clock = time.perf_counter
    for g in range(groups):
        t = clock()
        for _ in range(group):
            fn()
        per[g] = (clock() - t) / group
    return float(np.median(per)) * 1e6


def _warm_up(fn: Callable[[], Any], seconds: float) -> int:
    """Calls ``fn`` for ``seconds``; returns how many times."""
    calls = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()
        calls += 1
    return calls


def _c_per_call_us(cluster: Any, op: int, addr: int, group: int, groups: int) -> float:
    """The same single operation from C (the extension's timing loop), as
    :func:`_per_call_us` times it: one C call per group of ``group`` ops."""
    e = _lib.ext()
    per = np.empty(groups)
    ns = 0
    with cluster.session.in_use() as node:
        for g in range(groups):
            ns = e.lib._pydsm_time_ops(node, op, addr, group)
            if ns < 0:
                break
            per[g] = ns / group
    _lib.check(int(ns) if ns < 0 else 0, "timing loop", address=addr)
    return float(np.median(per)) / 1e3


def _listening(port: int) -> bool:
    """Is something listening on TCP ``port`` of this host? Read from
    /proc/net/tcp: a probing connect() would be taken by ucx_perftest's
    server for its client."""
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                cols = line.split()
                if int(cols[1].split(":")[1], 16) == port and cols[3] == "0A":
                    return True
    except OSError:
        pass
    return False


def tag_rtt_us(iters: int = 2000) -> Optional[float]:
    """ucx_perftest's tag round trip over tcp on loopback, in µs: twice its
    median one-way ``tag_lat`` for 8 bytes (the fabric benchmark's tcp
    anchor). None when ucx_perftest is not installed or does not run."""
    exe = shutil.which("ucx_perftest")
    if exe is None:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _lib.ucx_child_env("tcp", UCX_TLS="tcp,self", UCX_NET_DEVICES="lo")
    server = subprocess.Popen([exe, "-p", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not _listening(port) and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.005)
        out = subprocess.run([exe, "127.0.0.1", "-p", str(port), "-t", "tag_lat", "-s", "8", "-n", str(iters),
                              "-w", str(iters // 10 + 10), "-f"], env=env, capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    median = None
    for line in out.splitlines():
        cols = line.split()
        if len(cols) == 8:
            try:
                median = float(cols[1])   # the 50th percentile one-way latency, µs
            except ValueError:
                pass
    return 2 * median if median else None


def driver_figures(cluster: Any, fabric: str, quick: bool = True, reps: int = 3,
                   node: int = 0, label: str = "", tag_anchor: bool = True) -> List[Dict[str, Any]]:
    """Figures of the driver's path on ``cluster`` (over ``fabric``), to a word
    on daemon ``node``:

    - ``driver_fadd_8B_latency/F`` and ``driver_read_8B_latency/F``: µs per
      ``GlobalBuffer.fetch_add(1)`` / 8-byte ``GlobalBuffer.read()`` from
      Python; anchor: ``dsm_fetch_add`` / ``dsm_read`` from C in this process;
    - ``driver_fadd_batch_10k/F``: ops/s of one ``fetch_add_many`` of 10,000
      words; anchor: single ``fetch_add`` calls from Python (ops/s);
    - over tcp, ``driver_fadd_8B_vs_tag_rtt/tcp``: the same single
      ``fetch_add`` from Python against ucx_perftest's tag round trip on
      loopback (:func:`tag_rtt_us`), each repetition running one after the
      other (left out when ucx_perftest cannot run, or ``tag_anchor`` is
      false).

    ``label`` goes into each name before the fabric (``_blocking`` for a
    cluster whose daemons run blocking progress). Returns dicts with name,
    value and anchor_value (the medians of the repetitions), unit, anchor,
    ratio (the median of the repetitions' own ratios), better, and the
    repetitions (reps, anchor_reps); the word is checked for lost updates at
    the end.
    """
    e = _lib.ext()
    fast = fabric == "shm"
    # groups of ~0.1-0.3 ms of calls; C's groups on shm 10x longer, so that
    # the one C call per group (~0.2 us) stays ~2% of its time
    group, groups = (200, 25 if quick else 100) if fast else (20, 50 if quick else 200)
    c_group = group * 10 if fast else group
    n = group * groups
    batch, batches = 10000, 5
    buf = cluster.alloc(np.zeros(8, np.uint64), node=node)
    try:
        addr = buf.address
        read_buf = cluster.alloc(np.zeros(1, np.uint64), node=node)
        py_fadd: List[float] = []
        c_fadd: List[float] = []
        py_read: List[float] = []
        c_read: List[float] = []
        batch_rate: List[float] = []
        tag_rtt: List[Tuple[float, float]] = []   # each with the Python fetch_add of its repetition
        # Warm up first, as ucx_perftest does: for its first ~0.1 s a fresh
        # cluster's start-up work shares the cores, and a tcp target that
        # sees more runnable threads than cores sleeps between requests.
        done = _warm_up(lambda: buf.fetch_add(1), 0.25 if quick else 0.5)
        for _ in range(reps):
            py_fadd.append(_per_call_us(lambda: buf.fetch_add(1), group, groups))
            rtt = tag_rtt_us() if fabric == "tcp" and tag_anchor else None
            if rtt is not None:
                tag_rtt.append((py_fadd[-1], rtt))
            c_fadd.append(_c_per_call_us(cluster, e.lib.PYDSM_OP_FETCH_ADD, addr, c_group, groups))
            py_read.append(_per_call_us(read_buf.read, group, groups))
            c_read.append(_c_per_call_us(cluster, e.lib.PYDSM_OP_READ8, read_buf.address, c_group, groups))
            # the median of a few batches, as of the groups above
            zeros, took = np.zeros(batch, np.int64), []
            for _ in range(batches):
                t = time.perf_counter()
                buf.fetch_add_many(zeros, 1)
                took.append(time.perf_counter() - t)
            batch_rate.append(batch / _median(took))
            done += n + c_group * groups + batch * batches
        got = int(buf.read()[0])
        if got != done:
            raise AssertionError(f"driver path lost updates: the word holds {got}, expected {done}")
        read_buf.free()
    finally:
        buf.free()

    def fig(name: str, ours: List[float], unit: str, anchor: str, anchors: List[float],
            better: str) -> Dict[str, Any]:
        """The medians of the repetitions, and as the ratio the median of
        each repetition's ratio to the anchor measured beside it (as the
        benchmarks' report does)."""
        ratios = [x / a for x, a in zip(ours, anchors) if a > 0]
        return {"name": name, "value": _median(ours), "unit": unit, "anchor": anchor,
                "anchor_value": _median(anchors),
                "ratio": _median(ratios) if len(ratios) == len(ours) else None,
                "better": better, "reps": list(ours), "anchor_reps": list(anchors)}

    single_rate = [1e6 / v for v in py_fadd]
    against_ucx = [fig(f"driver_fadd_8B_vs_tag_rtt{label}/{fabric}", [us for us, _ in tag_rtt], "us",
                       "ucx_perftest tag_lat RTT", [rtt for _, rtt in tag_rtt], "lower")] if tag_rtt else []
    return [
        fig(f"driver_fadd_8B_latency{label}/{fabric}", py_fadd, "us",
            "dsm_fetch_add from C in the driver", c_fadd, "lower"),
        fig(f"driver_read_8B_latency{label}/{fabric}", py_read, "us",
            "dsm_read from C in the driver", c_read, "lower"),
        fig(f"driver_fadd_batch_10k{label}/{fabric}", batch_rate, "ops/s",
            "single fetch_add calls from Python", single_rate, "higher"),
    ] + against_ucx
