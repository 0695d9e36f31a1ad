"""dsm-bench-NAME --list is the figure catalogue: every figure a run writes to
its JSON must be listed there (a '*' in a listed name stands for what the run
fills in). Each program runs a cheap selection of its quick mode (seconds)."""
import fnmatch
import json
import os
import subprocess
import sys

import pytest

from pydsm import _lib
from pydsm.tools import bench

# The program and the arguments of a cheap run that still reports figures.
RUNS = {
    "path": ["--quick", "--runs", "1"],
    # am 8 B over shm: its ucx_perftest anchor and the raw-UCX floor beside it
    "fabric": ["--quick", "--runs", "1", "--transport", "shm", "--only", "am_8B"],
    # one object: the headline, each mode, the ceilings and the thread shares
    "trust": ["--quick", "--only", "faa", "--objects", "1"],
    # the memory phase: no cluster, every class and share freed
    "corm": ["--quick", "--only", "memory"],
    # SSSP only, a small graph over shm
    "gossamer": ["--quick", "--no-echo", "--sssp-scale", "8", "--transport", "shm"],
    # the one-node figures of one workload and the local dereference
    "drust": ["--quick", "--one-node", "--workloads", "gemm", "--runs", "3"],
    # the shm objects (barrier, lock, transfers) beside their MPI anchors
    "loco": ["--quick", "--runs", "1", "--transport", "shm"],
    # every design and cell over shm, one repetition
    "kv5": ["--quick", "--runs", "1", "--transport", "shm"],
    # one workload over shm, the smallest heap, one rotation of the collectors
    "semeru": ["--tiny", "--transport", "shm", "--only", "temps", "--runs", "1"],
}


def run_json(tmp_path, name, args):
    """The JSON report of dsm-bench-NAME run with args (its stdout dropped)."""
    prog = _lib.bench_path(name)
    if not prog:
        pytest.fail(f"dsm-bench-{name} is not built (configure with -DDSM_BENCH=ON)")
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, UCX_PROTO_ENABLE="y")
    subprocess.run([prog, *args, "--json", str(out)], env=env, check=True, stdout=subprocess.DEVNULL, timeout=600)
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_list_names_every_reported_figure(tmp_path, name):
    cases = bench.cases(name)
    assert cases, f"dsm-bench-{name} --list is empty"
    assert all(c["better"] in ("higher", "lower") and c["anchor"] and c["unit"] for c in cases)
    patterns = [c["figure"] for c in cases]
    assert len(set(patterns)) == len(patterns), "a figure listed twice"
    figures = {f["name"] for f in run_json(tmp_path, name, RUNS[name])["figures"]}
    assert figures, "the run reported no figure"
    unlisted = sorted(f for f in figures if not any(fnmatch.fnmatchcase(f, p) for p in patterns))
    assert not unlisted, f"figures not in --list: {unlisted}"


