"""Processes: nothing left behind after close, an exception, Ctrl-C or SIGKILL
of the driver; failures at start-up; a daemon killed mid-run; connect."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import pytest

import pydsm
from conftest import DAEMONS_WAIT_S, dsmd_pids, stacks_of, wait_until


def test_close_reaps_every_daemon():
    with pydsm.Cluster.local(nodes=3, fabric="shm", partition="16MiB") as c:
        marker = c.coordinator
        pids = [p.pid for p in c.processes]
        assert sorted(dsmd_pids(marker)) == sorted(pids)
    assert dsmd_pids(marker) == []
    assert all(p.returncode is not None for p in c.processes)
    assert c.closed


def test_exception_inside_with_block_cleans_up():
    marker = None
    with pytest.raises(RuntimeError, match="boom"):
        with pydsm.Cluster.local(nodes=2, fabric="tcp", partition="16MiB") as c:
            marker = c.coordinator
            assert len(dsmd_pids(marker)) == 2
            raise RuntimeError("boom")
    assert dsmd_pids(marker) == []


DRIVER = textwrap.dedent("""
    import sys, threading, time, pydsm
    def start():
        return pydsm.Cluster.local(nodes=3, fabric=sys.argv[1], partition="16MiB")
    if sys.argv[2] == "thread":
        # started from a non-main thread: no PDEATHSIG, daemons must notice the
        # coordinator (in this process) is gone
        box = []
        t = threading.Thread(target=lambda: box.append(start())); t.start(); t.join()
        c = box[0]
    else:
        c = start()
    if sys.argv[3] == "sigint":
        try:
            # ready only inside the try: a Ctrl-C right after the line is read
            # must find the handler in place
            print(c.coordinator, flush=True)
            time.sleep(600)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            c.close(); print("closed", flush=True); sys.exit(0)
    print(c.coordinator, flush=True)
    time.sleep(600)
""")


def _as_from_a_terminal() -> None:
    """A shell that starts a command from a terminal leaves SIGINT at its
    default, and Python then raises KeyboardInterrupt on it. A test runner
    started as a background job (`.ci/run &`) inherits SIGINT ignored, and
    Python leaves an ignored SIGINT ignored: the driver would never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_driver(fabric: str, how: str, end: str = "kill"):
    p = subprocess.Popen([sys.executable, "-c", DRIVER, fabric, how, end], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal,
                         cwd="/")  # not the checkout: import the installed pydsm
    line = p.stdout.readline().strip()
    if not line:
        p.kill()
        raise AssertionError("driver did not start: " + p.stderr.read()[-2000:])
    return p, line


@pytest.mark.parametrize("fabric,how", [("shm", "main"), ("tcp", "main"), ("shm", "thread")])
def test_sigkill_of_driver_leaves_no_daemon(fabric, how):
    p, marker = _start_driver(fabric, how)
    try:
        assert wait_until(lambda: len(dsmd_pids(marker)) == 3, DAEMONS_WAIT_S)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        assert wait_until(lambda: dsmd_pids(marker) == [], DAEMONS_WAIT_S), f"dsmd left behind: {dsmd_pids(marker)}"
        # a SIGKILL runs no finaliser: the driver's log folder stays, until
        # the next local cluster on this host sweeps it
        orphans = glob.glob(os.path.join(tempfile.gettempdir(), f"pydsm-{p.pid}-*"))
        assert orphans
        with pydsm.Cluster.local(nodes=1, fabric="shm", partition="4MiB"):
            pass
        assert not [o for o in orphans if os.path.exists(o)]
    finally:
        for pid in dsmd_pids(marker):
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()


def test_ctrl_c_in_driver_stops_cluster():
    p, marker = _start_driver("shm", "main", "sigint")
    try:
        assert wait_until(lambda: len(dsmd_pids(marker)) == 3, DAEMONS_WAIT_S)
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=20)   # close takes ~1 s; 20 for a loaded host
        except subprocess.TimeoutExpired:
            stacks = stacks_of(p.pid)
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"driver still running 20 s after SIGINT; stdout {out!r}\n"
                                 f"stderr {err[-2000:]}\nstacks:\n{stacks}")
        assert "closed" in out and p.returncode == 0, f"exit {p.returncode}: {err[-2000:]}"
        assert wait_until(lambda: dsmd_pids(marker) == [], DAEMONS_WAIT_S)
    finally:
        for pid in dsmd_pids(marker):
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()


