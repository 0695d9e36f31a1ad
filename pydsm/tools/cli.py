"""The ``pydsm`` command: up, serve, info, bench, demo, run, chaos, version."""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from typing import Any, List, Optional, Sequence, Set


def _cmd_up(args: argparse.Namespace) -> int:
    from ..cluster import Cluster

    stop = {"flag": False}

    def on_term(signum: int, frame: object) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_term)
    print(f"starting {args.nodes} dsmd node(s) over {args.fabric} ...", file=sys.stderr, flush=True)
    with Cluster.local(nodes=args.nodes, fabric=args.fabric, partition=args.partition,
                       secret=args.secret) as c:
        info = c.connection_info()
        if args.json:
            print(json.dumps({**info, "nodes": c.nodes}), flush=True)
        else:
            print(f"pydsm cluster up: {len(c.nodes)} node(s) over {c.fabric}")
            print(f"coordinator: {info['coordinator']}")
            print(f"secret:      {info['secret']}")
            print("connect from Python:")
            print(f"  pydsm.Cluster.connect({info['coordinator']!r}, {info['secret']!r}, "
                  f"fabric={c.fabric!r})")
            print("run the tests against it:")
            print(f"  pytest --dsm-connect {info['coordinator']} --dsm-secret {info['secret']} "
                  f"--dsm-connect-fabric {c.fabric}")
            print("Ctrl-C (or SIGTERM) stops the cluster.", flush=True)
        deadline = time.monotonic() + args.time if args.time else None
        dead_reported: Set[int] = set()
        try:
            while not stop["flag"] and (deadline is None or time.monotonic() < deadline):
                time.sleep(0.2)
                for rank, p in enumerate(c.processes):
                    if p.poll() is not None and rank not in dead_reported:
                        dead_reported.add(rank)
                        print(f"node {rank} exited with status {p.returncode}", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            pass
        print("stopping the cluster ...", file=sys.stderr, flush=True)
    return 0


def _size_arg(text: str) -> int:
    """memcached's -I: bytes, or a number with k or m."""
    t = text.strip().lower()
    mult = {"k": 1024, "m": 1 << 20}.get(t[-1:], 1)
    try:
        return int(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (want bytes, or a number with k or m)") from None


def _cmd_serve(args: argparse.Namespace) -> int:
    from .serve import ServerFailed, serve_forever

    try:
        return serve_forever(args.host, args.port, args.workers, args.trustees, args.shards,
                             args.memory, args.max_conns, args.item_max, args.progress)
    except ServerFailed as exc:
        print(f"pydsm serve: {exc}", file=sys.stderr)
        return 1


def _cmd_info(args: argparse.Namespace) -> int:
    from .. import info

    data = info.gather()
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(info.report(data))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from . import bench

    if args.name == "list":
        names = bench.available()
        print("\n".join(names) if names else "no benchmark programs are built")
        return 0
    if args.list:
        try:
            rows = bench.cases(args.name)
        except (bench.BenchmarkMissing, bench.BenchmarkFailed) as exc:
            print(f"pydsm bench: {exc}", file=sys.stderr)
            return 2
        for r in rows:
            print(f"{r['figure']:<44} {r['unit']:<8} {r['better']:<6} vs {r['anchor']}")
        return 0
    try:
        rep = bench.run(args.name, quick=args.quick, json_path=args.json, extra_args=args.extra)
    except bench.BenchmarkMissing as exc:
        print(f"pydsm bench: {exc}", file=sys.stderr)
        return 2
    except bench.BenchmarkFailed as exc:
        print(f"pydsm bench: {exc}", file=sys.stderr)
        return 1
    print(f"benchmark {rep.get('bench', args.name)}{' (quick)' if args.quick else ''}: "
          f"{len(rep['figures'])} figures in {rep.get('elapsed_s', 0):.1f} s")
    print(bench.table([rep]))
    if args.json:
        print(f"JSON: {args.json}")
    if args.plot:
        try:
            n = bench.plot_series(rep, args.plot)
        except ValueError as exc:
            print(f"pydsm bench: {exc}", file=sys.stderr)
            return 1
        print(f"plot of {n} series: {args.plot}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    fabrics = args.fabric or None
    benches = [] if args.no_bench else args.bench
    return demo.main(results_dir=args.results, nodes=args.nodes, quick=not args.full, fabrics=fabrics,
                     benchmarks=benches, progress=True)


def _cmd_run(args: argparse.Namespace) -> int:
    from ..cluster import Cluster, Placement
    from ..workloads import PLACEMENT_KEYS, workload_info

    if args.workload in (None, "list"):
        from ..workloads import WorkloadInfo
        e_names = _builtin_workloads()
        print("workloads (pydsm run WORKLOAD --help for its parameters):")
        for name in e_names:
            info = workload_info(name) or WorkloadInfo(name)
            print(f"  {name:12s} {info.help}")
        return 0
    if args.help:
        described = workload_info(args.workload)
        if described is None:
            print(f"pydsm run: no workload named {args.workload!r} is described here "
                  f"(built in: {', '.join(_builtin_workloads())})", file=sys.stderr)
            return 2
        print(f"usage: pydsm run {args.workload} [key=value ...] [options]\n")
        print(described.describe())
        print("\noptions: --nodes N (3), --fabric shm|tcp|verbs|auto (shm), --threads T (1), "
              "--pin compact|scatter|none (none), --trustees dedicated|shared (shared), "
              "--memory-nodes RANKS, --across-nodes, --connect HOST:PORT --secret S, --plot PATH")
        return 0
    params = {}
    for kv in args.params:
        if "=" not in kv:
            print(f"pydsm run: parameter {kv!r} is not key=value", file=sys.stderr)
            return 2
        k, v = kv.split("=", 1)
        if k in PLACEMENT_KEYS:
            flag = f"--{k}" if k in ("threads", "pin", "trustees", "nodes") else "a Placement"
            print(f"pydsm run: {k} is set by {flag}, not as a key=value parameter", file=sys.stderr)
            return 2
        params[k] = v
    memory_nodes = None
    if args.memory_nodes:
        try:
            memory_nodes = [int(n) for n in args.memory_nodes.split(",")]
        except ValueError:
            print(f"pydsm run: --memory-nodes takes ranks like 1,2, not {args.memory_nodes!r}", file=sys.stderr)
            return 2
    placement = Placement(threads=args.threads, pin=args.pin, trustees=args.trustees, memory_nodes=memory_nodes)
    if args.connect:
        if args.across_nodes:
            print("pydsm run: --across-nodes starts the local cluster's daemons with a delegation runtime; "
                  "a deployed cluster's daemons get theirs where they are started (dsmd --deleg-threads)",
                  file=sys.stderr)
            return 2
        cluster = Cluster.connect(args.connect, args.secret or "", fabric=args.fabric)
    else:
        # --across-nodes: the Placement sizes a delegation runtime on every
        # daemon, so delegation workloads (sssp) put trustees on every node
        cluster = Cluster.local(nodes=args.nodes, fabric=args.fabric,
                                placement=placement if args.across_nodes else None)
    with cluster as c:
        counter = None
        if args.workload == "fetch_add" and "counter" not in params:
            import numpy as np
            counter = c.alloc(np.zeros(8, np.uint64), node=0)
            params["counter"] = counter
        nodes = None
        if args.workload == "semeru":
            # one program on the first node (the CPU server), its heap on the
            # memory servers (by default every other node), as c.mheap.run
            nodes = [c.nodes[0]]
            if placement.memory_nodes is None:
                placement.memory_nodes = [n for n in c.nodes if n != nodes[0]]
        # a bar on a terminal, none into a pipe or a log
        res = c.run(args.workload, placement, nodes=nodes, progress=None, **params)
        print(res.table())
        if args.plot:
            res.plot(path=args.plot)
            print(f"plot: {args.plot}")
    return 0


def _cmd_chaos(args: argparse.Namespace) -> int:
    from .chaos import soak

    seed = None if args.seed in (None, "random") else int(args.seed)
    report = soak(seed=seed, spec=args.spec, nodes=args.nodes, fabric=args.fabric, rounds=args.rounds,
                  minutes=args.minutes)
    return 0 if report.ok else 1


def _builtin_workloads() -> List[str]:
    from .. import _lib
    e = _lib.ext()
    _lib.load_apps()
    names: List[str] = []
    while (p := e.lib.dsm_registered_name(len(names))) != e.ffi.NULL:
        names.append(e.ffi.string(p).decode())
    return names


def _versions() -> str:
    import pydsm
    return f"pydsm {pydsm.__version__}, libdsm {pydsm.lib_version()}"


class _VersionAction(argparse.Action):
    """``--version``: libdsm's version is read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        print(_versions())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pydsm", description="rack-scale distributed shared memory toolkit")
    p.add_argument("--version", action=_VersionAction, help="print the versions of pydsm and libdsm and exit")
    sub = p.add_subparsers(dest="cmd", required=True)

    up = sub.add_parser("up", help="keep a local cluster up and print how to connect")
    up.add_argument("--nodes", type=int, default=4, help="daemons to start (default 4)")
    up.add_argument("--fabric", choices=["shm", "tcp", "verbs", "auto"], default="shm",
                    help="fabric of the cluster (default shm)")
    up.add_argument("--partition", default="256MiB", help="memory each daemon serves (default 256MiB)")
    up.add_argument("--secret", default=None, help="cluster secret (default: random)")
    up.add_argument("--time", type=float, default=0, help="stop after this many seconds (0: until Ctrl-C)")
    up.add_argument("--json", action="store_true", help="print the connection info as one JSON line")
    up.set_defaults(fn=_cmd_up)

    sv = sub.add_parser("serve", help="run a server built on pydsm (memcached over delegation)")
    sv.add_argument("what", choices=["memcached"], help="which server")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=11211, help="port (default 11211; 0 picks a free one)")
    sv.add_argument("--workers", type=int, default=2, help="connection threads, also shared trustees (default 2)")
    sv.add_argument("--trustees", type=int, default=None, help="extra dedicated trustee threads (default 0)")
    sv.add_argument("--shards", type=int, default=None, help="shards of the store (default: the server's)")
    sv.add_argument("--memory", type=int, default=None, metavar="MB",
                    help="item memory before LRU eviction, as memcached's -m (default 64)")
    sv.add_argument("--max-conns", type=int, default=None, help="open connections served (default 1024)")
    sv.add_argument("-I", "--item-max", type=_size_arg, default=None, metavar="SIZE",
                    help="largest item, e.g. 1m or 2048k (default 1m)")
    from .serve import MemcachedServer
    sv.add_argument("--progress", choices=MemcachedServer.PROGRESS, default=None,
                    help="how an idle worker waits for its next request (default adaptive: it polls a "
                         "moment first while that pays and a core is spare)")
    sv.set_defaults(fn=_cmd_serve)

    info = sub.add_parser("info", help="transports, UCX version, RDMA devices")
    info.add_argument("--json", action="store_true", help="print it as JSON")
    info.set_defaults(fn=_cmd_info)

    b = sub.add_parser("bench", help="run a benchmark program (NAME or 'list')",
                       usage="pydsm bench NAME [--quick] [--list] [--json PATH] [--plot PNG] [-- ARGS...]",
                       description="Run benchmark program dsm-bench-NAME and print its figures beside "
                                   "their anchors. 'pydsm bench list' lists the built ones; everything "
                                   "after '--' goes to the program, e.g. "
                                   "'pydsm bench trust --quick -- --only faa --objects 4'.")
    b.add_argument("name", help="a benchmark name, or 'list'")
    b.add_argument("--quick", action="store_true", help="the small version (under a minute)")
    b.add_argument("--list", action="store_true", help="print the program's figures and their anchors")
    b.add_argument("--json", metavar="PATH", default=None, help="write the JSON report here")
    b.add_argument("--plot", metavar="PNG", default=None,
                   help="draw the run's series (e.g. corm's reads over time while compacting) into this PNG "
                        "(default: none)")
    # filled by main() from everything after "--" (argparse's own "--"
    # handling does not reach a subcommand's positional list)
    b.set_defaults(extra=[])
    b.set_defaults(fn=_cmd_bench)

    d = sub.add_parser("demo", help="run every experiment in quick mode; one table, plots in results/")
    d.add_argument("--results", default="results", help="where figures, tables and plots go (default results/)")
    d.add_argument("--nodes", type=int, default=3, help="daemons of each local cluster (default 3)")
    d.add_argument("--fabric", action="append", choices=["shm", "tcp"], help="repeatable (default: shm and tcp)")
    d.add_argument("--full", action="store_true", help="full-size runs instead of quick ones")
    d.add_argument("--bench", action="append", metavar="NAME", help="only these benchmarks (repeatable)")
    d.add_argument("--no-bench", action="store_true", help="skip the benchmark programs")
    d.set_defaults(fn=_cmd_demo)

    r = sub.add_parser("run", add_help=False,
                       help="run a workload on a local (or deployed) cluster ('pydsm run list')",
                       description="Run WORKLOAD on every node; 'pydsm run list' lists the workloads, "
                                   "'pydsm run WORKLOAD --help' its parameters. Options and key=value "
                                   "parameters may come in any order.")
    r.add_argument("-h", "--help", action="store_true", help="this help, or WORKLOAD's parameters")
    r.add_argument("workload", nargs="?", help="a workload name, or 'list'")
    r.add_argument("params", nargs="*", help="key=value workload parameters")
    r.add_argument("--nodes", type=int, default=3, help="daemons of the local cluster (default 3)")
    r.add_argument("--fabric", choices=["shm", "tcp", "verbs", "auto"], default="shm",
                   help="fabric of the local cluster (default shm)")
    r.add_argument("--threads", type=int, default=1, help="threads per node (default 1)")
    r.add_argument("--pin", choices=["compact", "scatter", "none"], default="none",
                   help="CPU pinning of the threads (default none)")
    r.add_argument("--trustees", choices=["dedicated", "shared"], default="shared",
                   help="trustee threads of delegation workloads (default shared)")
    r.add_argument("--across-nodes", action="store_true",
                   help="delegation across nodes: every daemon of the local cluster gets a delegation runtime "
                        "of --threads threads with --trustees, and delegation workloads (sssp) put trustees "
                        "on every node")
    r.add_argument("--memory-nodes", metavar="RANKS", default=None,
                   help="memory servers of a workload that has them, e.g. 1,2 (semeru: default every node but "
                        "the first, which runs the program)")
    r.add_argument("--connect", metavar="HOST:PORT", default=None, help="run on a deployed cluster")
    r.add_argument("--secret", default=None, help="its secret (with --connect)")
    r.add_argument("--plot", metavar="PATH", default=None, help="save the result's plot here")
    r.set_defaults(fn=_cmd_run)

    ch = sub.add_parser("chaos", help="soak the protocols under the fabric's chaos mode (DSM_CHAOS)")
    ch.add_argument("--seed", default=None, help="chaos seed (default: drawn and printed)")
    ch.add_argument("--spec", default="all",
                    help="what to inject: all, or e.g. delay=30,max_us=500,late=30,split=50 (default all)")
    ch.add_argument("--nodes", type=int, default=3, help="daemons of the local cluster (default 3)")
    ch.add_argument("--fabric", default="shm", choices=["shm", "tcp"], help="fabric (default shm)")
    ch.add_argument("--rounds", type=int, default=None, help="rounds to run (default 1 without --minutes)")
    ch.add_argument("--minutes", type=float, default=None, help="run rounds for this long")
    ch.set_defaults(fn=_cmd_chaos)

    v = sub.add_parser("version", help="versions of pydsm and libdsm")
    v.set_defaults(fn=lambda a: (print(_versions()), 0)[1])
    return p


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        choices: Any = getattr(action, "choices", None) or {}
        if name in choices:
            found: argparse.ArgumentParser = choices[name]
            return found
    raise KeyError(name)


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the console script.

    ``pydsm bench NAME [--quick] -- ARGS...`` hands ARGS to the benchmark
    program, e.g. ``pydsm bench trust --quick -- --only faa --objects 4``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # libdsm's and UCX's lines come through logging (pydsm.log): show warnings up
    logging.basicConfig(level=logging.WARNING, format="[%(name)s %(levelname)s] %(message)s")
    passthrough: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    if argv[:1] == ["run"]:
        # options and key=value parameters in any order (argparse mixes them
        # only without subparsers, so 'run' parses on its own)
        run = _subparser(parser, "run")
        args = run.parse_intermixed_args(argv[1:])
        args.cmd = "run"
        if args.help and args.workload is None:
            run.print_help()
            return 0
    else:
        args = parser.parse_args(argv)
    if passthrough:
        if args.cmd != "bench":
            parser.error(f"'--' passes arguments to a benchmark program; 'pydsm {args.cmd}' takes none")
        args.extra = passthrough
    try:
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from ..errors import DsmError
        if isinstance(exc, (DsmError, FileNotFoundError, ImportError)):
            print(f"pydsm {args.cmd}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
