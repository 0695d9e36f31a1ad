"""Tests of the pure-Python parts: argument/result formats, sizes, errors, Result, info parsing."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pydsm
from pydsm import errors
from pydsm.workloads import _decode_result as decode_result, _encode_args as encode_args
from pydsm.info import parse_ucx_devices, parse_ucx_version
import warnings

from pydsm.result import OversubscribedWarning, Result, busy_threads, combine
from pydsm.units import format_size, parse_size

from conftest import REPO


def test_encode_args_formats_key_value_lines():
    text = encode_args({"iters": 10, "ratio": 0.5, "flag": True, "nodes": [0, 1], "name": "x"})
    assert text == b"iters=10\nratio=0.5\nflag=1\nnodes=0,1\nname=x\n"


@pytest.mark.parametrize("bad", [{"a=b": 1}, {"": 1}, {"k": "two\nlines"}])
def test_encode_args_rejects_bad_keys_and_values(bad):
    with pytest.raises(pydsm.InvalidArgument):
        encode_args(bad)


def test_decode_result_parses_name_value_unit():
    rows = decode_result(b"ops_per_sec 1234567.0 ops/s\nmean_latency_us 1.5 us\n\nweird x\n"
                         b"checksum 42  :first\nmessages_per_op 2 msgs :ratio=8/4\n")
    assert rows[0] == ("ops_per_sec", 1234567.0, "ops/s", "")
    assert rows[1] == ("mean_latency_us", 1.5, "us", "")
    assert rows[2][0] == "weird" and np.isnan(rows[2][1])
    assert rows[3] == ("checksum", 42, "", "first")
    assert rows[4] == ("messages_per_op", 2.0, "msgs", "ratio=8/4")


def test_result_combines_by_declared_kind():
    # What kv's nodes write (dsm_result_add_kind / _ratio): node 0 sent 3711
    # messages for 2000 ops, node 1 3700 for 2000: 7411 / 4000 = 1.85 per op,
    # not 1.8555 + 1.85.
    node0 = decode_result(b"ops 2000 ops\nmessages 3711 msgs :total\n"
                          b"messages_per_op 1.8555 msgs :ratio=3711/2000\nchecksum 77  :first\n"
                          b"cache_hits 5  :total\nlat 2 us :mean\nnodes 2 nodes :same\n")
    node1 = decode_result(b"ops 2000 ops\nmessages 3700 msgs :total\n"
                          b"messages_per_op 1.85 msgs :ratio=3700/2000\nchecksum 0  :first\n"
                          b"cache_hits 7  :total\nlat 4 us :mean\nnodes 3 nodes :same\n")
    r = Result("kv", {1: node1, 0: node0}, {})   # rank order: node 1 is rank_index 0
    assert r["messages_per_op"] == pytest.approx(7411 / 4000)
    assert r["messages"] == 7411 and r["cache_hits"] == 12 and r["lat"] == 3.0
    assert r["checksum"] == 0.0    # rank_index 0's (node 1 here), not a mean
    assert Result("kv", {0: node0, 1: node1}, {})["checksum"] == 77
    assert np.isnan(r["nodes"])    # must agree, and does not
    assert r.kind("messages_per_op") == "ratio" and r.kind("ops") == ""
    assert r.summary()["messages_per_op"] == (pytest.approx(1.85275), "msgs")
    assert r.to_dict()["summary"]["checksum"]["kind"] == "first"
    assert {f["kind"] for f in r.to_dict()["figures"] if f["name"] == "messages_per_op"} \
        == {"ratio=3711.0/2000.0", "ratio=3700.0/2000.0"}
    with pytest.raises(ValueError, match="unknown figure kind 'sum'"):
        Result("kv", {0: [("x", 1.0, "", "sum")]}, {})
    with pytest.raises(ValueError, match="undeclared on node 1"):
        Result("kv", {0: [("x", 1.0, "", "total")], 1: [("x", 1.0, "")]}, {})


@pytest.mark.parametrize("text,value", [("4096", 4096), ("64KiB", 65536), ("256MiB", 256 << 20),
                                        ("1G", 1 << 30), ("2MB", 2_000_000), (17, 17)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["-1", "12XB", "", -5, True, "1.5.2"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size():
    assert format_size(256 << 20) == "256MiB"
    assert format_size(1536) == "1.5KiB"
    assert format_size(12) == "12B"


def c_statuses():
    """{name: value} of every error of dsm_status_t, from the extension (whose
    declarations are generated from status.h)."""
    from pydsm import _lib
    elements = _lib.ext().ffi.typeof("dsm_status_t").relements
    return {name: value for name, value in elements.items() if value != 0}


def test_every_status_has_its_exception_class():
    from pydsm import _lib
    statuses = c_statuses()
    assert statuses and all(v < 0 for v in statuses.values())
    classes = {}
    for name, status in statuses.items():
        cls = errors.error_class(status)
        assert issubclass(cls, pydsm.DsmError) and cls is not pydsm.DsmError, name
        assert cls.status == status and cls.status_name == name
        assert _lib.status_name(status) == name
        classes[name] = cls
    assert len(set(classes.values())) == len(statuses)  # distinct classes
    # every class that names a status names one of C's
    assert {c.status_name for c in errors._CLASSES} == set(statuses)
    lib = _lib.ext().lib
    assert errors.error_class(lib.DSM_ERR_PEER_DEAD) is pydsm.PeerDead
    assert errors.error_class(lib.DSM_ERR_BAD_ADDR) is pydsm.BadAddress
    assert errors.error_class(lib.DSM_ERR_AUTH) is pydsm.AuthError
    assert errors.error_class(min(statuses.values()) - 1) is pydsm.DsmError


def test_c_messages_match_python_classes():
    from pydsm import _lib
    for status in c_statuses().values():
        exc = _lib.make_error(status, "ctx", node=2, address=0x1000, op="read")
        assert isinstance(exc, errors.error_class(status))
        assert exc.status_name == errors.error_class(status).status_name
        assert exc.c_message and exc.c_message in str(exc)
        assert "node 2" in str(exc) and "0x1000" in str(exc) and "read" in str(exc)


def test_stat_fields_come_from_dsm_stats_t():
    from pydsm import _lib
    from pydsm.workloads import stat_fields
    fields = stat_fields()
    assert fields[:3] == ("gets", "puts", "atomics") and "errors" in fields
    struct = dict(_lib.ext().ffi.typeof("dsm_stats_t").fields)
    assert set(fields) == {n for n, f in struct.items() if f.type.kind == "primitive"}
    assert "am_sent_by_handler" in struct and "am_sent_by_handler" not in fields


def test_global_address_layout_comes_from_heap_h():
    from pydsm import _lib
    from pydsm.session import node_of
    lib = _lib.ext().lib
    addr = lib.dsm_gaddr_make(5, 0x1234)
    assert addr == (5 << lib.DSM_GADDR_OFFSET_BITS) | 0x1234
    assert node_of(addr) == 5 == lib.dsm_gaddr_node(addr)
    coloured = lib.dsm_gaddr_with_colour(addr, 7)
    assert coloured >> lib.DSM_GADDR_COLOUR_SHIFT == 7 and lib.dsm_gaddr_strip(coloured) == addr
    assert lib.DSM_GADDR_OFFSET_BITS + lib.DSM_GADDR_NODE_BITS <= lib.DSM_GADDR_COLOUR_SHIFT


def test_error_classes_are_also_builtin_kinds():
    assert issubclass(pydsm.InvalidArgument, ValueError)
    assert issubclass(pydsm.OutOfMemory, MemoryError)
    assert issubclass(pydsm.Timeout, TimeoutError)
    assert issubclass(pydsm.NoPeer, LookupError)


def _result() -> Result:
    figs = {0: [("ops_per_sec", 100.0, "ops/s"), ("mean_latency_us", 2.0, "us")],
            1: [("ops_per_sec", 300.0, "ops/s"), ("mean_latency_us", 4.0, "us")]}
    stats = {0: {"gets": 1, "atomics": 10}, 1: {"gets": 2, "atomics": 30}}
    return Result("fetch_add", figs, stats, elapsed=1.25, params={"iters": 10})


def test_result_combines_rates_by_sum_and_latencies_by_mean():
    r = _result()
    assert r["ops_per_sec"] == 400.0
    assert r["mean_latency_us"] == 3.0
    assert combine([1.0, float("nan")], "us") == 1.0
    assert r.nodes == [0, 1]
    assert list(r.per_node("ops_per_sec").value) == [100.0, 300.0]
    assert r.figures.dtype.names == ("node", "name", "value", "unit")
    assert r.stats.atomics.sum() == 40 and r.totals()["gets"] == 3
    with pytest.raises(KeyError):
        r["nope"]


def test_result_rate_is_all_work_over_the_slowest_node():
    # node 0 did 1000 ops in 1 s, node 1 did 1000 ops in 4 s: the run did
    # 2000 ops in 4 s (500/s), not 1000 + 250 = 1250/s
    figs = {0: [("ops", 1000.0, "ops"), ("ops_per_sec", 1000.0, "ops/s")],
            1: [("ops", 1000.0, "ops"), ("ops_per_sec", 250.0, "ops/s")]}
    r = Result("fetch_add", figs, {})
    assert r["ops_per_sec"] == pytest.approx(500.0)
    assert r.rate("ops_per_sec") == pytest.approx(500.0)
    assert r["ops"] == 2000.0
    # a per-node "seconds" figure gives the spans directly
    figs = {0: [("round_trips_per_sec", 100.0, "ops/s"), ("seconds", 2.0, "s")],
            1: [("round_trips_per_sec", 50.0, "ops/s"), ("seconds", 8.0, "s")]}
    assert Result("echo", figs, {})["round_trips_per_sec"] == pytest.approx((200 + 400) / 8.0)
    # neither spans nor counts reported: the sum (nodes assumed to run alike)
    assert _result()["ops_per_sec"] == 400.0


def test_result_reports_oversubscription():
    with pytest.warns(OversubscribedWarning, match="4 busy threads on 2 cores"):
        r = Result("fetch_add", {0: [("ops", 1.0, "ops")]}, {}, busy_threads=4, cores=2)
    assert r.oversubscribed and r.to_dict()["oversubscribed"] is True
    assert "oversubscribed: 4 busy threads on 2 cores" in r.table()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = Result("fetch_add", {0: [("ops", 1.0, "ops")]}, {}, busy_threads=2, cores=2)
        unknown = Result("fetch_add", {0: [("ops", 1.0, "ops")]}, {})
    assert not ok.oversubscribed and not unknown.oversubscribed
    # a busy progress thread per node counts as a busy thread
    assert busy_threads(pydsm.Placement(threads=2), 3, "blocking") == 6
    assert busy_threads(pydsm.Placement(threads=1), 2, "busy") == 4


def test_result_table_and_json():
    r = _result()
    t = r.table()
    assert "ops_per_sec" in t and "node 1" in t and "400" in t and "stats.atomics" in t
    d = r.to_dict()
    assert d["summary"]["ops_per_sec"]["value"] == 400.0


def test_result_plot_writes_png(tmp_path):
    r = _result()
    path = tmp_path / "sub" / "r.png"
    fig = r.plot(path=str(path))
    assert path.exists() and path.stat().st_size > 1000
    assert len(fig.axes) == 2
    other = tmp_path / "old.png"
    with pytest.warns(DeprecationWarning, match="plot.path="):
        r.plot(str(other))   # type: ignore[arg-type]   # the path first, as before
    assert other.exists()
    with pytest.raises(TypeError, match="list of figure names"):
        r.plot("ops_per_sec")   # type: ignore[arg-type]


def _kv_like() -> Result:
    """A result with kv's 14 figures on 2 nodes."""
    lines = (b"ops 2000 ops\nops_per_sec 1000 ops/s\nseconds 2 s\ngets 1000 ops\nsets 1000 ops\n"
             b"checksum 77  :first\nmessages 3700 msgs :total\nbytes 10000 B :total\n"
             b"cache_hits 5  :total\ncache_misses 5  :total\nmoves 1  :total\n"
             b"invalidations 3 msgs :total\nheld_back 0  :total\n"
             b"messages_per_op 1.85 msgs :ratio=3700/2000\nbytes_per_op 5 B :ratio=10000/2000\n")
    return Result("kv", {0: decode_result(lines), 1: decode_result(lines.replace(b"77", b"0"))}, {})