def test_progress_comparison_anchors_on_the_better_fixed_mode(tmp_path):
    """dsm-bench-fabric --only progress: each progress_adaptive_vs_best figure
    is anchored on whichever of hybrid and blocking was faster in the same
    runs (the progress_hybrid_vs_blocking figure beside it holds both), as
    is the control's (a second blocking target), the host's own wake-up
    round trip sits beside the blocking target's, and its figures are in
    --list."""
    report = run_json(tmp_path, "fabric", ["--quick", "--runs", "1", "--transport", "tcp", "--only", "progress"])
    figs = {f["name"]: f for f in report["figures"]}
    patterns = [c["figure"] for c in bench.cases("fabric")]
    assert all(any(fnmatch.fnmatchcase(f, p) for p in patterns) for f in figs)
    compared = 0
    for state in ("idle", "loaded"):
        for work in ("fadd_8B_latency", "am_8B_latency", "fadd_8B_gap25us_latency", "fadd_8B_gap250us_latency"):
            best = figs[f"progress_adaptive_vs_best/{state}/{work}/tcp"]
            fixed = figs[f"progress_hybrid_vs_blocking/{state}/{work}/tcp"]
            assert best["value"] > 0 and fixed["value"] > 0 and fixed["anchor_value"] > 0
            assert best["anchor_value"] == min(fixed["value"], fixed["anchor_value"])
            winner = "hybrid" if fixed["value"] <= fixed["anchor_value"] else "blocking"
            assert best["anchor"].startswith(winner)
            # the control, a second blocking target, held against the same
            control = figs[f"progress_control_vs_best/{state}/{work}/tcp"]
            assert control["value"] > 0 and control["anchor_value"] == best["anchor_value"]
            assert control["anchor"].startswith(winner)
            compared += 1
        assert figs[f"progress_adaptive_cpu_vs_hybrid/{state}/fadd_8B_gap250us/tcp"]["anchor_value"] > 0
        # the host's own two wake-ups, beside the blocking target's round trip of the same runs
        wake = figs[f"host_wake_round_trip/{state}"]
        assert wake["value"] > 0
        assert wake["anchor_value"] == figs[f"progress_hybrid_vs_blocking/{state}/fadd_8B_latency/tcp"]["anchor_value"]
        assert report["env"][f"host_wake_cpu_us_{state}"]["median"] > 0
        assert 0 < report["env"][f"host_wake_slept_{state}"] <= 1
    assert compared == 8
    assert len(report["env"]["progress_loadavg_loaded"]) == 1
    assert "host_guest_halt_poll_ns" in report["env"]


def test_memcached_progress_comparison_anchors_on_the_better_fixed_mode(tmp_path):
    """dsm-bench-trust --only memcached_progress: four dsm-memcached servers
    that differ only in --progress, at depth 1; each adaptive figure is
    anchored on whichever of hybrid and blocking served more in the same
    runs, as is the control's, idle and loaded; and each server's CPU per
    request is in the env."""
    report = run_json(tmp_path, "trust", ["--quick", "--runs", "1", "--only", "memcached_progress"])
    figs = {f["name"]: f for f in report["figures"]}
    patterns = [c["figure"] for c in bench.cases("trust")]
    assert all(any(fnmatch.fnmatchcase(f, p) for p in patterns) for f in figs)
    for state in ("idle", "loaded"):
        best = figs[f"progress_adaptive_vs_best/{state}/memcached_depth1"]
        fixed = figs[f"progress_hybrid_vs_blocking/{state}/memcached_depth1"]
        control = figs[f"progress_control_vs_best/{state}/memcached_depth1"]
        assert best["value"] > 0 and fixed["value"] > 0 and fixed["anchor_value"] > 0 and control["value"] > 0
        assert best["better"] == "higher"
        assert best["anchor_value"] == max(fixed["value"], fixed["anchor_value"]) == control["anchor_value"]
        winner = "hybrid" if fixed["value"] >= fixed["anchor_value"] else "blocking"
        assert best["anchor"].startswith(winner) and control["anchor"].startswith(winner)
        cpu = report["env"][f"memcached_progress_server_cpu_us_per_req_{state}"]
        assert set(cpu) == {"adaptive", "hybrid", "blocking", "control"} and all(v > 0 for v in cpu.values())


