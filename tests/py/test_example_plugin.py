"""The example plugin (examples/plugin/tally.c), built as a plugin author
would, against pydsm.get_include() alone, and run with
Cluster.local(plugin=...): the driver lists its workload, checks its
arguments, and its integer figure comes back exactly."""
import os
import subprocess

import numpy as np
import pytest

import pydsm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tally_so(tmp_path_factory):
    out = tmp_path_factory.mktemp("plugin") / "libtally.so"
    cc = os.environ.get("CC", "cc")
    p = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-O2",
                        "-I", pydsm.get_include(), "-o", str(out),
                        os.path.join(REPO, "examples", "plugin", "tally.c")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    return str(out)


def test_example_plugin_runs_and_is_described(tally_so):
    start = (1 << 60) + 1            # past float64's exact integers
    with pydsm.Cluster.local(nodes=2, fabric="shm", partition="16MiB", plugin=tally_so) as c:
        listed = c.workloads()
        assert "tally" in listed and "echo" in listed       # the plugin's beside the apps plugin's
        assert [p.name for p in listed["tally"].params] == ["total", "adds", "step"]
        assert listed["tally"].params[0].default == "0"     # the run makes one
        total = c.alloc(np.array([start], np.uint64), node=0)
        r = c.run("tally", total=total, adds=50, step=3)
        final = start + 2 * 50 * 3
        assert int(total.read()[0]) == final
        lasts = [r.integer("last", node=n) for n in r.nodes]
        # the later node's last add saw the counter one step short of the end
        assert max(lasts) == final - 3
        assert all(start <= v < final for v in lasts)
        assert r.integer("adds", node=r.nodes[0]) == 50
        assert r.to_dict()["figures"][0]["value"] in lasts
        with pytest.raises(ValueError, match="not an integer figure"):
            r.integer("adds_per_sec", node=r.nodes[0])


def test_example_plugin_bad_argument_is_named_on_the_driver(tally_so):
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="16MiB", plugin=tally_so) as c:
        total = c.alloc(np.zeros(1, np.uint64), node=0)
        with pytest.raises(pydsm.InvalidArgument, match=r"tally: unknown parameter 'stpe' \(tally takes total, adds, step\)"):
            c.run("tally", total=total, stpe=2)
        with pytest.raises(pydsm.InvalidArgument, match="tally: parameter 'adds' takes an unsigned integer"):
            c.run("tally", total=total, adds="many")
        assert "adds must be at least 1" in str(pytest.raises(pydsm.InvalidArgument, c.run, "tally",
                                                               total=total, adds=0).value)


def test_a_plugin_workload_gets_its_scratch_memory_made(tally_so):
    """A counter the caller leaves out is made by the run, zeroed, as the
    plugin's scratch_bytes asks: every node's adds land on the one counter,
    and the next run gets a fresh one (its counter starts from zero again)."""
    with pydsm.Cluster.local(nodes=2, fabric="shm", partition="16MiB", plugin=tally_so) as c:
        for _ in range(2):
            r = c.run("tally", adds=40, step=5)
            lasts = [r.integer("last", node=n) for n in r.nodes]
            assert max(lasts) == 2 * 40 * 5 - 5 and min(lasts) >= 0


def test_a_missing_plugin_fails_before_any_daemon_starts(tmp_path):
    with pytest.raises(pydsm.InvalidArgument, match="cannot load plugin"):
        pydsm.Cluster.local(nodes=1, fabric="shm", partition="16MiB", plugin=str(tmp_path / "nope.so"))


def test_get_include_names_the_headers():
    inc = pydsm.get_include()
    assert os.path.isfile(os.path.join(inc, "dsm", "workload.h"))