def test_result_plot_default_is_a_grid_without_checksums():
    import matplotlib
    matplotlib.use("Agg")
    r = _kv_like()
    assert r.default_figures() == ["ops_per_sec", "seconds", "messages_per_op", "bytes_per_op"]
    fig = r.plot()
    shown = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title().split("\n")[0] for ax in shown] == r.default_figures()
    # 4 panels: a 2 x 3 grid, not one row of 15 panels as wide as the screen
    assert len(fig.axes) == 6 and fig.axes[0].get_subplotspec().get_gridspec().get_geometry() == (2, 3)
    w, h = fig.get_size_inches()
    assert w / h < 3
    chosen = r.plot(["ops_per_sec", "gets"], columns=1)
    assert chosen.axes[0].get_subplotspec().get_gridspec().get_geometry() == (2, 1)
    assert "all: 2000" in chosen.axes[1].get_title()
    with pytest.raises(KeyError, match="'nope'"):
        r.plot(["nope"])


def test_placement_validates():
    p = pydsm.Placement(threads=2, pin="compact", trustees="dedicated", memory_nodes=[0, 1])
    assert p.as_params() == {"threads": "2", "pin": "compact", "trustees": "dedicated",
                             "memory_nodes": "0,1"}
    for bad in ({"threads": 0}, {"pin": "diagonal"}, {"trustees": "some"}, {"threads": "2"}):
        with pytest.raises(pydsm.InvalidArgument):
            pydsm.Placement(**bad)


