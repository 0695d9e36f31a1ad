"""``pydsm demo``: start a local cluster, run every experiment that exists in
quick mode, print one results table and write plots to ``results/``.

It grows as mechanisms land: each experiment is a function below that adds
rows; benchmark programs are found by name, and missing ones are listed as
skipped rather than failing the demo."""
from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
import re
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from . import bench as _bench
from ..cluster import Cluster, Placement
from ..units import format_value, render_table


#: Benchmark figures printed in the demo's table: the ones the issues name
#: (each mechanism's headlines), and the pause ceiling that bounds the
#: fetch-and-add ratios on this machine.
#: Every figure still goes to results/demo.json and results/table.txt.
#: runs behind each benchmark figure in quick mode (the full mode's default)
HEADLINE_RUNS = 5
#: runs behind each progress-mode figure (the bench's most)
PROGRESS_RUNS = 15
#: us added to every page fetch in the managed heap's second run over tcp,
#: standing in for a device slower than loopback (the paper's NVMe-oF)
SEMERU_DEVICE_DELAY_US = 10
HEADLINE = re.compile(r"^(get|put|fadd|cas|am)_8B_latency/|^am_(8|4096)B_vs_ucx_floor(_delivering)?/|^am_8B_rate_vs_ucx_floor/|^(get|put|am)_(8|4096)B_rate/|^(get|put)_8B_rate_batched/|^(get|put)_1MiB_bw/|"
                      r"^am_4096B_latency/|^bootstrap_|^driver_|^heap_(fadd|read)_8B_latency/|"
                      r"^fetch_add_(1|16)obj_(uniform|zipf)$|^fetch_add_(1|16)obj_uniform/pause_ceiling$|"
                      r"^kv_.*_w5$|^memcached_|^progress_adaptive_vs_best/|^echo_vs_(naive|windowed)_rpc/|^windowed_rpc_predicted/|^echo_vs_mpi/|^sssp_vs_|"
                      r"^(kv|gemm|dataframe|socialnet)_own_vs_(dir|own)/tcp$|^dataframe_own_per_chunk_vs_dir/tcp$|^own_vs_dir_geomean(_vs_predicted)?/tcp$|"
                      r"^(kv|gemm|dataframe|socialnet)_(own|dir)_time_vs_predicted(_loaded)?/tcp$|^own_1node_(vs_original|added_ns)/|"
                      r"^local_deref_cycles$|^mutex_deleg_vs_cas/|"
                      r"^corm_direct_read_vs_|^corm_server_cpu_bound_vs_rpc/|^corm16_vs_|"
                      r"^semeru_(gc_time|total)_25pct$|^semeru_(gc_time|total)_vs_g1_(25|50)pct/|^semeru_g1_vs_stw_total_(100|50|25)pct/(tcp|shm)(\+\d+us)?$|"
                      r"^semeru_gc_traffic_bytes_25pct/tcp$|^semeru_total_vs_g1_gc_free_bound_25pct/tcp$|^semeru_table3_|^semeru_g1_marks_finished/tcp$|^semeru_trace_mbps|"
                      r"^loco_(barrier_vs_mpi|lock_vs_mpi_win|transactions_vs_mpi|kv_get_vs_redis|kv_fence_cost)/|"
                      r"^kv5/")


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def run_ratios(reps: Optional[Sequence[float]], anchor_reps: Optional[Sequence[float]]) -> Optional[List[float]]:
    """Each run's ratio to the anchor measured beside it; None unless every
    run has its anchor."""
    if not reps or not anchor_reps or len(anchor_reps) != len(reps) or not all(a > 0 for a in anchor_reps):
        return None
    return [float(x) / float(a) for x, a in zip(reps, anchor_reps)]


def spread(reps: Optional[Sequence[float]], anchor_reps: Optional[Sequence[float]],
           ratios: Optional[Sequence[float]] = None) -> Dict[str, Any]:
    """What a figure's repetitions add to its row: ``runs``, the runs
    themselves, and ``ratio_spread`` [min, max] of each run's ratio to the
    anchor measured beside it (where every run has one; ``ratios`` when the
    caller already has them from ``run_ratios``). Nothing for a figure
    measured once."""
    if not reps:
        return {}
    out: Dict[str, Any] = {"runs": len(reps), "reps": [float(x) for x in reps]}
    if anchor_reps and len(anchor_reps) == len(reps):
        out["anchor_reps"] = [float(x) for x in anchor_reps]
    if ratios is None:
        ratios = run_ratios(reps, anchor_reps)
    if ratios:
        out["ratio_spread"] = [min(ratios), max(ratios)]
    return out