def test_corm_remap_cost_stands_beside_its_anchor(tmp_path):
    """dsm-bench-corm --only remap: a thread's time per pass while another
    thread of its process remaps pages, beside the same remaps from another
    process, both measured in each of the runs, and in the env what one remap
    cost the thread (the compaction's remaps reach every thread of the
    server's process, its progress thread among them); then the TLB
    shootdowns of dropping a batch's pages as one span, beside a list."""
    report = run_json(tmp_path, "corm", ["--quick", "--only", "remap"])
    figures = {f["name"]: f for f in report["figures"]}
    f = figures["corm_remaps_cost_a_sibling_thread"]
    assert len(f["reps"]) == len(f["anchor_reps"]) == 5
    assert all(v > 0 for v in f["reps"] + f["anchor_reps"])
    assert f["anchor"].startswith("the same remaps from another process (this run: a remap cost the sibling ")
    cost = report["env"]["remap_cost"]
    assert cost["runs"] == 5
    assert cost["lost_us_per_remap_min"] <= cost["lost_us_per_remap"] <= cost["lost_us_per_remap_max"]
    assert cost["remaps_per_s_same_process"] > 0 and cost["remaps_per_s_other_process"] > 0
    # how a batch's pages are dropped before its remaps: one span against a list of pages, each call's host TLB
    # shootdowns counted while a thread of the process runs on the other CPU
    drop = report["env"]["batch_drop"]
    assert drop["runs"] == 5 and drop["pages_per_call"] == 64 and drop["span_tlb_per_call"] >= 0
    if drop["list_refused"]:
        assert "corm_batch_drop_tlb_shootdowns" not in figures and drop["list_tlb_per_call"] == -1
    else:
        f = figures["corm_batch_drop_tlb_shootdowns"]
        assert f["anchor"] == "the same pages as a process_madvise list" and f["better"] == "lower"
        assert len(f["reps"]) == len(f["anchor_reps"]) == 5
        assert all(v >= 0 for v in f["reps"] + f["anchor_reps"])
        assert f["value"] == drop["span_tlb_per_call"] and f["anchor_value"] == drop["list_tlb_per_call"]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_corm_measures_only_the_transport_asked_for(tmp_path, transport):
    """dsm-bench-corm --transport T runs its cluster phases over T alone:
    every latency figure names T, and the other fabric's are not there."""
    report = run_json(tmp_path, "corm", ["--quick", "--runs", "1", "--only", "latency", "--transport", transport])
    names = [f["name"] for f in report["figures"]]
    assert names and all(f"/{transport}" in n for n in names), names
    other = "tcp" if transport == "shm" else "shm"
    assert not [n for n in names if f"/{other}" in n]


def test_drust_large_table_says_where_it_stands_against_the_caches(tmp_path):
    """kv's large table is past the last-level cache only on a host whose
    cache is smaller than it: the anchor of /large says which, with the
    sizes the env records (a host with a 260 MiB L3 holds its 40 MiB)."""
    report = run_json(tmp_path, "drust", ["--quick", "--one-node", "--workloads", "kv", "--runs", "3"])
    table = report["env"]["large_table"]
    mib = 1024 * 1024
    assert table["bytes"] == 131072 * 8 * 5 * 8
    figures = {f["name"]: f for f in report["figures"]}
    anchor = figures["own_1node_vs_original/kv/large"]["anchor"]
    size = f"{table['bytes'] / mib:.0f} MiB"
    if table["llc_bytes"] and table["bytes"] > table["llc_bytes"]:
        claim = f"({size}: past this host's {table['llc_bytes'] / mib:.0f} MiB last-level cache)"
    elif table["llc_bytes"] and table["l2_bytes"] and table["bytes"] > table["l2_bytes"]:
        claim = (f"({size}: past a core's {table['l2_bytes'] / mib:.0f} MiB L2, within this host's "
                 f"{table['llc_bytes'] / mib:.0f} MiB last-level cache)")
    else:
        claim = f"({size})"
    assert anchor == f"the original, 131072 buckets of 1M keys {claim}"
    assert figures["own_1node_added_ns/kv/large"]["anchor"] == f"{anchor}: its time per operation"


def test_tcp_get_bandwidth_stands_beside_both_of_ucxs(tmp_path):
    """dsm-bench-fabric's tcp get bandwidth: once against UCX's active-message
    stream (the transport's reach) and once against UCX's own get over tcp
    (the same request-and-reply protocol), each pair measured in the run."""
    report = run_json(tmp_path, "fabric", ["--quick", "--runs", "1", "--transport", "tcp", "--only", "get_1MiB_bw"])
    figures = {f["name"]: f for f in report["figures"]}
    stream, emulated = figures["get_1MiB_bw/tcp"], figures["get_1MiB_bw_vs_ucx_get/tcp"]
    assert stream["anchor"] == "ucx_perftest ucp_am_bw -O 4 -s 1MiB"
    assert emulated["anchor"].startswith("ucx_perftest ucp_get -O 4 -s 1MiB (UCX's own get over tcp")
    for f in (stream, emulated):
        assert f["unit"] == "GB/s" and len(f["reps"]) == len(f["anchor_reps"]) == 1
        assert f["value"] > 0 and f["anchor_value"] > 0