UCX_INFO = """#
# Memory domain: self
#     Component: self
#      Transport: self
#         Device: memory0
# Memory domain: tcp
#      Transport: tcp
#         Device: eth0
#      Transport: tcp
#         Device: lo
# Memory domain: posix
#      Transport: posix
#         Device: memory
#      Transport: rc_verbs
#         Device: mlx5_0:1
"""


def test_parse_ucx_info():
    pairs = parse_ucx_devices(UCX_INFO)
    assert ("tcp", "lo") in pairs and ("posix", "memory") in pairs and ("rc_verbs", "mlx5_0:1") in pairs
    assert parse_ucx_version("# Version 1.13.1\n# Git branch") == "1.13.1"
    assert parse_ucx_version("") is None


def test_cluster_cannot_be_built_directly():
    with pytest.raises(TypeError):
        pydsm.Cluster()


def test_lib_version_and_extension_load():
    assert pydsm.lib_version()
    from pydsm import _lib
    assert os.access(_lib.dsmd_path(), os.X_OK)


def test_one_version_for_c_python_and_metadata():
    from importlib.metadata import version
    assert pydsm.__version__ == pydsm.lib_version() == version("pydsm")
    with open(os.path.join(REPO, "VERSION")) as f:
        assert f.read().strip() == pydsm.__version__


