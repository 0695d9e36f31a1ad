"""The pydsm command: info, up (then connect to it), bench, run, demo pieces."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import numpy as np
import pytest

import pydsm
from pydsm import _lib
from conftest import DAEMONS_WAIT_S, REPO, dsmd_pids, pydsm_cmd, wait_until


def test_info(run_pydsm):
    out = run_pydsm("info").stdout
    assert "UCX:" in out and "transports:" in out and "fabrics:" in out
    data = json.loads(run_pydsm("info", "--json").stdout)
    assert data["fabrics"]["tcp"] and data["fabrics"]["shm"]
    assert data["ucx_version"]


def test_version(run_pydsm):
    assert "libdsm" in run_pydsm("version").stdout
    assert run_pydsm("--version").stdout == run_pydsm("version").stdout


def test_up_then_connect():
    p = subprocess.Popen(pydsm_cmd() + ["up", "--nodes", "2", "--fabric", "shm", "--partition", "16MiB",
                                        "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    try:
        line = p.stdout.readline()
        assert line, p.stderr.read()
        info = json.loads(line)
        assert info["nodes"] == [0, 1]
        with pydsm.Cluster.connect(info["coordinator"], info["secret"], fabric="shm", nodes=2) as c:
            with c.alloc(np.arange(16.0), node=1) as b:
                np.testing.assert_array_equal(b.read(), np.arange(16.0))
            with c.alloc(np.zeros(1, np.uint64), node=0) as ctr:
                c.run("fetch_add", counter=ctr, iters=100)
                assert int(ctr.read()[0]) == 200
        p.send_signal(signal.SIGTERM)
        p.wait(20)
        assert p.returncode == 0
        assert wait_until(lambda: dsmd_pids(info["coordinator"]) == [], DAEMONS_WAIT_S)
    finally:
        if p.poll() is None:
            p.kill()


def test_up_prints_how_to_connect(run_pydsm):
    out = run_pydsm("up", "--nodes", "1", "--partition", "8MiB", "--time", "0.5").stdout
    assert "coordinator: 127.0.0.1:" in out and "secret:" in out and "Cluster.connect(" in out


def test_run_command(run_pydsm, tmp_path):
    p = run_pydsm("run", "fetch_add", "iters=100", "--nodes", "2", "--plot", str(tmp_path / "p.png"))
    assert "ops_per_sec" in p.stdout and (tmp_path / "p.png").exists()
    # output into a pipe: no progress bar (tqdm draws with carriage returns)
    assert "\r" not in p.stderr and "nodes done" not in p.stderr, p.stderr[-500:]
    assert "DeprecationWarning" not in p.stderr


def test_run_takes_options_and_parameters_in_any_order(run_pydsm):
    # --threads after a key=value, a parameter after the options
    out = run_pydsm("run", "echo", "iters=20", "--nodes", "2", "--threads", "1", "target=0").stdout
    assert "round_trips_per_sec" in out


def test_run_across_nodes_puts_trustees_on_every_node(run_pydsm):
    # --across-nodes hands the Placement to the local cluster: each daemon
    # gets a delegation runtime and sssp's partitions span both nodes
    out = run_pydsm("run", "sssp", "scale=6", "--nodes", "2", "--threads", "2", "--across-nodes",
                    timeout=180).stdout
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["across_nodes"]]
    assert rows and all(r[2:4] == ["2", "2"] for r in rows), out
    # without it each node runs its own partitions
    out = run_pydsm("run", "sssp", "scale=6", "--nodes", "2", "--threads", "2", timeout=180).stdout
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["across_nodes"]]
    assert rows and all(r[2:4] == ["1", "1"] for r in rows), out
    p = run_pydsm("run", "sssp", "--across-nodes", "--connect", "127.0.0.1:1", check=False)
    assert p.returncode == 2 and "--across-nodes" in p.stderr


def test_run_lists_and_describes_workloads(run_pydsm):
    out = run_pydsm("run", "list").stdout
    assert "fetch_add" in out and "echo" in out
    out = run_pydsm("run", "echo", "--help").stdout
    assert "target (u64, default next)" in out and "iters (u64, default 1000)" in out
    assert "--threads" in run_pydsm("run", "--help").stdout


def test_run_refuses_placement_keys_and_names_missing_ones(run_pydsm):
    p = run_pydsm("run", "fetch_add", "threads=2", check=False)
    assert p.returncode == 2 and "threads is set by --threads" in p.stderr
    p = run_pydsm("run", "fetch_add", "counter=0", "--nodes", "1", check=False)
    assert p.returncode == 1 and "fetch_add: counter=0 refused" in p.stderr


def test_bench_missing_is_a_clear_error(run_pydsm):
    p = run_pydsm("bench", "no-such-bench", check=False)
    assert p.returncode == 2 and "not built" in p.stderr


def test_bench_list(run_pydsm):
    # Every benchmark program directory csrc/bench/NAME/ is built, installed and listed.
    bench = os.path.join(REPO, "csrc", "bench")
    expected = {f for f in os.listdir(bench) if os.path.isdir(os.path.join(bench, f))}
    assert expected and set(_lib.bench_names()) == expected
    listed = run_pydsm("bench", "list").stdout
    for name in expected:
        assert name in listed


def test_every_option_has_help_and_says_its_default():
    import argparse
    from pydsm.tools.cli import build_parser
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in subs.choices.items():
        for action in sp._actions:
            if isinstance(action, argparse._HelpAction) or action.dest == "help":
                continue
            assert action.help, f"pydsm {name} {action.option_strings or action.dest}: no help"
            shown = action.default not in (None, False, []) and action.option_strings
            if shown:
                assert "default" in action.help, f"pydsm {name} {action.option_strings}: default not said"


def test_bench_help_names_list_and_passthrough(run_pydsm):
    out = run_pydsm("bench", "--help").stdout
    assert "'pydsm bench list'" in out and "-- ARGS" in out


def test_bench_bootstrap_quick(run_pydsm, tmp_path):
    path = tmp_path / "b.json"
    p = run_pydsm("bench", "bootstrap", "--quick", "--json", str(path), timeout=300)
    out = p.stdout
    rep = json.loads(path.read_text())
    assert rep["figures"] and "figure" in out and "ratio" in out
    # one table: the program's own ("... anchor is") is not echoed beside it
    assert "anchor is" not in p.stderr + out and out.count(rep["figures"][0]["name"] + " ") == 1
    for fig in rep["figures"]:
        assert {"name", "value", "unit"} <= set(fig)


def test_bench_path_quick(run_pydsm, tmp_path):
    # the heap's checked operations beside the fabric's own, on both fabrics
    path = tmp_path / "p.json"
    out = run_pydsm("bench", "path", "--quick", "--json", str(path), timeout=600).stdout
    figs = {f["name"]: f for f in json.loads(path.read_text())["figures"]}
    for name in ("heap_fadd_8B_latency/shm", "heap_read_8B_latency/shm",
                 "heap_fadd_8B_latency/tcp", "heap_read_8B_latency/tcp"):
        assert figs[name]["value"] > 0 and figs[name]["anchor_value"] > 0, figs.get(name)
        assert figs[name]["anchor"].startswith("dsm_fabric_") and name in out
        # each median comes with the interleaved repetitions it was taken over
        reps, anchors = figs[name]["reps"], figs[name]["anchor_reps"]
        assert len(reps) == len(anchors) >= 3
        assert figs[name]["value"] == pytest.approx(float(np.median(reps)), rel=1e-5)
        assert figs[name]["anchor_value"] == pytest.approx(float(np.median(anchors)), rel=1e-5)


def test_bench_passes_arguments_after_double_dash(run_pydsm, tmp_path):
    path = tmp_path / "t.json"
    run_pydsm("bench", "trust", "--quick", "--json", str(path), "--", "--only", "faa", "--objects", "4",
              timeout=300)
    names = {f["name"] for f in json.loads(path.read_text())["figures"]}
    assert "fetch_add_4obj_uniform" in names and "fetch_add_4obj_uniform/pause_ceiling" in names
    assert not any(n.startswith(("fetch_add_1obj", "kv_", "memcached_", "latency_")) for n in names)
    p = run_pydsm("info", "--", "--objects", "4", check=False)
    assert p.returncode == 2 and "takes none" in p.stderr


def test_demo_without_benchmarks(run_pydsm, tmp_path):
    res = tmp_path / "results"
    p = run_pydsm("demo", "--fabric", "shm", "--no-bench", "--nodes", "2", "--results", str(res),
                  timeout=180)
    out = p.stdout
    assert "fetch_add_ops_per_sec/shm" in out and "anchor" in out and "ratio" in out
    assert (res / "fetch_add_shm.png").exists() and (res / "demo.json").exists()
    data = json.loads((res / "demo.json").read_text())
    assert not data["failures"]
    # the driver's path beside its anchors (the same op from C; single calls)
    for name in ("driver_fadd_batch_10k/shm", "driver_fadd_8B_latency/shm", "driver_read_8B_latency/shm"):
        fig = next(r for r in data["figures"] if r["name"] == name)
        # the ratio is the median of the repetitions' own (3, interleaved)
        assert fig["anchor_value"] > 0 and fig["runs"] == 3
        ratios = sorted(x / a for x, a in zip(fig["reps"], fig["anchor_reps"]))
        assert fig["ratio"] == pytest.approx(ratios[1]) and fig["ratio_spread"] == [ratios[0], ratios[2]]
        assert name in out
    # a progress bar over the steps, also when stderr is a pipe
    assert "demo: plots" in p.stderr and "2/2" in p.stderr, p.stderr[-2000:]


def test_demo_notes_missing_benchmark(tmp_path, monkeypatch):
    from pydsm.tools import demo
    d = demo.Demo(str(tmp_path))
    d.benchmarks(["surely-not-built"])
    assert any("surely-not-built" in n and "not built" in n for n in d.notes)
    assert not d.failures


@pytest.mark.parametrize("name,part,figure,unit,runs_attr", [
    ("fabric", "progress", "progress_adaptive_vs_best/idle/am_8B_latency/tcp", "am_8B_latency/tcp",
     "PROGRESS_RUNS"),
    ("trust", "memcached_progress", "progress_adaptive_vs_best/idle/memcached_depth1", "memcached_zipf_w5_depth1",
     "HEADLINE_RUNS")])
def test_demo_runs_a_progress_comparison_after_its_bench(tmp_path, monkeypatch, name, part, figure, unit,
                                                         runs_attr):
    """The fabric and trust benches leave their progress comparisons out
    unless asked by name: the demo asks for each in a step of its own,
    and its figures keep a source of their own."""
    from pydsm.tools import bench, demo
    calls = []

    def fake_run(bench_name, quick=False, json_path=None, extra_args=None, **kw):
        calls.append((bench_name, list(extra_args or [])))
        fig = figure if part in (extra_args or []) else unit
        return {"figures": [{"name": fig, "value": 1.0, "unit": "us", "anchor": "a", "anchor_value": 1.0,
                             "ratio": 1.0, "better": "lower"}]}

    monkeypatch.setattr(bench, "available", lambda: [name])
    monkeypatch.setattr(bench, "run", fake_run)
    d = demo.Demo(str(tmp_path))
    d.benchmarks([name])
    assert not d.failures, d.failures
    assert [c[0] for c in calls] == [name, name]
    assert "--only" not in calls[0][1]
    assert calls[1][1] == ["--only", part, "--runs", str(getattr(demo, runs_attr))]   # quick or not
    sources = {r["name"]: r["source"] for r in d.rows}
    assert sources == {unit: f"bench/{name}", figure: f"bench/{name}-{part.replace('_', '-')}"}


def test_demo_runs_semeru_again_with_a_slower_device(tmp_path, monkeypatch):
    """After the managed-heap bench the demo runs it once more over tcp
    with every page fetch delayed (a device slower than loopback): the
    figures of that run keep a source of their own, and the headline
    filter keeps its vs-G1 rows."""
    from pydsm.tools import bench, demo
    calls = []

    def fake_run(bench_name, quick=False, json_path=None, extra_args=None, **kw):
        calls.append((bench_name, list(extra_args or []), json_path))
        delayed = "--fetch-delay-us" in (extra_args or [])
        fig = f"semeru_total_vs_g1_25pct/tcp+{demo.SEMERU_DEVICE_DELAY_US}us" if delayed else \
            "semeru_total_vs_g1_25pct/tcp"
        return {"figures": [{"name": fig, "value": 1.5, "unit": "x", "anchor": "parity", "anchor_value": 1.0,
                             "ratio": 1.5, "better": "higher"}]}

    monkeypatch.setattr(bench, "available", lambda: ["semeru"])
    monkeypatch.setattr(bench, "run", fake_run)
    d = demo.Demo(str(tmp_path), quick=True)
    d.benchmarks(["semeru"])
    assert not d.failures, d.failures
    assert [c[0] for c in calls] == ["semeru", "semeru"]
    assert "--fetch-delay-us" not in calls[0][1]
    assert calls[1][1] == ["--transport", "tcp", "--fetch-delay-us", str(demo.SEMERU_DEVICE_DELAY_US),
                           "--runs", str(demo.HEADLINE_RUNS)]
    assert calls[1][2] != calls[0][2]   # its own JSON: the plain run's stays
    sources = {r["name"]: r["source"] for r in d.rows}
    delayed = f"semeru_total_vs_g1_25pct/tcp+{demo.SEMERU_DEVICE_DELAY_US}us"
    assert sources == {"semeru_total_vs_g1_25pct/tcp": "bench/semeru", delayed: "bench/semeru-device"}
    assert demo.HEADLINE.search(delayed)
    assert demo.HEADLINE.search(f"semeru_g1_vs_stw_total_25pct/tcp+{demo.SEMERU_DEVICE_DELAY_US}us")


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_chaos_soak_round(run_pydsm, fabric):
    """pydsm chaos: one round of kv under own and dir (checksum and recorded
    history), a shared counter, the atomics' history, LOCO's kvstore and
    queue histories, sssp on delegation across the nodes and the managed
    heap under its three collectors, on a cluster whose every fabric runs in
    chaos mode; right answers, the DSM_CHAOS value that repeats it, and the
    table."""
    p = run_pydsm("chaos", "--seed", "5", "--nodes", "2", "--fabric", fabric, "--rounds", "1", timeout=300)
    assert "DSM_CHAOS=5:all" in p.stderr
    assert ("round 1: kv/own, kv/own history linearizable, kv/dir, kv/dir history linearizable, counter, "
            "atomics history linearizable, chan kvstore history linearizable, chan queue history linearizable, "
            "sssp, compact reads right, mheap digests equal") in p.stderr
    assert "1 round(s), 11 checks right" in p.stderr
    lines = p.stderr.splitlines()
    table = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines[[i for i, x in enumerate(lines)
                                                                          if x.startswith("seeds ")][-1]:])
    assert table["histories checked"] == "6"
    assert table["violations"] == "0" and table["operations failed"] == "0"
    assert int(table["faults: delayed"].replace(",", "")) > 0   # chaos did act
    # the atomics' clients left cleanly: no member saw one fail
    assert table["peer failures seen"] == "0"


def test_chaos_soak_kills_a_node_per_seed():
    """On three nodes each seed ends by killing the last one mid-sssp:
    every survivor must name the loss, and the table counts the kill; the
    rounds' peer failures are counted before it (0: none failed there)."""
    from pydsm.tools import chaos

    report = chaos.soak(seed=6, nodes=3, fabric="shm", rounds=1, echo=False)
    assert report.ok, report.failure
    assert report.kills == 1 and report.peer_failures == 0
    text = "\n".join(report.lines)
    assert "seed 6: rank 2 killed mid-sssp; each of the 2 survivors named it" in text
    assert re.search(r"^kills, loss named\s+1$", text, re.M), text