def test_fabric_shm_figures_carry_the_cores_state(tmp_path):
    """dsm-bench-fabric over shm: beside each figure's repetitions, the
    cache line's round trip between the two cores measured before and after
    each (shm_core_rtt_ns), which tells the host's two states apart."""
    report = run_json(tmp_path, "fabric", ["--quick", "--runs", "2", "--transport", "shm", "--only", "fadd_8B"])
    states = report["env"]["shm_core_rtt_ns"]
    assert set(states) == {f["name"] for f in report["figures"]} == {"fadd_8B_latency/shm"}
    # a round trip of one line: more than a core's own load, far less than
    # a time slice (the probe's median ignores a preempted group)
    assert all(len(v) == 2 and all(len(p) == 2 and all(5 < ns < 100_000 for ns in p) for p in v)
               for v in states.values())


def test_loco_kv_window_leaves_as_one_message(tmp_path):
    """dsm-bench-loco --only loco_kv_get over tcp: the headline and the
    predictions are reported and listed, and the counted pass of the
    window of 128 shows its remote reads leaving as one message a window
    each way (kvstore get_many), not one per read or a read alone first."""
    report = run_json(tmp_path, "loco", ["--quick", "--runs", "1", "--transport", "tcp", "--only", "loco_kv_get"])
    figures = {f["name"] for f in report["figures"]}
    assert {"loco_kv_get_vs_predicted/tcp", "loco_kv_get_vs_predicted/tcp/w=128"} <= figures
    patterns = [c["figure"] for c in bench.cases("loco")]
    assert all(any(fnmatch.fnmatchcase(f, p) for p in patterns) for f in figures)
    counts = report["env"]["kv_get_w128_per_get"]
    # a quick cell's 1000 gets are 8 windows of 128; half the keys are the
    # client's own (loads), the other half one host's
    windows_per_get = 8 / report["env"]["kv_ops_per_cell"]
    assert 0.4 < counts["server_handler_calls"] < 0.6
    assert counts["client_deferred"] == 0
    assert counts["client_msgs_sent"] <= 1.5 * windows_per_get
    assert counts["server_msgs_sent"] <= 1.5 * windows_per_get


def test_loco_kv_put_window_takes_fewer_messages(tmp_path):
    """dsm-bench-loco --only loco_kv_put over tcp: the put predictions are
    reported and listed, and the counted passes of the write-only window of
    128 show put_many's few messages a window (locks, writes, releases, one
    message to each host a round) against each put alone's several."""
    report = run_json(tmp_path, "loco", ["--quick", "--runs", "1", "--transport", "tcp", "--only", "loco_kv_put"])
    figures = {f["name"] for f in report["figures"]}
    assert {"loco_kv_put_vs_predicted/tcp", "loco_kv_put_vs_predicted/tcp/w=128"} <= figures
    patterns = [c["figure"] for c in bench.cases("loco")]
    assert all(any(fnmatch.fnmatchcase(f, p) for p in patterns) for f in figures)
    many, alone = report["env"]["kv_put_w128_per_put"], report["env"]["kv_put_one_by_one_per_put"]
    # a quick cell's 1000 puts are 8 windows of 128; each window 3 rounds to
    # 2 hosts (this node's locks through loopback too), a few more where a
    # round's requests fill a message
    windows_per_put = 8 / report["env"]["kv_ops_per_cell"]
    assert many["client_msgs_sent"] <= 12 * windows_per_put
    # alone: the lock in one CAS (this node released it last, so it knows
    # now_serving), the release, each two messages where this node hosts
    # the lock (half the locks: a request and its reply through loopback),
    # and the slot's write where the other node holds the slot but not the
    # lock (a quarter; with the lock, it leaves in the release's message):
    # 3.25; with a ticket and a read of now_serving instead of the CAS, and
    # the write always apart, it was 5
    assert 2 <= alone["client_msgs_sent"] <= 3.6