def test_get_include_compiles_a_plugin(tmp_path):
    inc = pydsm.get_include()
    assert os.path.isfile(os.path.join(inc, "dsm", "dsm.h"))
    src = tmp_path / "plugin.c"
    src.write_text('#include "dsm/dsm.h"\n'
                   "dsm_status_t probe(dsm_node_t *n, dsm_gaddr_t a, uint64_t *old)\n"
                   "{ return dsm_fetch_add(n, dsm_gaddr_strip(a), 1, old); }\n")
    cc = os.environ.get("CC", "cc")
    p = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I", inc, str(src)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout


def test_sdk_calls_come_from_sdk_h_not_dsm_h(tmp_path):
    """A plugin's helpers, the fabric and the mechanisms' calls that run inside
    workloads (own's mutexes, delegation) are the SDK (dsm/sdk.h); the user
    API, dsm/dsm.h, which pydsm's CFFI declarations come from, has none."""
    inc = pydsm.get_include()
    body = ("dsm_status_t probe(dsm_node_t *n, const void *args, size_t len, uint64_t *iters)\n"
            "{ int bad = 0; *iters = dsm_param_u64(args, len, \"iters\", 1, &bad);\n"
            "  dsm_own_mutex_t m;\n"
            "  if (dsm_own_mutex_new(n, DSM_OWN_MUTEX_CAS, &m) != DSM_OK || !dsm_deleg_node_rt(n)) return DSM_ERR_STATE;\n"
            "  return dsm_node_fabric(n) && !bad ? DSM_OK : DSM_ERR_INVALID; }\n")
    cc = os.environ.get("CC", "cc")
    results = {}
    for header in ("sdk", "dsm"):
        src = tmp_path / f"with_{header}.c"
        src.write_text(f'#include "dsm/{header}.h"\n' + body)
        results[header] = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I", inc, str(src)],
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert results["sdk"].returncode == 0, results["sdk"].stdout
    assert results["dsm"].returncode != 0
    for name in ("dsm_param_u64", "dsm_node_fabric", "dsm_own_mutex_new", "dsm_deleg_node_rt"):
        assert name in results["dsm"].stdout