def _blocked_signals(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))


def test_library_threads_leave_signals_to_the_application():
    """A process-wide SIGINT may be delivered to any thread that does not
    block it; taken by one of libdsm's threads (or UCX's), Python's handler
    runs there and a main thread asleep in time.sleep never raises
    KeyboardInterrupt. So every thread the library starts blocks them."""
    with pydsm.Cluster.local(nodes=2, fabric="tcp", partition="16MiB") as c:
        c.alloc(np.zeros(1, np.uint64), node=1).fetch_add(1)   # endpoints up
        threads = {}
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            if name.startswith("dsm-") or name == "async":
                threads[f"{name}/{tid}"] = _blocked_signals(int(tid))
    assert any(n.startswith("dsm-progress") for n in threads) and any(n.startswith("async") for n in threads), threads
    wanted = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGALRM}
    for name, mask in threads.items():
        missing = [s.name for s in wanted if not mask >> (s - 1) & 1]
        assert not missing, f"thread {name} takes {missing} (SigBlk {mask:#x})"
    assert not _blocked_signals(threading.get_native_id()) >> (signal.SIGINT - 1) & 1, "the caller's mask changed"


RUNNER = textwrap.dedent("""
    import sys, threading, time, numpy as np, pydsm
    with pydsm.Cluster.local(nodes=2, fabric="shm", partition="16MiB") as c:
        counter = c.alloc(np.zeros(1, np.uint64), node=0)
        print(c.coordinator, flush=True)
        task = c.submit("fetch_add", counter=counter, iters=10**12)
        def main_thread_waits_for_the_result():
            # the Ctrl-C must land inside result(), not in Thread.start() before it
            frame = sys._current_frames().get(threading.main_thread().ident)
            while frame is not None:
                if frame.f_code.co_name == "_wait" and frame.f_code.co_filename.endswith("workloads.py"):
                    return True
                frame = frame.f_back
            return False
        def tell_when_running():
            try:
                task.wait_started(60)   # generous: a daemon's thread starting on a loaded host
                deadline = time.monotonic() + 60   # as generous, for the main thread to reach the wait
                while not main_thread_waits_for_the_result() and time.monotonic() < deadline:
                    time.sleep(0.01)
                print("running" if main_thread_waits_for_the_result() else "main thread never waited", flush=True)
            except pydsm.Timeout as exc:
                print(exc, flush=True)
        threading.Thread(target=tell_when_running, daemon=True).start()
        try:
            task.result()
        except KeyboardInterrupt:
            t0 = time.monotonic()
            a = int(counter[0]); time.sleep(0.5); b = int(counter[0])
            print("interrupted", "stopped" if a == b else f"still climbing {a} -> {b}", flush=True)
    print(f"left the with block in {time.monotonic() - t0:.2f} s", flush=True)
""")