def test_semeru_headlines_carry_their_spread(tmp_path):
    """dsm-bench-semeru over tcp with 3 runs: each headline against parity
    (a geometric mean of the collectors' ratios) has one repetition a run,
    each beside parity as its anchor, so the README's spread is the runs'
    own min..max; the median of the runs is the headline's value."""
    from pydsm.tools.demo import spread

    report = run_json(tmp_path, "semeru", ["--tiny", "--transport", "tcp", "--only", "temps", "--runs", "3"])
    figs = {f["name"]: f for f in report["figures"]}
    for name in ("semeru_total_vs_g1_25pct/tcp", "semeru_gc_time_vs_g1_25pct/tcp",
                 "semeru_total_vs_g1_50pct/tcp", "semeru_gc_time_vs_g1_50pct/tcp"):
        f = figs[name]
        assert f["anchor_value"] == 1 and len(f["reps"]) == 3 and f["anchor_reps"] == [1, 1, 1]
        # one workload: its median ratio over the runs is the value
        assert min(f["reps"]) <= f["value"] <= max(f["reps"])
        assert spread(f["reps"], f["anchor_reps"])["ratio_spread"] == [min(f["reps"]), max(f["reps"])]
    # a cell where the G1-like loses to stop the world marks every figure
    # against the G1-like unquotable, and only such a cell
    for pct in (100, 50, 25):
        loses = figs[f"semeru_g1_vs_stw_total_{pct}pct/tcp"]["value"] < 1
        for against_g1 in (f"semeru_total_vs_g1_{pct}pct/tcp", f"semeru_gc_time_vs_g1_{pct}pct/tcp",
                           f"semeru_total_vs_g1_gc_free_bound_{pct}pct/tcp"):
            anchor = figs[against_g1]["anchor"]
            assert ("not to be quoted" in anchor) == loses, (against_g1, anchor)