def test_chaos_table_names_a_few_seeds_and_counts_many():
    """A short soak's seeds are listed, to repeat it; a long one's are
    counted (each is on its summary line)."""
    from pydsm.tools import chaos

    report = chaos.SoakReport(chaos="5:all", seeds=["5", "77"])
    assert re.search(r"^seeds\s+5 77$", report.table(), re.M)
    report.seeds = [str(s) for s in range(74)]
    assert re.search(r"^seeds\s+74 \(each on its line above\)$", report.table(), re.M)


def test_chaos_soak_fate_check_bites(monkeypatch):
    """The kill's check fails when the survivors' report leaves the dead
    rank out: here the run's failure is made to say nothing of it."""
    import pydsm.workloads
    from pydsm.tools import chaos

    real = pydsm.workloads.Task.result

    def mute(self: Any, *args: Any, **kw: Any) -> Any:
        try:
            return real(self, *args, **kw)
        except pydsm.DsmError as exc:
            raise pydsm.DsmError(str(exc).replace("died mid-run", "went away")) from None

    with pydsm.Cluster.local(nodes=3, fabric="shm", placement=pydsm.Placement(threads=2, trustees="shared"),
                             peer_timeout_ms=30000, op_timeout_ms=30000) as c:
        monkeypatch.setattr(pydsm.workloads.Task, "result", mute)
        lost = chaos.fate_check(c, c.placement)
    assert lost is not None and "0 of the 2 survivors named rank 2 as lost" in lost, lost