class Demo:
    """Collects figures (rows), notes and plots while the experiments run."""

    def __init__(self, results_dir: str, nodes: int = 3, quick: bool = True) -> None:
        self.results_dir = results_dir
        self.nodes = nodes
        self.quick = quick
        self.rows: List[Dict[str, Any]] = []
        self.notes: List[str] = []
        self.failures: List[str] = []
        self.plots: List[str] = []
        self.progress: Any = None   # a bar over the steps, set by main()

    def add(self, source: str, name: str, value: float, unit: str, anchor: str = "",
            anchor_value: Optional[float] = None, ratio: Optional[float] = None,
            better: str = "", reps: Optional[Sequence[float]] = None,
            anchor_reps: Optional[Sequence[float]] = None) -> None:
        """One figure; a median over repetitions brings them (``reps``, and
        ``anchor_reps`` measured beside each), and the row keeps them with
        the number of runs and the spread of the per-run ratio. Without a
        ratio given, it is the median of the runs' own ratios where every
        run has its anchor, else value / anchor_value."""
        ratios = run_ratios(reps, anchor_reps)
        runs = spread(reps, anchor_reps, ratios)
        if ratio is None and ratios:
            ratio = float(np.median(ratios))
        elif ratio is None and anchor_value:
            ratio = value / anchor_value
        row: Dict[str, Any] = {"source": source, "name": name, "value": float(value), "unit": unit,
                               "anchor": anchor, "anchor_value": anchor_value, "ratio": ratio,
                               "better": better}
        row.update(runs)
        self.rows.append(row)

    def step(self, title: str, fn: Callable[[], None]) -> None:
        if self.progress is not None:
            self.progress.set_description_str(f"demo: {title}")
        _say(f"{title} ...")
        t0 = time.monotonic()
        try:
            fn()
        except Exception as exc:  # one failed experiment must not hide the others
            self.failures.append(f"{title}: {type(exc).__name__}: {exc}")
            _say(f"{title} FAILED: {type(exc).__name__}: {exc}")
            if os.environ.get("PYDSM_DEBUG"):
                traceback.print_exc()
        else:
            _say(f"{title} done in {time.monotonic() - t0:.1f} s")
        finally:
            if self.progress is not None:
                self.progress.update(1)

    # ------------------------------------------------------------ experiments
    def cluster_experiments(self, fabric: str, nodes: int) -> None:
        """Bootstrap time, numpy round trip, atomics and built-in workloads on one fabric."""
        t0 = time.monotonic()
        with Cluster.local(nodes=nodes, fabric=fabric, partition="64MiB") as c:
            boot = time.monotonic() - t0
            self.add(f"cluster/{fabric}", f"bootstrap_{nodes}_nodes/{fabric}", boot * 1e3, "ms",
                     better="lower")
            # numpy round trip through global memory on another node
            data = np.random.default_rng(1).standard_normal((256, 512))  # 1 MiB
            buf = c.alloc(data, node=nodes - 1)
            reps = 20 if self.quick else 100

            def per_call(fn: Callable[[], Any]) -> float:
                # the median call after a first one (which maps and faults in what the rest reuse)
                fn()
                times = []
                for _ in range(reps):
                    t = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t)
                return float(np.median(times))

            w = per_call(lambda: buf.write(data))
            r = per_call(buf.read)
            if not np.array_equal(buf.read(), data):
                raise AssertionError("numpy round trip returned different data")
            buf.free()
            gib = data.nbytes / 2 ** 30
            self.add(f"cluster/{fabric}", f"driver_write_1MiB/{fabric}", gib / w, "GiB/s", better="higher")
            self.add(f"cluster/{fabric}", f"driver_read_1MiB/{fabric}", gib / r, "GiB/s", better="higher")
            # the driver's path: single operations from Python against the
            # same from C in this process, and a batch against single calls
            from .pathbench import driver_figures
            figs = driver_figures(c, fabric, quick=self.quick, node=nodes - 1 if nodes > 1 else 0)
            if fabric == "tcp":
                # the same against daemons that sleep between requests (tcp's
                # default lingers after each, so the driver's next one wakes
                # nobody): what each operation costs when the target wakes
                with Cluster.local(nodes=2, fabric=fabric, partition="16MiB", progress="blocking") as h:
                    # its two latencies (a batch waits once, whatever the progress)
                    figs += driver_figures(h, fabric, quick=self.quick, node=1, label="_blocking",
                                           tag_anchor=False)[:2]
            for fig in figs:
                self.add(f"cluster/{fabric}", fig["name"], fig["value"], fig["unit"], fig["anchor"],
                         fig["anchor_value"], fig["ratio"], fig["better"], fig["reps"], fig["anchor_reps"])
            counter = c.alloc(np.zeros(8, np.uint64), node=0)
            # the fetch_add workload, checked for lost updates, on as many
            # nodes as the host has cores: more busy threads than cores would
            # measure the scheduler (Result says so when it happens)
            from ..result import host_cores
            run_on = list(range(max(1, min(nodes, host_cores()))))
            iters = 2000 if self.quick else 100000
            res = c.run("fetch_add", Placement(threads=1), nodes=run_on, counter=counter, iters=iters, progress=True)
            total = int(counter.read(np.uint64)[0])
            expect = iters * len(run_on)
            if total != expect:
                raise AssertionError(f"fetch_add workload lost updates: counter {total}, expected {expect}")
            if res.oversubscribed:
                self.notes.append(f"fetch_add on {fabric}: {res.busy_threads} busy threads on {res.cores} cores "
                                  f"(oversubscribed): its latency includes waiting for a core")
            # Result's rate is all ops over the slowest node's time
            self.add(f"workload/{fabric}", f"fetch_add_ops_per_sec/{fabric}", res["ops_per_sec"],
                     "ops/s", better="higher")
            if "mean_latency_us" in res:
                self.add(f"workload/{fabric}", f"fetch_add_mean_latency/{fabric}",
                         res["mean_latency_us"], "us", better="lower")
            path = os.path.join(self.results_dir, f"fetch_add_{fabric}.png")
            import matplotlib.pyplot as plt
            plt.close(res.plot(path=path, title=f"fetch_add on {len(run_on)} nodes over {fabric}"))
            self.plots.append(path)
            res.to_json(os.path.join(self.results_dir, f"fetch_add_{fabric}.json"))
            if nodes >= 2 and "echo" in c.workloads():
                er = c.run("echo", nodes=[0], target=1, iters=500 if self.quick else 20000)
                self.add(f"workload/{fabric}", f"am_round_trip_latency/{fabric}",
                         er["mean_latency_us"], "us", better="lower")
            counter.free()

    @staticmethod
    def benchmark_names(only: Optional[List[str]] = None) -> List[str]:
        """The benchmarks the demo tries (known or built; ``only`` filters)."""
        names = list(dict.fromkeys(list(_bench.KNOWN_BENCHMARKS) + _bench.available()))
        if only is not None:
            names = [n for n in names if n in only] + [n for n in only if n not in names]
        return names

    def benchmarks(self, only: Optional[List[str]] = None) -> None:
        for name in self.benchmark_names(only):
            if name not in _bench.available():
                self.notes.append(f"benchmark {name!r} skipped: dsm-bench-{name} is not built yet")
                continue

            def one(name: str = name) -> None:
                # every headline a median of at least HEADLINE_RUNS interleaved runs, quick or not
                rep = _bench.run(name, quick=self.quick,
                                 json_path=os.path.join(self.results_dir, f"bench_{name}.json"),
                                 extra_args=["--runs", str(HEADLINE_RUNS)] if self.quick else None)
                self.add_report(f"bench/{name}", rep)

            self.step(f"benchmark {name}{' (quick)' if self.quick else ''}", one)
            if name == "fabric":
                self.step(f"benchmark fabric --only progress{' (quick)' if self.quick else ''}",
                          self.progress_comparison)
            if name == "trust":
                self.step(f"benchmark trust --only memcached_progress{' (quick)' if self.quick else ''}",
                          self.memcached_progress_comparison)
            if name == "semeru":
                self.step(f"benchmark semeru --fetch-delay-us {SEMERU_DEVICE_DELAY_US}"
                          f"{' (quick)' if self.quick else ''}", self.semeru_device_comparison)

    def progress_comparison(self) -> None:
        """Which progress mode a tcp target should run: adaptive beside the
        better of hybrid and blocking, idle and beside two busy processes
        (asked for by name only, as it loads the host for a while)."""
        # 15 runs, quick or not: a cell's two fixed modes differ by up to 1.3x
        # between runs on a loaded host, and the control shows it
        extra = ["--only", "progress", "--runs", str(PROGRESS_RUNS)]
        rep = _bench.run("fabric", quick=self.quick, extra_args=extra,
                         json_path=os.path.join(self.results_dir, "bench_fabric_progress.json"))
        self.add_report("bench/fabric-progress", rep)

    def memcached_progress_comparison(self) -> None:
        """How the memcached server's idle workers should wait, at depth 1:
        adaptive beside the better of hybrid and blocking, idle and beside
        two busy processes (asked for by name only, as the fabric's)."""
        extra = ["--only", "memcached_progress", "--runs", str(HEADLINE_RUNS)]
        rep = _bench.run("trust", quick=self.quick, extra_args=extra,
                         json_path=os.path.join(self.results_dir, "bench_trust_memcached_progress.json"))
        self.add_report("bench/trust-memcached-progress", rep)

    def semeru_device_comparison(self) -> None:
        """The managed heap's collectors once more over tcp with every page
        fetch made slower, as a device would be: how much of Semeru's lead
        over G1 depends on what a fetch costs (its figures name their fabric
        tcp+Nus)."""
        extra = ["--transport", "tcp", "--fetch-delay-us", str(SEMERU_DEVICE_DELAY_US)]
        if self.quick:
            extra += ["--runs", str(HEADLINE_RUNS)]
        rep = _bench.run("semeru", quick=self.quick, extra_args=extra,
                         json_path=os.path.join(self.results_dir, "bench_semeru_device.json"))
        self.add_report("bench/semeru-device", rep)

    def add_report(self, source: str, rep: Dict[str, Any]) -> None:
        """Every figure of a benchmark's JSON report, as it wrote it."""
        for fig in rep["figures"]:
            self.add(source, str(fig.get("name")), float(fig.get("value", float("nan"))),
                     str(fig.get("unit", "")), str(fig.get("anchor") or ""), fig.get("anchor_value"),
                     fig.get("ratio"), str(fig.get("better", "")), fig.get("reps"), fig.get("anchor_reps"))

    # ----------------------------------------------------------------- output
    def table(self, headline_only: bool = False) -> str:
        """The figures as a text table; headline_only keeps the cluster
        experiments and the benchmark figures the issues name."""
        headers = ["figure", "value", "unit", "anchor", "anchor value", "ratio", "runs", "ratio min-max", "source"]
        rows = []
        for r in self.rows:
            if headline_only and r["source"].startswith("bench/") and not HEADLINE.search(r["name"]):
                continue
            lo_hi = r.get("ratio_spread")
            rows.append([r["name"], format_value(r["value"]), r["unit"], r["anchor"] or "-",
                         format_value(r["anchor_value"]) if r["anchor_value"] is not None else "-",
                         f"{r['ratio']:.2f}" if isinstance(r["ratio"], (int, float)) else "-",
                         str(r.get("runs", "-")), f"{lo_hi[0]:.2f}-{lo_hi[1]:.2f}" if lo_hi else "-",
                         r["source"]])
        return render_table(headers, rows, "lrllrrrrl")

    def plot_ratios(self) -> None:
        """One horizontal bar chart per source (results/ratios_*.png) of each
        figure's advantage over its anchor: > 1 is always better, whether the
        figure is a rate (higher better) or a latency (lower better); bars
        that lose to their anchor are drawn in another colour."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sources: Dict[str, List[Dict[str, Any]]] = {}
        for r in self.rows:
            if advantage(r["ratio"], r["better"]) is not None:
                sources.setdefault(r["source"], []).append(r)
        for source, rows in sources.items():
            adv = [a for a in (advantage(r["ratio"], r["better"]) for r in rows) if a is not None]
            fig, ax = plt.subplots(figsize=(8, min(40.0, 0.2 * len(rows) + 1.5)))
            ax.barh([r["name"] for r in rows], adv, color=[bar_colour(a) for a in adv])
            ax.axvline(1.0, color="k", lw=0.8)
            ax.set_xscale("log")
            ax.tick_params(axis="y", labelsize=7 if len(rows) > 30 else 9)
            ax.set_xlabel("advantage over the anchor measured in the same run "
                          "(log scale; > 1 is better, green wins, red loses)")
            ax.set_title(source)
            ax.invert_yaxis()
            fig.tight_layout()
            path = os.path.join(self.results_dir, "ratios_" + source.replace("/", "_") + ".png")
            fig.savefig(path, dpi=100)
            plt.close(fig)
            self.plots.append(path)


#: Bar colours of the ratio plots: a win over the anchor, and a loss.
WIN_COLOUR, LOSS_COLOUR = "#55A868", "#C44E52"


def advantage(ratio: Any, better: str) -> Optional[float]:
    """A figure's ratio to its anchor turned so that > 1 always means better:
    the ratio itself when higher is better, its inverse when lower is better;
    None when there is no positive ratio or no direction to read it by."""
    if not isinstance(ratio, (int, float)) or ratio <= 0:
        return None
    if better == "higher":
        return float(ratio)
    if better == "lower":
        return 1.0 / float(ratio)
    return None


def bar_colour(adv: float) -> str:
    """The colour of a bar of advantage ``adv`` (see advantage())."""
    return WIN_COLOUR if adv >= 1.0 else LOSS_COLOUR


def cpu_times(stat_path: str = "/proc/stat") -> Optional[List[int]]:
    """The host's CPU time so far, in ticks, by kind (the "cpu" line of
    /proc/stat: user, nice, system, idle, iowait, irq, softirq, steal, ...);
    None where there is no such file."""
    try:
        with open(stat_path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    return [int(x) for x in fields[1:]]


def steal_share(before: Optional[Sequence[int]], after: Optional[Sequence[int]]) -> Optional[float]:
    """The share of the host's CPU time the hypervisor gave to others
    between two cpu_times() readings (0..1; None if unknown). On a shared
    virtual machine a benchmark run while it is high measures the
    neighbours as much as the code: the figures' provenance says so."""
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    # guest time is already inside user and nice: count the first 8 kinds
    delta = [b - a for a, b in zip(before[:8], after[:8])]
    total = sum(delta)
    return delta[7] / total if total > 0 else None