def test_semeru_refuses_more_runs_than_a_figure_holds(tmp_path):
    """dsm-bench-semeru --runs past what a figure keeps (16) is refused
    with the range, before any cluster starts."""
    prog = _lib.bench_path("semeru")
    p = subprocess.run([prog, "--tiny", "--runs", "17"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--runs takes 1..16" in p.stderr


def test_semeru_with_a_slower_device_names_its_fabric(tmp_path):
    """dsm-bench-semeru --fetch-delay-us: every figure of the run names
    its fabric tcp+Nus (so the demo can put it beside the plain run's),
    each is in --list, the delay shows in the anchors and the env, and the
    figures that name no fabric (the stop-the-world headlines, the tracing
    probe) are left out rather than written under the plain run's names."""
    report = run_json(tmp_path, "semeru", ["--tiny", "--transport", "tcp", "--only", "temps", "--runs", "1",
                                           "--fetch-delay-us", "7"])
    names = [f["name"] for f in report["figures"]]
    assert "semeru_total_vs_g1_25pct/tcp+7us" in names and "semeru_gc_time_vs_g1_50pct/tcp+7us" in names
    assert all("tcp+7us" in n for n in names), [n for n in names if "tcp+7us" not in n]
    assert not {"semeru_gc_time_25pct", "semeru_total_25pct", "semeru_trace_mbps_tcp_25pct"} & set(names)
    patterns = [c["figure"] for c in bench.cases("semeru")]
    assert [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in patterns)] == []
    assert all("+7 us on every page fetch" in f["anchor"] for f in report["figures"]
               if f["name"].startswith("semeru_total_vs_g1_"))
    assert str(report["env"]["fetch_delay_us"]) == "7"


def test_drust_profile_runs_a_workload_without_phases(tmp_path):
    """dsm-bench-drust --profile on gemm, which takes no timing parameter
    (kv and socialnet do): its runs go without it, and each protocol's
    profile, at 3 nodes and at 2, is in the env with a time per operation,
    a row per node and no phase."""
    report = run_json(tmp_path, "drust", ["--quick", "--profile", "--workloads", "gemm", "--runs", "3",
                                          "--transport", "shm"])
    for proto in ("own", "dir"):
        for suffix, nodes in (("", 3), ("/n=2", 2)):
            p = report["env"][f"gemm_profile_{proto}_shm{suffix}"]
            assert p["us_per_op"] > 0 and p["cpu_us_per_op"] > 0
            assert len(p["phases_us_per_op"]) == nodes
            assert all(v == 0 for node in p["phases_us_per_op"] for v in node.values())


def test_a_run_past_its_time_limit_says_what_it_printed_last(tmp_path, monkeypatch):
    # a stand-in benchmark that prints a figure and its progress, then
    # blocks until a signal: the limit's kill ends it and the error carries
    # both (5 s: the interpreter starts and prints well within it even on a
    # loaded host)
    prog = tmp_path / "dsm-bench-stuck"
    prog.write_text(f"#!{sys.executable}\n"
                    "import signal, sys\n"
                    "print('echo/shm/w=1  1.5 Mops/s', flush=True)\n"
                    "print('[stuck] step 2 of 5', file=sys.stderr, flush=True)\n"
                    "signal.pause()\n")
    prog.chmod(0o755)
    monkeypatch.setattr(_lib, "bench_path", lambda name: str(prog))
    monkeypatch.setenv("PYDSM_BENCH_TIMEOUT", "5")
    with pytest.raises(bench.BenchmarkFailed) as err:
        bench.run("stuck", quick=True, echo=False)
    text = str(err.value)
    assert "did not finish within 5 s" in text
    assert "echo/shm/w=1  1.5 Mops/s" in text and "[stuck] step 2 of 5" in text
    monkeypatch.setenv("PYDSM_BENCH_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="PYDSM_BENCH_TIMEOUT is seconds"):
        bench.run("stuck", quick=True, echo=False)


def test_an_anchor_runs_with_the_fabrics_ucx_settings(tmp_path):
    """ucx_child_env gives a child what libdsm gives a fabric on that
    transport (read from C: libdsm sets them where os.environ cannot see),
    never overrides the user's value, and takes out over shm only what it
    set for tcp. In a fresh interpreter: the settings are the process's."""
    script = r"""
import json, os
from pydsm import _lib
keys = ("UCX_PROTO_ENABLE", "UCX_TCP_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE")
tcp = _lib.ucx_child_env("tcp", UCX_TLS="tcp")
shm = _lib.ucx_child_env("shm")
print(json.dumps({"tcp": {k: tcp.get(k) for k in keys + ("UCX_TLS",)},
                  "shm": {k: shm.get(k) for k in keys}}))
"""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "DSM_UCX"))}

    def run(**env):
        # from tmp_path: in the checkout, `python -c` would import its unbuilt pydsm/
        out = subprocess.run([sys.executable, "-c", script], env=dict(clean, **env), check=True, cwd=tmp_path,
                             stdout=subprocess.PIPE, universal_newlines=True, timeout=120).stdout
        return json.loads(out)

    plain = run()
    assert plain["tcp"] == {"UCX_PROTO_ENABLE": "y", "UCX_TCP_TX_SEG_SIZE": "256k",
                            "UCX_TCP_RX_SEG_SIZE": "256k", "UCX_TLS": "tcp"}
    assert plain["shm"] == {"UCX_PROTO_ENABLE": "y", "UCX_TCP_TX_SEG_SIZE": None, "UCX_TCP_RX_SEG_SIZE": None}
    users = run(UCX_PROTO_ENABLE="n", UCX_TCP_TX_SEG_SIZE="64k")
    assert users["tcp"]["UCX_PROTO_ENABLE"] == "n" and users["tcp"]["UCX_TCP_TX_SEG_SIZE"] == "64k"
    assert users["tcp"]["UCX_TCP_RX_SEG_SIZE"] == "256k"
    assert users["shm"]["UCX_TCP_TX_SEG_SIZE"] == "64k" and users["shm"]["UCX_TCP_RX_SEG_SIZE"] is None
    with pytest.raises(_lib.DsmError, match="unknown transport"):
        _lib.ucx_child_env("carrier-pigeon")