def test_chaos_soak_failure_shows_the_daemons_logs(monkeypatch):
    """A failed round prints each daemon's last log lines, its side of the
    failure (the cluster's log directory goes with it), and counts what its
    members saw: here the first history check is made to refuse."""
    import pydsm.linearizability
    from pydsm.tools import chaos

    class Refused:
        ok = False

        def explain(self) -> str:
            return "refused by the test"

    monkeypatch.setattr(pydsm.linearizability, "check", lambda history, model: Refused())
    report = chaos.soak(seed=5, nodes=2, fabric="shm", rounds=1, echo=False)
    assert report.failure is not None and "refused by the test" in report.failure
    # the failed round's members were still asked what chaos did there
    assert report.faults["delayed"] > 0
    text = "\n".join(report.lines)
    for rank in (0, 1):
        head = f"--- dsmd rank {rank} log (last "
        assert head in text
        # the daemon's own lines follow: its join, at the soak's log level
        assert f"rank {rank} joined" in text.split(head, 1)[1]


def test_chaos_soak_refuses_a_bad_spec(run_pydsm):
    p = run_pydsm("chaos", "--seed", "5", "--spec", "delay=900", "--rounds", "1", check=False, timeout=120)
    assert p.returncode != 0
    assert "0..100" in p.stderr
