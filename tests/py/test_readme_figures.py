"""The README's figures table is generated from the JSON a demo run wrote
(docs/figures.json), never typed by hand: regenerating it changes nothing,
and every row's numbers are that JSON's."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "readme_figures.py")


def load_script():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import readme_figures
    finally:
        sys.path.pop(0)
    return readme_figures


def test_readme_table_is_the_generated_one():
    r = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_row_carries_the_json_figures():
    rf = load_script()
    with open(os.path.join(ROOT, "docs", "figures.json")) as f:
        rows = rf.index(json.load(f)["figures"])
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    table = readme[readme.index(rf.BEGIN):readme.index(rf.END)]
    seen = re.findall(r"^\| `([^`]+)` \| ([^|]+) \|[^|]*\|[^|]*\| ([^|]+) \| ([^|]+) \| ([^|]+) \|",
                      table, re.M)
    assert [name for name, *_ in seen] == rf.FIGURES
    for name, value, ratio, runs, lo_hi in seen:
        row = rows[name]
        assert value.strip() == rf.with_unit(float(row["value"]), row["unit"])
        if row.get("ratio") is not None:
            assert abs(float(ratio.replace(",", "")) - row["ratio"]) <= 0.01 * abs(row["ratio"]) + 0.005
        assert runs.strip() == str(row.get("runs", "—"))
        if row.get("ratio_spread"):
            lo, hi = (float(x.replace(",", "")) for x in lo_hi.split("–"))
            assert lo <= hi
            assert abs(lo - row["ratio_spread"][0]) <= 0.01 * abs(row["ratio_spread"][0]) + 0.005
            assert abs(hi - row["ratio_spread"][1]) <= 0.01 * abs(row["ratio_spread"][1]) + 0.005
        else:
            assert lo_hi.strip() == "—"


def test_a_ratio_over_runs_is_the_median_of_the_runs_ratios():
    """Every figure of the demo whose runs each have an anchor measured beside
    them states as its ratio the median of the runs' own ratios (the
    benchmarks' report), which lies within their spread; the ratio of the
    two medians need not."""
    with open(os.path.join(ROOT, "docs", "figures.json")) as f:
        figures = json.load(f)["figures"]
    paired = 0
    for fig in figures:
        reps, anchors = fig.get("reps"), fig.get("anchor_reps")
        if not reps or not anchors or not all(a > 0 for a in anchors) or not fig.get("ratio"):
            continue
        if all(a == fig["anchor_value"] for a in anchors):
            continue   # a constant anchor (parity, an even split): the ratio is the value's
        median = statistics.median(x / a for x, a in zip(reps, anchors))
        # the JSON keeps 6 significant digits of each number
        assert abs(fig["ratio"] - median) <= 1e-4 * abs(median) + 1e-9, fig["name"]
        lo, hi = fig["ratio_spread"]
        slack = 1e-5 * max(abs(lo), abs(hi)) + 1e-9
        assert lo - slack <= fig["ratio"] <= hi + slack, fig["name"]
        paired += 1
    assert paired >= 100, f"only {paired} figures with paired runs in the demo"


def test_a_changed_figure_is_caught(tmp_path):
    rf = load_script()
    with open(os.path.join(ROOT, "docs", "figures.json")) as f:
        data = json.load(f)
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert rf.splice(readme, rf.render(data)) == readme
    first = next(r for r in data["figures"] if r["name"] == rf.FIGURES[0])
    first["value"] = float(first["value"]) * 3 + 1
    assert rf.splice(readme, rf.render(data)) != readme


def test_a_verdict_follows_its_figures():
    """The vs-G1 rows' quotability is read from the JSON: it flips when the
    G1-like baseline starts (or stops) beating the stop-the-world one."""
    rf = load_script()
    with open(os.path.join(ROOT, "docs", "figures.json")) as f:
        data = json.load(f)
    rows = rf.index(data["figures"])
    # the headline cells (tcp at 25% and 50%) together, then every other cell on its own figure
    assert [v[0] for v in rf.VERDICTS] == [
        ("semeru_g1_vs_stw_total_25pct/tcp", "semeru_g1_vs_stw_total_50pct/tcp"),
        ("semeru_g1_vs_stw_total_100pct/tcp",), ("semeru_g1_vs_stw_total_25pct/shm",),
        ("semeru_g1_vs_stw_total_50pct/shm",), ("semeru_g1_vs_stw_total_100pct/shm",),
        ("semeru_g1_vs_stw_total_25pct/tcp+10us",), ("semeru_g1_vs_stw_total_50pct/tcp+10us",)]
    for i, (names, holds, fails) in enumerate(rf.VERDICTS):
        for ratio, want in ((1.2, holds), (0.9, fails)):
            for n in names:
                rows[n]["ratio"] = ratio
            assert rf.verdicts(rows)[i].startswith(f"- {want} (")
    names = rf.VERDICTS[0][0]
    rows[names[0]]["ratio"] = 1.2
    rows[names[1]]["ratio"] = 0.99
    assert rf.verdicts(rows)[0].startswith(f"- {rf.VERDICTS[0][2]} (")
    for i in range(1, len(rf.VERDICTS)):   # the other cells stay as set: 0.9
        assert rf.verdicts(rows)[i].startswith(f"- {rf.VERDICTS[i][2]} (")


def test_every_semeru_cell_and_rate_has_its_row():
    """Issue-level promise: the table shows every Semeru cell (both fabrics,
    three caches) and every rate figure the fabric bench measures, not only
    the headline ones."""
    rf = load_script()
    for fabric in ("tcp", "shm"):
        for cache in (25, 50, 100):
            for what in ("total_vs_g1", "gc_time_vs_g1", "total_vs_g1_gc_free_bound", "g1_vs_stw_total",
                         "gc_traffic_bytes"):
                assert f"semeru_{what}_{cache}pct/{fabric}" in rf.FIGURES
    with open(os.path.join(ROOT, "docs", "figures.json")) as f:
        data = json.load(f)
    # the headline cells once more with a slower device, from the demo's run of its own
    from pydsm.tools.demo import SEMERU_DEVICE_DELAY_US
    sources = {r["name"]: r.get("source") for r in data["figures"]}
    for cache in (25, 50):
        for what in ("total_vs_g1", "gc_time_vs_g1", "g1_vs_stw_total"):
            name = f"semeru_{what}_{cache}pct/tcp+{SEMERU_DEVICE_DELAY_US}us"
            assert name in rf.FIGURES and sources[name] == "bench/semeru-device"
    rates = [r["name"] for r in data["figures"] if r.get("source") == "bench/fabric"
             and "_rate" in r["name"]]
    assert len(rates) >= 12
    assert [n for n in rates if n not in rf.FIGURES] == []


def test_spread_comes_from_the_runs():
    """A figure's runs reach the row: their count, and the spread of each
    run's ratio to the anchor measured beside it."""
    from pydsm.tools.demo import spread
    assert spread(None, None) == {}
    s = spread([2.0, 4.0, 3.0], [1.0, 1.0, 2.0])
    assert s["runs"] == 3 and s["ratio_spread"] == [1.5, 4.0]
    assert "ratio_spread" not in spread([1.0, 2.0], [1.0, 0.0])   # a run without its anchor
    assert "ratio_spread" not in spread([1.0, 2.0], None)
