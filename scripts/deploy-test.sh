#!/usr/bin/env bash
# `make deploy-test`: the deployment path for real, on 3 namespace test hosts
# of this machine (scripts/testhosts.sh; needs root):
#   1. ansible-lint of playbooks/ (production profile)
#   2. the hosts up (the Debian packages the playbook installs put on this
#      machine first: the hosts share its filesystem, without a registry);
#      ansible-playbook playbooks/deploy.yml against them
#      (preflight, common, rdma (skips: no RDMA device), pydsm from a wheel
#      built here, dsmd under the supervised fallback, verify of every pair),
#      then again: the second run must report changed=0 on every host
#   3. the cluster tests of tests/py (test_memory.py) with --dsm-connect over
#      tcp against the deployed cluster
#   4. tests/deploy: bad input (unreachable host, missing secret, version
#      mismatch, another cluster's secret, a failing pair) and faults (a
#      killed dsmd, a cut link, 1 % loss); prints the detect/rejoin times
#   5. playbooks/teardown.yml (purge) and a check that nothing is left
#   6. the hosts down (also on failure; KEEP_HOSTS=1 keeps them)
# Environment: VENV (.venv), LINT=0 skips step 1.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VENV=${VENV:-.venv}
PY=$REPO/$VENV/bin/python
TH=$REPO/scripts/testhosts.sh
export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 ANSIBLE_PYTHON_INTERPRETER=auto_silent

say() { printf '[deploy-test] %s\n' "$*"; }
step_t0=$SECONDS
step() { say "($((SECONDS - step_t0)) s) $*"; }

[ "$(id -u)" -eq 0 ] || { say "needs root (network namespaces, a bridge, sshd): run as root"; exit 1; }
for tool in ansible-playbook ansible-lint; do
    [ -x "$VENV/bin/$tool" ] || { say "$VENV/bin/$tool is missing: run scripts/bootstrap.sh"; exit 1; }
done

cleanup() {
    local rc=$?
    [ -z "$lint_pid" ] || kill "$lint_pid" 2>/dev/null || true
    if [ "${KEEP_HOSTS:-0}" = 1 ]; then
        say "KEEP_HOSTS=1: the test hosts stay up (scripts/testhosts.sh down removes them)"
    else
        "$TH" down >/dev/null 2>&1 || true
    fi
    [ $rc -eq 0 ] && say "passed in $((SECONDS - step_t0)) s" || say "FAILED (status $rc)"
}
trap cleanup EXIT

# ansible-lint runs beside the deployment; its verdict is checked at the end.
lint_pid=
if [ "${LINT:-1}" = 1 ]; then
    step "ansible-lint playbooks/ (in the background)"
    mkdir -p build-deploy
    (cd playbooks && exec "$REPO/$VENV/bin/ansible-lint" --offline --nocolor) > build-deploy/ansible-lint.log 2>&1 &
    lint_pid=$!
fi

# The hosts share this machine's filesystem and reach no package registry
# (dsm_apt_update: false): what the playbook installs on them must be here
# already. A fresh machine lacks some (ibverbs-utils, infiniband-diags).
host_pkgs=$("$PY" - <<'PYEOF'
import yaml
need = []
for role, key in (("common", "dsm_common_packages"), ("rdma", "dsm_rdma_packages")):
    with open(f"playbooks/roles/{role}/defaults/main.yml") as f:
        need += yaml.safe_load(f)[key]
print(" ".join(need))
PYEOF
)
missing=()
for p in $host_pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    step "installing here what the playbook installs on the hosts: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

step "test hosts up"
"$TH" down >/dev/null 2>&1 || true
"$TH" up
INV=$("$TH" inventory)
STATE=$(dirname "$INV")
LOGS=$REPO/build-deploy

step "ansible-playbook -i $INV playbooks/deploy.yml"
"$VENV/bin/ansible-playbook" -i "$INV" playbooks/deploy.yml > "$LOGS/deploy.log" 2>&1 \
    || { tail -n 60 "$LOGS/deploy.log"; say "deploy.yml failed (log: $LOGS/deploy.log)"; exit 1; }
sed -n '/How to connect/,/PLAY RECAP/p' "$LOGS/deploy.log" | grep -E '^ +"' || true
grep -E '^pydsmh[0-9]+ +:' "$LOGS/deploy.log"

# Idempotence: the same playbook again must report changed=0 on every host
# (recap.py names the tasks that changed otherwise).
step "ansible-playbook -i $INV playbooks/deploy.yml again: nothing may change"
"$VENV/bin/ansible-playbook" -i "$INV" playbooks/deploy.yml > "$LOGS/deploy-again.log" 2>&1 \
    || { tail -n 60 "$LOGS/deploy-again.log"; say "deploy.yml failed the second time (log: $LOGS/deploy-again.log)"; exit 1; }
grep -E '^pydsmh[0-9]+ +:' "$LOGS/deploy-again.log"
"$PY" tests/deploy/recap.py --expect-unchanged "$LOGS/deploy-again.log" \
    || { say "deploy.yml is not idempotent (log: $LOGS/deploy-again.log)"; exit 1; }

export PYDSM_TH_INVENTORY=$INV
export PYDSM_TH_COORD=10.213.0.11:7710
export PYDSM_TH_SECRET_FILE=$STATE/cluster.secret
export PYDSM_TH_BRIDGE=${PYDSM_TH_BRIDGE:-pydsmbr0}

step "pytest tests/py/test_memory.py --dsm-connect $PYDSM_TH_COORD (tcp, through $PYDSM_TH_BRIDGE)"
"$VENV/bin/pytest" -q -p no:cacheprovider tests/py/test_memory.py --dsm-connect "$PYDSM_TH_COORD" \
    --dsm-secret "$(cat "$PYDSM_TH_SECRET_FILE")" --dsm-connect-fabric tcp --dsm-net-device "$PYDSM_TH_BRIDGE"

step "pytest tests/deploy (bad input, faults)"
"$VENV/bin/pytest" -q -p no:cacheprovider -rs tests/deploy

step "ansible-playbook playbooks/teardown.yml"
"$VENV/bin/ansible-playbook" -i "$INV" playbooks/teardown.yml > "$LOGS/teardown.log" 2>&1 \
    || { tail -n 40 "$LOGS/teardown.log"; say "teardown.yml failed (log: $LOGS/teardown.log)"; exit 1; }
grep -E '^pydsmh[0-9]+ +:' "$LOGS/teardown.log"
for i in 1 2 3; do
    left=$("$TH" ssh "$i" 'find /opt/pydsm /etc/pydsm /run/pydsm /var/lib/pydsm /var/log/pydsm -mindepth 1 2>/dev/null | head -n 5; id pydsm 2>/dev/null || true')
    [ -z "$left" ] || { say "teardown left on pydsmh$i: $left"; exit 1; }
    for pid in $(ip netns pids "pydsmh$i"); do
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dsmd ] || { say "teardown left dsmd pid $pid on pydsmh$i"; exit 1; }
    done
done
step "teardown left nothing behind"

if [ -n "$lint_pid" ]; then
    step "ansible-lint verdict"
    if wait "$lint_pid"; then
        lint_pid=
        grep -E '^(Passed|Failed)' build-deploy/ansible-lint.log
    else
        lint_pid=
        grep -v "PATH altered" build-deploy/ansible-lint.log | tail -n 40
        say "ansible-lint failed (log: build-deploy/ansible-lint.log)"
        exit 1
    fi
fi
