"""What an ansible-playbook run changed, read from its output (the default
callback): the PLAY RECAP's changed=N of each host and the tasks and
handlers that reported "changed" for it. scripts/deploy-test.sh runs
deploy.yml twice and checks the second run with

    python tests/deploy/recap.py --expect-unchanged LOG

which exits 1 naming every host with changed > 0 and the tasks behind it."""
from __future__ import annotations

import argparse
import re
import sys
from typing import Dict, List

_TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<name>.*)\] \**$")
_CHANGED = re.compile(r"^changed: \[(?P<host>[^\]\s]+)(?: -> [^\]]+)?\]")
_RECAP = re.compile(r"^(?P<host>\S+)\s+: ok=\d+\s+changed=(?P<changed>\d+)\s")


def recap(log: str) -> Dict[str, int]:
    """changed=N per host from the PLAY RECAP (the last one if several)."""
    out: Dict[str, int] = {}
    for block in log.split("PLAY RECAP")[1:]:
        out = {m["host"]: int(m["changed"]) for m in map(_RECAP.match, block.splitlines()) if m}
    return out


def changed_tasks(log: str) -> Dict[str, List[str]]:
    """host -> the tasks and handlers that reported changed for it, in run order."""
    out: Dict[str, List[str]] = {}
    task = "?"
    for line in log.splitlines():
        t = _TASK.match(line)
        if t:
            task = t["name"]
            continue
        c = _CHANGED.match(line)
        if c and task not in out.setdefault(c["host"], []):
            out[c["host"]].append(task)
    return out


def unchanged_problems(log: str) -> List[str]:
    """One line per host the run changed (empty when changed=0 everywhere)."""
    counts = recap(log)
    if not counts:
        return ["no PLAY RECAP in the log: the run did not finish"]
    tasks = changed_tasks(log)
    return [f"{host}: changed={n}: {'; '.join(tasks.get(host, ['(tasks not found in the log)']))}"
            for host, n in sorted(counts.items()) if n > 0]


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="output of ansible-playbook (default callback)")
    ap.add_argument("--expect-unchanged", action="store_true", help="exit 1 unless every host has changed=0")
    args = ap.parse_args(argv)
    with open(args.log) as f:
        log = f.read()
    problems = unchanged_problems(log)
    if args.expect_unchanged and problems:
        print("a second deploy.yml run must change nothing, but it changed:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    for host, n in sorted(recap(log).items()):
        print(f"{host}: changed={n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