def test_demo_headline_table_keeps_named_figures(tmp_path):
    from pydsm.tools.demo import Demo
    d = Demo(str(tmp_path))
    d.add("bench/fabric", "get_8B_latency/shm", 0.5, "us", "ucx_perftest", 0.45, better="lower")
    d.add("bench/fabric", "get_4096B_latency/shm", 1.5, "us", "ucx_perftest", 1.4, better="lower")
    d.add("bench/trust", "fetch_add_1obj_uniform", 3.0, "x", "best_lock", 1.0, better="higher")
    d.add("bench/trust", "fetch_add_1obj_uniform/pause_ceiling", 41.0, "Mops/s", "best_lock", 20.0)
    d.add("bench/trust", "fetch_add_1obj_uniform/mcs", 14.0, "Mops/s", "best_lock", 20.0)
    d.add("cluster/shm", "driver_fetch_add_latency/shm", 2.0, "us", better="lower")
    short, full = d.table(headline_only=True), d.table()
    assert "get_8B_latency/shm" in short and "fetch_add_1obj_uniform" in short
    assert "fetch_add_1obj_uniform/pause_ceiling" in short
    assert "fetch_add_1obj_uniform/mcs" not in short and "fetch_add_1obj_uniform/mcs" in full
    assert "driver_fetch_add_latency/shm" in short
    assert "get_4096B_latency/shm" not in short and "get_4096B_latency/shm" in full


def test_ratio_plots_read_every_figure_so_that_above_one_is_better():
    from pydsm.tools.demo import LOSS_COLOUR, WIN_COLOUR, advantage, bar_colour
    # a latency half its anchor's is a 2x win, a rate half its anchor's a loss
    assert advantage(0.5, "lower") == pytest.approx(2.0)
    assert advantage(0.5, "higher") == pytest.approx(0.5)
    assert advantage(3.0, "lower") == pytest.approx(1 / 3)
    assert bar_colour(advantage(0.5, "lower")) == WIN_COLOUR
    assert bar_colour(advantage(0.5, "higher")) == LOSS_COLOUR
    assert bar_colour(advantage(3.0, "lower")) == LOSS_COLOUR
    for ratio, better in [(None, "higher"), (0.0, "lower"), (-1.0, "higher"), (2.0, "")]:
        assert advantage(ratio, better) is None