HALT_POLL_PATH = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"


def guest_halt_poll_ns(path: str = HALT_POLL_PATH) -> Optional[int]:
    """How long an idle virtual CPU of this guest polls before it halts (ns;
    None where the kernel has no haltpoll, as on bare metal). At 0 every
    wake-up of an idle virtual CPU goes through the hypervisor, and a figure
    that sleeps and wakes (blocking progress, a server's idle workers)
    measures that: the fabric bench's host_wake_round_trip shows its cost."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def main(results_dir: str = "results", nodes: int = 3, quick: bool = True,
         fabrics: Optional[List[str]] = None, benchmarks: Optional[List[str]] = None,
         progress: Optional[bool] = None) -> int:
    """Run the demo; returns the process exit code (1 if any experiment failed).

    ``benchmarks``: names to run (None: every known or built one; []: none).
    ``progress``: a bar over the steps on stderr (None: on a terminal or in a
    notebook; the ``pydsm demo`` command always shows it)."""
    os.makedirs(results_dir, exist_ok=True)
    d = Demo(results_dir, nodes=nodes, quick=quick)
    t0 = time.monotonic()
    cpu0 = cpu_times()
    fabrics = fabrics or ["shm", "tcp"]
    built = [n for n in Demo.benchmark_names(benchmarks) if n in _bench.available()]
    steps = len(fabrics) + len(built) + ("fabric" in built) + ("trust" in built) + ("semeru" in built) + 1
    from ..progress import bar
    d.progress = bar(total=steps, desc="demo", unit="step", enabled=progress)
    for fabric in fabrics:
        d.step(f"local cluster of {nodes} nodes over {fabric}", functools.partial(d.cluster_experiments, fabric, nodes))
    d.benchmarks(benchmarks)
    d.step("plots", d.plot_ratios)
    d.progress.close()
    steal = steal_share(cpu0, cpu_times())
    halt_poll = guest_halt_poll_ns()
    host = {"cpus": os.cpu_count(), "steal_pct": None if steal is None else round(100 * steal, 1),
            "guest_halt_poll_ns": halt_poll}
    with open(os.path.join(results_dir, "demo.json"), "w") as f:
        json.dump({"figures": d.rows, "notes": d.notes, "failures": d.failures, "host": host}, f, indent=2,
                  default=str)
    full_table = os.path.join(results_dir, "table.txt")
    with open(full_table, "w") as f:
        f.write(d.table() + "\n")
    print()
    print(f"pydsm demo: {len(d.rows)} figures in {time.monotonic() - t0:.0f} s "
          f"({'quick' if quick else 'full'} mode); the headline ones:")
    print(d.table(headline_only=True))
    print(f"every figure: {full_table}")
    if steal is not None:
        print(f"host: {os.cpu_count()} cores, {100 * steal:.0f}% of CPU time stolen by the hypervisor during the run"
              + (" (the figures measure the neighbours too: rerun on a quieter host)" if steal > 0.05 else ""))
    if halt_poll == 0:
        print("host: idle virtual CPUs halt at once (guest halt polling off), so every wake-up of one is the "
              "hypervisor's: figures that sleep and wake measure it (host_wake_round_trip)")
    for n in d.notes:
        print(f"note: {n}")
    if d.plots:
        print("plots: " + ", ".join(d.plots))
    print(f"all figures: {os.path.join(results_dir, 'demo.json')}")
    for fmsg in d.failures:
        print(f"FAILED: {fmsg}")
    return 1 if d.failures else 0
