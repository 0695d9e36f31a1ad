"""Benchmarks are C programs (``dsm-bench-NAME``, built from csrc/bench/NAME/
and shipped in the package). This module runs one, reads the JSON it writes
(schema in docs/ARCHITECTURE.md, Conventions) and prints figures beside their anchors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from .. import _lib
from ..units import format_value, render_table

#: Benchmarks the project plans or has; `pydsm demo` names the missing ones.
KNOWN_BENCHMARKS = ("fabric", "bootstrap", "trust", "gossamer", "drust", "loco", "kv5")


class BenchmarkMissing(FileNotFoundError):
    """The benchmark program is not built (yet)."""


class BenchmarkFailed(RuntimeError):
    """The benchmark program failed or wrote no usable JSON."""


def available() -> List[str]:
    """Names of the benchmark programs that are built."""
    return _lib.bench_names()


def cases(name: str) -> List[Dict[str, Any]]:
    """The figure catalogue of ``dsm-bench-NAME`` (its ``--list``): one dict per
    figure with ``figure``, ``unit``, ``better`` ("higher"/"lower") and ``anchor``."""
    prog = _lib.bench_path(name)
    if not prog:
        raise BenchmarkMissing(f"benchmark {name!r} is not built (no dsm-bench-{name})")
    proc = subprocess.run([prog, "--list"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60)
    if proc.returncode != 0:
        raise BenchmarkFailed(f"{prog} --list exited with status {proc.returncode}: "
                              f"{proc.stderr.decode('utf-8', 'replace').strip()}")
    rows = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        figure, unit, better, anchor = (line.split("\t", 3) + ["", "", ""])[:4]
        rows.append({"figure": figure, "unit": unit, "better": better, "anchor": anchor})
    return rows


def _default_timeout(quick: bool) -> float:
    env = os.environ.get("PYDSM_BENCH_TIMEOUT", "")
    if env:
        try:
            value = float(env)
        except ValueError:
            value = 0.0
        if not value > 0:
            raise ValueError(f"PYDSM_BENCH_TIMEOUT is seconds (a positive number), not {env!r}")
        return value
    return 600.0 if quick else 3600.0


def _tail(output: Optional[bytes], lines: int) -> str:
    if not output:
        return ""
    return "\n".join(output.decode("utf-8", "replace").strip().splitlines()[-lines:])


def run(name: str, quick: bool = False, json_path: Optional[str] = None,
        extra_args: Optional[List[str]] = None, timeout: Optional[float] = None,
        echo: bool = True) -> Dict[str, Any]:
    """Run ``dsm-bench-NAME [--quick] --json PATH`` and return its JSON report.

    The program's progress (its stderr) goes to stderr when ``echo``; its
    own table (stdout) is left out, the report's figures being the table,
    and ends the error of a failed run. ``timeout`` (seconds) defaults to
    ``$PYDSM_BENCH_TIMEOUT``, else 600 with ``quick`` and 3600 without; a run
    past it is killed and its error ends with the last lines it printed.
    Raises BenchmarkMissing if the program is not built, BenchmarkFailed if
    it fails.
    """
    prog = _lib.bench_path(name)
    if not prog:
        raise BenchmarkMissing(f"benchmark {name!r} is not built (no dsm-bench-{name}; "
                               f"built: {', '.join(available()) or 'none'})")
    env = dict(os.environ)   # each program's fabric sets the UCX settings it runs with
    try:
        env.setdefault("DSM_DSMD", _lib.dsmd_path())
    except FileNotFoundError:
        pass
    with tempfile.TemporaryDirectory(prefix="pydsm-bench-") as tmp:
        out_json = json_path or os.path.join(tmp, f"{name}.json")
        argv = [prog] + (["--quick"] if quick else []) + ["--json", out_json] + list(extra_args or [])
        if timeout is None:
            timeout = _default_timeout(quick)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=sys.stderr if echo else subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            # where it was: the last figures it printed, and its progress
            said = [t for t in (_tail(exc.stdout, 10), _tail(exc.stderr, 10)) if t]
            head = (f"{' '.join(argv)} did not finish within {timeout:.0f} s; "
                    + ("it printed last:" if said else "it printed nothing"))
            raise BenchmarkFailed("\n".join([head] + said)) from None
        elapsed = time.monotonic() - t0
        # the program's stdout is its own table of the figures, which the
        # caller prints from the JSON (with anchors): shown only on a failure
        stdout = proc.stdout.decode("utf-8", "replace")
        if proc.returncode != 0:
            tail = "\n".join(stdout.strip().splitlines()[-15:])
            err = (proc.stderr or b"").decode("utf-8", "replace").strip() if not echo else ""
            raise BenchmarkFailed(f"{' '.join(argv)} exited with status {proc.returncode}\n{tail}\n{err}".rstrip())
        try:
            with open(out_json) as f:
                report = json.load(f)
        except (OSError, ValueError) as exc:
            raise BenchmarkFailed(f"{os.path.basename(prog)} wrote no valid JSON at {out_json}: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("figures"), list):
        raise BenchmarkFailed(f"{os.path.basename(prog)}: JSON has no 'figures' list")
    report.setdefault("bench", name)
    report.setdefault("elapsed_s", elapsed)
    return report


def plot_series(report: Dict[str, Any], path: str, names: Optional[List[str]] = None) -> int:
    """Draw the report's series (curves over time, e.g. throughput while
    compacting) into one PNG at ``path``, one panel each, its shaded window
    marked and the y label saying which way is better. ``names`` limits the
    series drawn. Returns how many were drawn; raises ValueError if none."""
    series = [s for s in report.get("series", []) if names is None or s.get("name") in names]
    if not series:
        raise ValueError(f"benchmark {report.get('bench', '?')!r} reported no series to plot"
                         + (f" named {', '.join(names)}" if names else ""))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 3.2), squeeze=False)
    for ax, s in zip(axes[0], series):
        ax.plot(s["x"], s["y"], lw=1)
        shade = s.get("shade")
        if shade:
            ax.axvspan(shade[0], shade[1], color="orange", alpha=0.3, label="compacting")
            ax.legend(loc="lower left")
        ax.set_title(s["name"], fontsize=9)
        ax.set_xlabel(s.get("x_unit", ""))
        ax.set_ylabel(f"{s.get('y_unit', '')} ({s.get('better', 'higher')} is better)")
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return len(series)


def ratio_note(fig: Dict[str, Any]) -> str:
    """'better'/'worse' than the anchor, from the figure's direction."""
    ratio, better = fig.get("ratio"), fig.get("better")
    if not isinstance(ratio, (int, float)) or better not in ("higher", "lower"):
        return ""
    good = ratio >= 1 if better == "higher" else ratio <= 1
    return "ok" if good else "behind"


def table(reports: List[Dict[str, Any]], with_bench: bool = False) -> str:
    """One text table of the figures of one or more reports, anchors beside them."""
    headers = (["bench"] if with_bench else []) + ["figure", "value", "unit", "anchor",
                                                   "anchor value", "ratio", "better"]
    rows = []
    for rep in reports:
        for fig in rep.get("figures", []):
            ratio = fig.get("ratio")
            row = [str(fig.get("name", "?")), format_value(fig.get("value", float("nan"))),
                   str(fig.get("unit", "")), str(fig.get("anchor", "") or "-"),
                   format_value(fig.get("anchor_value", float("nan")))
                   if fig.get("anchor_value") is not None else "-",
                   f"{ratio:.2f}" if isinstance(ratio, (int, float)) else "-",
                   str(fig.get("better", ""))]
            rows.append(([str(rep.get("bench", "?"))] if with_bench else []) + row)
    align = ("l" if with_bench else "") + "lrllrrl"
    return render_table(headers, rows, align)