def test_the_demo_reads_the_hypervisor_steal_from_proc_stat(tmp_path):
    from pydsm.tools.demo import cpu_times, steal_share
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 0 0 10 40 7 0\ncpu0 50 0 25 400 0 0 5 20 3 0\n")
    before = cpu_times(str(stat))
    assert before == [100, 0, 50, 800, 0, 0, 10, 40, 7, 0]
    after = [300, 0, 100, 1300, 0, 0, 20, 240, 99, 0]   # guest time is inside user: not counted again
    assert steal_share(before, after) == pytest.approx(200 / (200 + 50 + 500 + 10 + 200))
    assert steal_share(before, before) is None          # no time passed
    assert steal_share(None, after) is None
    assert steal_share([1, 2, 3], after) is None        # a kernel without the steal column
    assert cpu_times(str(tmp_path / "absent")) is None
    stat.write_text("intr 1 2 3\n")
    assert cpu_times(str(stat)) is None


def test_the_demo_reads_the_guest_halt_polling(tmp_path):
    from pydsm.tools.demo import guest_halt_poll_ns
    param = tmp_path / "guest_halt_poll_ns"
    param.write_text("0\n")
    assert guest_halt_poll_ns(str(param)) == 0
    param.write_text("200000\n")
    assert guest_halt_poll_ns(str(param)) == 200000
    param.write_text("Y\n")
    assert guest_halt_poll_ns(str(param)) is None
    assert guest_halt_poll_ns(str(tmp_path / "absent")) is None   # bare metal: no haltpoll


def test_a_row_with_runs_takes_the_median_of_their_ratios(tmp_path):
    from pydsm.tools.demo import Demo

    d = Demo(str(tmp_path))
    # the medians' quotient (5 / 1) is no run's ratio: it mixes runs
    d.add("s", "paired", 5.0, "us", "a", 1.0, better="lower",
          reps=[9.0, 1.0, 4.0, 8.0, 5.0], anchor_reps=[9.0, 1.0, 1.0, 2.0, 0.5])
    d.add("s", "unpaired", 4.0, "us", "a", 2.0, better="lower", reps=[4.0, 5.0, 3.0])
    d.add("s", "given", 4.0, "us", "a", 2.0, ratio=1.5, reps=[4.0], anchor_reps=[2.0])
    rows = {r["name"]: r for r in d.rows}
    assert rows["paired"]["ratio"] == pytest.approx(4.0)   # median of 1, 1, 4, 4, 10
    assert rows["paired"]["ratio_spread"] == pytest.approx([1.0, 10.0])
    assert rows["unpaired"]["ratio"] == pytest.approx(2.0)
    assert rows["given"]["ratio"] == 1.5


def test_ratio_plot_colours_follow_the_direction(tmp_path):
    pytest.importorskip("matplotlib")
    from pydsm.tools.demo import LOSS_COLOUR, WIN_COLOUR, Demo
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    d = Demo(str(tmp_path))
    d.add("s", "lat_win", 1.0, "us", "a", 2.0, better="lower")
    d.add("s", "rate_loss", 1.0, "ops/s", "a", 2.0, better="higher")
    bars = []
    real_barh = plt.Axes.barh

    def spy(self, y, width, *a, **kw):
        bars.append((list(y), list(width), list(kw.get("color", []))))
        return real_barh(self, y, width, *a, **kw)

    plt.Axes.barh = spy
    try:
        d.plot_ratios()
    finally:
        plt.Axes.barh = real_barh
    assert len(d.plots) == 1 and os.path.getsize(d.plots[0]) > 0
    (names, widths, colours), = bars
    assert names == ["lat_win", "rate_loss"]
    assert widths == pytest.approx([2.0, 0.5])
    assert [mcolors.to_hex(c) for c in colours] == [WIN_COLOUR.lower(), LOSS_COLOUR.lower()]


def test_placement_is_a_value():
    a = pydsm.Placement(threads=2, memory_nodes=(1, 2))
    assert a == pydsm.Placement(2, memory_nodes=[1, 2]) and a != pydsm.Placement()
    assert repr(a) == ("Placement(threads=2, pin='none', trustees='shared', "
                       "memory_nodes=[1, 2], nodes=None)")
    assert a.as_params() == {"threads": "2", "pin": "none", "trustees": "shared", "memory_nodes": "1,2"}
    for bad in (dict(threads=0), dict(threads=True), dict(pin="x"), dict(trustees="x")):
        with pytest.raises(pydsm.InvalidArgument):
            pydsm.Placement(**bad)


