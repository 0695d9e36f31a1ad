"""Semeru's managed heap from Python: run its workloads (a graph kept across
PageRank-like iterations, a temporaries-heavy stream, serialized buffers)
with GC on the memory servers or the CPU-only baseline, and get the
measurements back as numpy records; plot the pauses.

The work runs in C on one daemon, the CPU server (the registered workload
``"semeru"``, csrc/apps/semeru_run.c); the heap lives on the memory servers,
which trace and evacuate it under the Semeru design.

    >>> with pydsm.Cluster.local(nodes=3, fabric="tcp") as c:
    ...     runs = c.mheap.compare(workloads=["temps"], caches=[100, 25])
    ...     runs[["design", "cache_pct", "gc_s", "fabric_bytes_gc"]]
    ...     pydsm.mheap.pause_plot(runs, "pauses.png")
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .errors import InvalidArgument
from .workloads import Placement, Workloads

WORKLOADS = ("graph", "temps", "buffers")
#: semeru: memory servers trace and evacuate (CSSC pauses); baseline: the
#: same heap collected by CPU full GCs pulling pages; g1: the G1-like
#: baseline (a CPU thread marks concurrently pulling pages, pauses evacuate
#: region by region on the CPU server); no_msct: Semeru without continuous
#: tracing (every region traced in the pause).
DESIGNS = ("semeru", "baseline", "g1", "no_msct")

#: One run: what was run, then what it measured. ``pauses_ms`` holds an
#: array of every pause's length (ms), oldest first; ``regions_colocated``
#: counts regions a memory server evacuated into another one (regions that
#: reference each other put together), ``ctl_requests`` the control round
#: trips to the memory servers (batched: a few per server and collection).
RUN_DTYPE = np.dtype([
    ("workload", "U8"), ("design", "U8"), ("cache_pct", np.int32), ("repeat", np.int32),
    ("mutator_s", np.float64), ("gc_s", np.float64), ("total_s", np.float64),
    ("pages_fetched", np.int64), ("fetch_requests", np.int64), ("fabric_bytes", np.int64),
    ("fabric_bytes_gc", np.int64),
    ("full_gcs", np.int32), ("csscs", np.int32), ("trigger_gcs", np.int32), ("regions_dead", np.int32),
    ("regions_colocated", np.int32), ("ctl_requests", np.int64), ("n_pauses", np.int32),
    ("pause_max_ms", np.float64), ("bytes_traced_server", np.int64), ("bytes_traced_cpu", np.int64),
    ("trace_mbps", np.float64),
    ("digest", np.uint64), ("pauses_ms", object),
])

_COUNTS = ("pages_fetched", "fetch_requests", "fabric_bytes", "fabric_bytes_gc", "full_gcs", "csscs",
           "trigger_gcs",
           "regions_dead", "regions_colocated", "ctl_requests", "bytes_traced_server", "bytes_traced_cpu")


def _choice(what: str, value: Any, allowed: Sequence[Any]) -> Any:
    if value not in allowed:
        raise InvalidArgument(f"{what} must be one of {', '.join(map(str, allowed))}, not {value!r}")
    return value


class Mheap:
    """Semeru's managed heap on a cluster (``c.mheap``): run its workloads
    under each design and get numpy records (RUN_DTYPE)."""

    def __init__(self, workloads: Workloads) -> None:
        self.workloads = workloads
        self.session = workloads.session

    def __repr__(self) -> str:
        return f"<pydsm.Mheap of the cluster at {self.session.coordinator or '?'}>"

    def _nodes(self, cpu_node: Optional[int], memory_nodes: Optional[Sequence[int]]) -> Tuple[int, List[int]]:
        nodes = list(self.session.ranks)
        cpu = nodes[0] if cpu_node is None else int(cpu_node)
        mem = [n for n in nodes if n != cpu] if memory_nodes is None else [int(n) for n in memory_nodes]
        if not mem:
            raise InvalidArgument("the managed heap needs at least one memory server besides the CPU server "
                                  f"(nodes: {nodes})")
        return cpu, mem

    def run(self, workload: str = "graph", design: str = "semeru", cache_pct: int = 25, *,
            cpu_node: Optional[int] = None, memory_nodes: Optional[Sequence[int]] = None, heap_mib: int = 16,
            size: int = 0, iters: int = 5, order: str = "dfs", fetch_delay_us: int = 0,
            gc_trigger_pct: int = 0, probe: bool = False, repeat: int = 0,
            timeout: Optional[float] = None) -> np.recarray:
        """Run one workload under one design and cache size; one record (RUN_DTYPE).

        Args:
            workload: ``"graph"``, ``"temps"`` or ``"buffers"``.
            design: ``"semeru"``, ``"baseline"``, ``"g1"`` or ``"no_msct"`` (see DESIGNS).
            cache_pct: the CPU server's page cache, % of the heap (1..100).
            cpu_node: the daemon that runs the program (default: the first).
            memory_nodes: daemons holding the heap (default: all the others;
                the cluster needs at least two daemons).
            heap_mib: heap size, split over the memory servers.
            size: graph: log2 of the vertices; temps: chains; buffers: buffers
                (0 picks 12, 20000, 800).
            iters: graph iterations. order: ``"dfs"`` or ``"bfs"`` survivor layout.
            fetch_delay_us: added to every page fetch (a slower device).
            gc_trigger_pct: also collect when heap use passes this % (0: when full).
            probe: graph only: measure tracing throughput at the end (trace_mbps).
            repeat: stored in the record (which repetition this was).
        """
        _choice("workload", workload, WORKLOADS)
        _choice("design", design, DESIGNS)
        _choice("order", order, ("dfs", "bfs"))
        if not isinstance(cache_pct, (int, np.integer)) or not 1 <= cache_pct <= 100:
            raise InvalidArgument(f"cache_pct must be an int in 1..100, not {cache_pct!r}")
        cpu, mem = self._nodes(cpu_node, memory_nodes)
        res = self.workloads.run("semeru", Placement(memory_nodes=mem), nodes=[cpu], timeout=timeout,
                                 progress=False, app=workload, design=design, cache_pct=int(cache_pct),
                                 heap_mib=int(heap_mib), size=int(size), iters=int(iters), order=order,
                                 fetch_delay_us=int(fetch_delay_us), gc_trigger_pct=int(gc_trigger_pct),
                                 probe=int(bool(probe)))
        fig = res.figures
        pauses = np.asarray(fig["value"][fig["name"] == "pause_ms"], dtype=np.float64)
        val: Dict[str, float] = {name: float(res.per_node(name).value[0])
                                 for name in res.names if name != "pause_ms"}
        rec = np.zeros(1, dtype=RUN_DTYPE).view(np.recarray)
        rec["workload"], rec["design"], rec["cache_pct"], rec["repeat"] = workload, design, cache_pct, repeat
        for name in ("mutator_s", "gc_s", "total_s", "pause_max_ms", "trace_mbps") + _COUNTS:
            rec[name] = val[name]
        rec["n_pauses"] = int(val["pauses"])
        rec["digest"] = int(val["digest"])
        rec[0].pauses_ms = pauses
        return rec

    def compare(self, workloads: Iterable[str] = WORKLOADS, caches: Iterable[int] = (100, 50, 25),
                designs: Iterable[str] = ("semeru", "baseline"), repeats: int = 1,
                **kwargs: Any) -> np.recarray:
        """Every design on every workload at every cache size, interleaved (for
        each repeat, workload and cache, the designs one after the other), as
        records (RUN_DTYPE). ``kwargs`` go to :meth:`run`."""
        wls, pcts, ds = list(workloads), [int(c) for c in caches], list(designs)
        for w in wls:
            _choice("workload", w, WORKLOADS)
        for d in ds:
            _choice("design", d, DESIGNS)
        if not isinstance(repeats, int) or repeats < 1:
            raise InvalidArgument(f"repeats must be a positive int, not {repeats!r}")
        recs: List[np.recarray] = []
        for rep in range(repeats):
            for w in wls:
                for pct in pcts:
                    for d in ds:
                        recs.append(self.run(w, d, pct, repeat=rep, **kwargs))
        if not recs:
            return np.zeros(0, dtype=RUN_DTYPE).view(np.recarray)
        return np.concatenate(recs).view(np.recarray)


def ratios(runs: np.ndarray, field: str = "gc_s", over: str = "baseline", under: str = "semeru") -> np.recarray:
    """``over / under`` of ``field`` per (workload, cache_pct), the median
    over repeats: how many times the baseline's GC time (say) is Semeru's.
    Records (workload, cache_pct, ratio)."""
    if field not in (RUN_DTYPE.names or ()) or field in ("workload", "design", "pauses_ms"):
        raise InvalidArgument(f"field must be a measured field of RUN_DTYPE, not {field!r}")
    out = []
    for w in dict.fromkeys(runs["workload"]):
        for pct in dict.fromkeys(runs["cache_pct"][runs["workload"] == w]):
            sel = (runs["workload"] == w) & (runs["cache_pct"] == pct)
            a = runs[sel & (runs["design"] == over)]
            b = runs[sel & (runs["design"] == under)]
            per = [float(x[field]) / float(y[field]) for x in a for y in b
                   if x["repeat"] == y["repeat"] and float(y[field]) > 0]
            out.append((w, pct, float(np.median(per)) if per else float("nan")))
    return np.array(out, dtype=[("workload", "U8"), ("cache_pct", np.int32),
                                ("ratio", np.float64)]).view(np.recarray)


def pause_plot(runs: np.ndarray, path: Optional[str] = None, title: Optional[str] = None) -> Any:
    """Every pause of every run, one panel per workload: for each cache size
    the designs side by side (a dot per pause, a bar at the longest), ms on
    a log axis, lower is better. Returns the matplotlib Figure; saved to
    ``path`` when given."""
    from matplotlib.figure import Figure

    if len(runs) == 0:
        raise InvalidArgument("no runs to plot")
    workloads = list(dict.fromkeys(runs["workload"]))
    designs = list(dict.fromkeys(runs["design"]))
    colors = {"semeru": "#4C72B0", "baseline": "#C44E52", "g1": "#DD8452", "no_msct": "#8172B2"}
    fig = Figure(figsize=(4.2 * len(workloads) + 0.6, 3.6))
    axes = fig.subplots(1, len(workloads), squeeze=False)[0]
    width = 0.8 / max(1, len(designs))
    for ax, w in zip(axes, workloads):
        caches = sorted(dict.fromkeys(runs["cache_pct"][runs["workload"] == w]), reverse=True)
        for j, d in enumerate(designs):
            for i, pct in enumerate(caches):
                sel = runs[(runs["workload"] == w) & (runs["design"] == d) & (runs["cache_pct"] == pct)]
                ps = np.concatenate([np.asarray(p, dtype=np.float64) for p in sel["pauses_ms"]]) \
                    if len(sel) else np.zeros(0)
                x = i + (j - (len(designs) - 1) / 2) * width
                if len(ps):
                    ax.bar(x, ps.max(), width * 0.9, color=colors.get(d, "#999999"), alpha=0.35,
                           label=d if i == 0 else None)
                    jitter = (np.arange(len(ps)) % 7 - 3) / 7 * width * 0.6
                    ax.plot(x + jitter, ps, ".", color=colors.get(d, "#999999"), ms=3)
        ax.set_xticks(range(len(caches)), [f"{c}%" for c in caches])
        ax.set_xlabel("CPU cache (% of heap)")
        ax.set_yscale("log")
        ax.set_ylabel("pause (ms, lower is better)")
        ax.set_title(w, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no pauses", transform=ax.transAxes, ha="center", color="#666666")
    fig.suptitle(title or "GC pauses: every pause (dots) and the longest (bars)", fontsize=10)
    fig.tight_layout()
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=110)
    return fig