def test_ctrl_c_during_run_stops_the_work_on_the_daemons():
    p = subprocess.Popen([sys.executable, "-c", RUNNER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=_as_from_a_terminal, cwd="/")
    try:
        marker = p.stdout.readline().strip()
        assert marker, p.stderr.read()[-2000:]
        assert wait_until(lambda: len(dsmd_pids(marker)) == 2, DAEMONS_WAIT_S)
        assert p.stdout.readline().strip() == "running", p.stderr.read()[-2000:]
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert "interrupted stopped" in out, out + err[-2000:]
        assert "left the with block" in out and p.returncode == 0, out + err[-2000:]
        assert wait_until(lambda: dsmd_pids(marker) == [], DAEMONS_WAIT_S)
    finally:
        if p.poll() is None:
            p.kill()


def test_daemon_failing_at_start_is_reported_with_its_log(tmp_path):
    fake = tmp_path / "dsmd"
    fake.write_text("#!/bin/sh\necho 'fake dsmd: cannot map the partition' >&2\nexit 7\n")
    fake.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(pydsm.DaemonFailed) as ei:
        pydsm.Cluster.local(nodes=2, fabric="shm", dsmd=str(fake), start_timeout=20)
    assert time.monotonic() - t0 < 10
    assert "status 7" in str(ei.value) and "cannot map the partition" in str(ei.value)


def test_bad_arguments_to_local():
    for kw in ({"nodes": 0}, {"nodes": 500}, {"fabric": "carrier-pigeon"}, {"partition": "12XB"},
               {"partition": 100}, {"progress": "lazy"}):
        with pytest.raises(pydsm.InvalidArgument):
            pydsm.Cluster.local(**kw)


def test_verbs_without_rdma_devices_is_refused_at_once(monkeypatch):
    from pydsm import info
    monkeypatch.setattr(info, "rdma_devices", lambda: [])
    for start in (lambda: pydsm.Cluster.local(nodes=1, fabric="verbs"),
                  lambda: pydsm.Cluster.connect("127.0.0.1:1", "s", fabric="verbs")):
        with pytest.raises(pydsm.Unsupported, match="needs an RDMA device"):
            start()
    # with a device present, the check lets verbs through to the fabric
    monkeypatch.setattr(info, "rdma_devices", lambda: [{"device": "mlx5_0", "ports": []}])
    assert info.verbs_unavailable() is None


def test_connect_wrong_secret_is_auth_error(dsm_cluster_factory):
    c = dsm_cluster_factory(nodes=1)
    t0 = time.monotonic()
    with pytest.raises(pydsm.AuthError):
        pydsm.Cluster.connect(c.coordinator, "not-the-secret", fabric=c.fabric, timeout=10)
    assert time.monotonic() - t0 < 10
    # the cluster goes on
    with c.alloc(np.arange(4), node=0) as b:
        assert list(b.read()) == [0, 1, 2, 3]


def test_connect_bad_arguments_and_no_coordinator():
    with pytest.raises(pydsm.InvalidArgument):
        pydsm.Cluster.connect("no-port", "s")
    with pytest.raises(pydsm.InvalidArgument):
        pydsm.Cluster.connect("127.0.0.1:1", "")
    with pytest.raises(pydsm.DsmError):
        pydsm.Cluster.connect("127.0.0.1:1", "secret", timeout=3)


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_connect_shares_memory_with_local_driver(dsm_cluster_factory, fabric):
    c = dsm_cluster_factory(nodes=2, fabric=fabric)
    buf = c.alloc(np.arange(100, dtype=np.int32), node=1)
    with pydsm.Cluster.connect(c.coordinator, c.secret, fabric=fabric, nodes=2) as other:
        assert other.nodes == [0, 1] and other.rank != c.rank
        np.testing.assert_array_equal(other.read(buf.address, dtype=np.int32, shape=(100,)),
                                      np.arange(100))
        other.fetch_add(buf.address, 5)
    assert buf.read()[0] == 5
    # the other driver leaving does not hurt this one
    assert c.live_nodes() == [0, 1]


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_connect_with_auto_takes_the_cluster_fabric(dsm_cluster_factory, fabric):
    c = dsm_cluster_factory(nodes=2, fabric=fabric)
    buf = c.alloc(np.zeros(4, np.uint64), node=1)
    with pydsm.Cluster.connect(c.coordinator, c.secret, nodes=2) as other:   # fabric="auto"
        assert other.fabric == fabric
        other.fetch_add(buf.address, 3)
    assert buf.read()[0] == 3


@pytest.mark.parametrize("fabric", ["shm", "tcp"])
def test_daemon_killed_mid_run(dsm_cluster_factory, fabric):
    c = dsm_cluster_factory(nodes=3, fabric=fabric, peer_timeout_ms=1000, op_timeout_ms=3000)
    on1 = c.alloc(np.arange(8, dtype=np.uint64), node=1)
    on2 = c.alloc(np.arange(8, dtype=np.uint64), node=2)
    counter = c.alloc(np.zeros(1, np.uint64), node=0)
    task = c.spawn(2, "fetch_add", {"counter": counter, "iters": 10 ** 9})
    # killed mid-run: once the run's first additions have landed (the bound
    # only turns a hang into a failure)
    assert wait_until(lambda: int(counter[0]) > 0, timeout=60, interval=0.01)
    c.kill(2)
    t0 = time.monotonic()
    with pytest.raises(pydsm.PeerDead):
        task.result(timeout=30)
    with pytest.raises(pydsm.PeerDead) as ei:
        on2.read()
    assert ei.value.node == 2 and "node 2" in str(ei.value)
    with pytest.raises(pydsm.PeerDead):
        c.alloc(64, node=2)
    with pytest.raises(pydsm.PeerDead):
        c.run("fetch_add", nodes=[0, 1, 2], counter=counter, iters=10)
    assert time.monotonic() - t0 < 20
    # the others go on
    np.testing.assert_array_equal(on1.read(), np.arange(8))
    before = int(counter.read()[0])
    res = c.run("fetch_add", counter=counter, iters=100)  # live nodes only
    assert res.nodes == [0, 1]
    assert int(counter.read()[0]) == before + 200
    assert c.live_nodes() == [0, 1] and not c.node_alive(2)


def test_cancel_ends_a_workload_that_ignores_its_stop_flag(tmp_path):
    """The cooperative stop, then the kill: a workload that never polls its
    flag is ended by its daemon exiting after the grace (3 s), so cancel
    returns promptly with Cancelled naming why, and leaving the with is
    prompt too."""
    # the C tests' plugin: its "plugin_stubborn" never looks at its stop flag
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "c", "plugin_probe.c")
    so = tmp_path / "plugin.so"
    include = os.path.join(os.path.dirname(pydsm.__file__), "include")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-I", include, "-o", str(so), src], check=True)
    with pydsm.Cluster.local(nodes=2, fabric="shm", partition="16MiB", plugin=str(so)) as c:
        started = c.alloc(np.zeros(1, np.uint64), node=0)
        task = c.submit("plugin_stubborn", nodes=[c.nodes[1]], started=started.address)
        assert wait_until(lambda: int(started[0]) == 1, 60)   # generous: a loaded host
        t0 = time.monotonic()
        assert task.cancel()
        with pytest.raises(pydsm.Cancelled, match="ignored its stop flag") as info:
            task.result(timeout=30)
        took = time.monotonic() - t0
        assert f"on node {c.nodes[1]}:" in str(info.value)
        assert 2.5 < took < 10, took          # the daemon's grace is 3 s
        assert c.processes[1].wait(5) == 4    # dsmd's "ended a workload" status
        t1 = time.monotonic()
    assert time.monotonic() - t1 < 5


def test_partition_larger_than_the_host_is_refused_before_anything_starts(tmp_path):
    # 1 TiB per node (512 GiB for one dsmd): more than this
    # host has, in memory and in /dev/shm
    with pytest.raises(pydsm.OutOfMemory, match="does not fit in this host's available memory") as exc:
        pydsm.Cluster.local(nodes=2, fabric="shm", partition="1TiB")
    assert "use a smaller partition" in str(exc.value)
    # a dsmd joining a cluster refuses one too, before it allocates (its own
    # check, for deployments), and the cluster is unharmed
    with pydsm.Cluster.local(nodes=1, fabric="shm", partition="4MiB") as c:
        secret = tmp_path / "secret"
        secret.write_text(c.secret)
        p = subprocess.run([pydsm._lib.dsmd_path(), "--coordinator", c.coordinator, "--transport", "shm",
                            "--secret-file", str(secret), "--partition", "512GiB"],
                           capture_output=True, text=True, timeout=120)   # a join, then the refusal
        assert p.returncode != 0
        assert "does not fit" in p.stderr, p.stderr
        assert c.live_nodes() == [0]
        with c.zeros(4, np.uint64, node=0) as b:
            assert b.fetch_add(1) == 0