def test_wire_helpers_and_tools_are_not_the_library_surface():
    """The argument/result text is private to pydsm.workloads; the tools
    live in pydsm.tools, and the CLI entry point still resolves."""
    import importlib

    import pydsm.workloads as wl
    for name in ("encode_args", "decode_result", "NodeTask"):
        assert name not in pydsm.__all__ and not hasattr(pydsm, name) and not hasattr(wl, name)
    assert wl._encode_args({"a": 1}) == b"a=1\n"
    # the parts' modules come with `import pydsm`, as their docstrings use them
    assert pydsm.mheap.RUN_DTYPE.names and pydsm.compact.CompactStore and pydsm.own.Box
    for tool in ("cli", "demo", "bench", "pathbench", "serve"):
        assert importlib.util.find_spec(f"pydsm.{tool}") is None
        assert importlib.import_module(f"pydsm.tools.{tool}")
    from importlib.metadata import entry_points
    eps = entry_points()
    scripts = eps.select(group="console_scripts") if hasattr(eps, "select") else eps["console_scripts"]
    assert [ep.value for ep in scripts if ep.name == "pydsm"] == ["pydsm.tools.cli:main"]


def test_oversubscribed_warning_names_the_callers_line():
    import warnings as w
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        Result("kv", {0: [("ops_per_s", 1.0, "ops/s")]}, {}, busy_threads=3, cores=2)
    (rec,) = [c for c in caught if issubclass(c.category, pydsm.OversubscribedWarning)]
    assert rec.filename == __file__, rec.filename   # this line, not pydsm's own
    assert "3 busy threads on 2 cores" in str(rec.message)


def test_build_names_the_missing_debian_packages(tmp_path, monkeypatch):
    """Without libucx-dev the install names the package, not CMake's bare
    "A required package was not found"."""
    from pydsm import _build_deps
    assert _build_deps.missing() == []     # this host built pydsm
    monkeypatch.setenv("PKG_CONFIG_LIBDIR", str(tmp_path))   # a host with no .pc files
    monkeypatch.setenv("PKG_CONFIG_PATH", "")
    assert _build_deps.missing() == ["libucx-dev", "libssl-dev"]
    with pytest.raises(SystemExit, match="sudo apt-get install libucx-dev libssl-dev"):
        _build_deps.check()


def test_progress_in_a_notebook_without_ipywidgets_does_not_warn(monkeypatch):
    """tqdm.auto warned "IProgress not found" in every notebook of an
    install without ipywidgets; the text bar needs none."""
    from pydsm import progress
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)      # import fails
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = progress.bar(total=2, desc="t", enabled=True)
        b.update(2)
        b.close()
    from tqdm.std import tqdm as text_bar
    from tqdm.notebook import tqdm as widget_bar
    assert type(b) is text_bar
    monkeypatch.delitem(sys.modules, "ipywidgets")   # the test extra has ipywidgets
    assert progress._tqdm_class() is widget_bar


def test_a_source_copy_shadowing_the_install_names_the_install(tmp_path):
    """A checkout first on sys.path (``python -m pytest`` run in it) has
    pydsm's sources but not its extension: the error says which copy was
    imported and where the built one is, not that nothing is built."""
    installed = os.path.dirname(pydsm.__file__)
    shadow = tmp_path / "pydsm"
    shadow.mkdir()
    for name in os.listdir(installed):
        if name.endswith(".py"):
            (shadow / name).write_bytes(open(os.path.join(installed, name), "rb").read())
    code = "import pydsm._lib as l\ntry:\n    l.ext()\nexcept ImportError as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ""}, timeout=60).stdout
    assert f"imported from {shadow}" in out, out
    assert f"ahead of the installed package at {installed}" in out, out
