"""``pydsm chaos``: a soak of the protocols under the fabric's chaos mode.

Starts a local cluster whose every fabric (the daemons' and this driver's)
runs with ``DSM_CHAOS=SEED:SPEC`` (delayed messages, late and split
writes, see the fabric's chaos spec), then runs rounds of workloads whose
answer is known, each against the single-process original: ``kv`` under
own and under dir (its final table's checksum) and a counter that every
node adds to (which must come out exact). It stops at the first wrong
answer, printing the ``DSM_CHAOS`` value that repeats the run, or when the
time is up.
"""
from __future__ import annotations

import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

KV: Dict[str, Any] = dict(buckets=16, keys=200, ops=1000)
COUNTER_ADDS = 200


@dataclass
class SoakReport:
    """What a soak did: rounds run, checks passed, the first failure."""

    chaos: str
    rounds: int = 0
    checks: int = 0
    failure: Optional[str] = None
    seconds: float = 0.0
    lines: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None


def soak(*, seed: Optional[int] = None, spec: str = "all", nodes: int = 3, fabric: str = "shm",
         rounds: Optional[int] = None, minutes: Optional[float] = None, echo: bool = True) -> SoakReport:
    """Run rounds under chaos until ``rounds`` are done or ``minutes`` pass
    (one round when neither is given); see the module's docstring."""
    from ..cluster import Cluster
    from ..result import OversubscribedWarning

    if seed is None:
        seed = random.SystemRandom().randrange(1, 2**31)
    chaos = f"{seed}:{spec}"
    report = SoakReport(chaos=chaos)

    def say(line: str) -> None:
        report.lines.append(line)
        if echo:
            print(line, file=sys.stderr, flush=True)

    deadline = time.monotonic() + minutes * 60 if minutes else None
    limit = rounds if rounds is not None else (None if minutes else 1)
    old = os.environ.get("DSM_CHAOS")
    os.environ["DSM_CHAOS"] = chaos   # the daemons inherit it; this driver's fabric reads it at join
    start = time.monotonic()
    say(f"pydsm chaos: {nodes} node(s) over {fabric}, DSM_CHAOS={chaos}")
    try:
        with warnings.catch_warnings(), Cluster.local(nodes=nodes, fabric=fabric, op_timeout_ms=30000, peer_timeout_ms=10000) as c:
            warnings.simplefilter("ignore", OversubscribedWarning)   # a soak fights for the cores
            n = len(c.nodes)
            original = c.run("kv", nodes=[c.nodes[0]], protocol="local", streams=n, seed=seed, **KV)
            want = int(original.per_node("checksum").value[0])
            while (limit is None or report.rounds < limit) and (deadline is None or time.monotonic() < deadline):
                t0 = time.monotonic()
                done: List[str] = []
                for protocol, lock in (("own", "deleg"), ("dir", "cas")):
                    with c.zeros(1 + 2 * KV["buckets"], np.uint64, node=c.nodes[0]) as directory:
                        res = c.run("kv", protocol=protocol, lock=lock, directory=directory, seed=seed, **KV)
                    got = int(res.per_node("checksum").value[0])
                    report.checks += 1
                    if got != want:
                        report.failure = (f"round {report.rounds + 1}: kv under {protocol}: checksum {got:#x}, "
                                          f"the original's {want:#x}")
                        break
                    done.append(f"kv/{protocol}")
                if report.failure is None:
                    with c.zeros(1, np.uint64, node=c.nodes[-1]) as counter:
                        c.run("fetch_add", counter=counter, iters=COUNTER_ADDS)
                        total = int(counter.read()[0])
                    report.checks += 1
                    if total != COUNTER_ADDS * n:
                        report.failure = (f"round {report.rounds + 1}: a counter every node added to "
                                          f"{COUNTER_ADDS} times reads {total}, not {COUNTER_ADDS * n}")
                    else:
                        done.append("counter")
                if report.failure is not None:
                    break
                report.rounds += 1
                say(f"round {report.rounds}: {', '.join(done)} right ({time.monotonic() - t0:.1f} s)")
    finally:
        if old is None:
            os.environ.pop("DSM_CHAOS", None)
        else:
            os.environ["DSM_CHAOS"] = old
        report.seconds = time.monotonic() - start
    if report.failure:
        say(f"FAILED {report.failure}\nrepeat with: DSM_CHAOS={chaos} (pydsm chaos --seed {seed} --spec {spec} "
            f"--nodes {nodes} --fabric {fabric})")
    else:
        say(f"pydsm chaos: {report.rounds} round(s), {report.checks} checks right in {report.seconds:.1f} s "
            f"(DSM_CHAOS={chaos})")
    return report
