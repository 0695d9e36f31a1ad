#!/usr/bin/env bash
# Test hosts on this machine for the Ansible playbooks: N network namespaces
# joined by veth pairs to a bridge of their own, each with its own address,
# hostname, private /etc/pydsm /opt/pydsm /var/lib/pydsm /var/log/pydsm
# /run/pydsm (bind mounts in a mount namespace of its own) and its own sshd
# (Debian openssh-server; host keys and a client key made at setup). The
# playbooks reach them as root@10.213.0.11.. like any remote machine.
#
#   scripts/testhosts.sh up          make the hosts (idempotent); writes an inventory
#   scripts/testhosts.sh down        remove them again (idempotent)
#   scripts/testhosts.sh status      list the hosts and whether their sshd answers
#   scripts/testhosts.sh inventory   path of the generated Ansible inventory
#   scripts/testhosts.sh ssh H CMD   run CMD on host H (1..N or its name) over ssh
#   scripts/testhosts.sh link H down|up     cut (or restore) host H's veth link
#   scripts/testhosts.sh loss H PCT|off     drop PCT % of the packets host H receives
#                                           (iptables statistic, inside H's namespace)
#
# There is no delay option: this machine has no netem qdisc (tc netem fails),
# and delaying kernel TCP in user space would need a proxy in every path.
#
# Environment: PYDSM_TH_HOSTS (3), PYDSM_TH_NET (10.213.0: hosts get .11, .12,
# ...; the bridge .1), PYDSM_TH_BRIDGE (pydsmbr0), PYDSM_TH_PREFIX (pydsmh),
# PYDSM_TH_DIR (build-deploy/hosts: keys, sshd configs, logs, host roots).
# Traffic stays on the bridge: the namespaces have no default route.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
N=${PYDSM_TH_HOSTS:-3}
NET=${PYDSM_TH_NET:-10.213.0}
BR=${PYDSM_TH_BRIDGE:-pydsmbr0}
PFX=${PYDSM_TH_PREFIX:-pydsmh}
STATE=${PYDSM_TH_DIR:-$REPO/build-deploy/hosts}
PRIVATE_DIRS=(/etc/pydsm /opt/pydsm /var/lib/pydsm /var/log/pydsm /run/pydsm)

say() { printf '[testhosts] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

host_ip() { echo "$NET.$((10 + $1))"; }
host_ns() { echo "$PFX$1"; }
host_veth() { echo "${PFX}${1}v"; }

# "2", "pydsmh2" -> 2
host_index() {
    local h=$1
    h=${h#"$PFX"}
    [[ $h =~ ^[0-9]+$ ]] && [ "$h" -ge 1 ] && [ "$h" -le "$N" ] || die "no test host '$1' (1..$N)"
    echo "$h"
}

ssh_opts() {
    echo "-i $STATE/ssh/id_ed25519 -o UserKnownHostsFile=$STATE/ssh/known_hosts -o StrictHostKeyChecking=yes" \
         "-o BatchMode=yes -o ConnectTimeout=5 -o LogLevel=ERROR"
}

need() {
    local missing=()
    for tool in ip sshd:/usr/sbin/sshd ssh-keygen unshare iptables; do
        local name=${tool%%:*} path=${tool#*:}
        [ "$path" = "$tool" ] && path=$name
        command -v "$path" >/dev/null 2>&1 || missing+=("$name")
    done
    [ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]} (apt-get install iproute2 openssh-server util-linux iptables)"
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, bridges and sshd need it)"
}

sshd_running() {
    local pidfile=$STATE/$(host_ns "$1")/sshd.pid
    [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

make_keys() {
    mkdir -p "$STATE/ssh"
    chmod 700 "$STATE/ssh"
    [ -f "$STATE/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C pydsm-testhosts -f "$STATE/ssh/id_ed25519"
    cp "$STATE/ssh/id_ed25519.pub" "$STATE/ssh/authorized_keys"
    : > "$STATE/ssh/known_hosts.new"
    for i in $(seq 1 "$N"); do
        local d=$STATE/$(host_ns "$i")
        mkdir -p "$d"
        [ -f "$d/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C "$(host_ns "$i")" -f "$d/ssh_host_ed25519_key"
        echo "$(host_ip "$i") $(cut -d' ' -f1,2 "$d/ssh_host_ed25519_key.pub")" >> "$STATE/ssh/known_hosts.new"
    done
    mv "$STATE/ssh/known_hosts.new" "$STATE/ssh/known_hosts"
}

make_network() {
    if ! ip link show "$BR" >/dev/null 2>&1; then
        ip link add "$BR" type bridge
    fi
    ip addr replace "$NET.1/24" dev "$BR"
    ip link set "$BR" up
    for i in $(seq 1 "$N"); do
        local ns veth
        ns=$(host_ns "$i"); veth=$(host_veth "$i")
        ip netns list | grep -qw "^$ns" || ip netns add "$ns"
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip -n "$ns" link del eth0 2>/dev/null || true
            ip link add "$veth" type veth peer name eth0 netns "$ns"
        fi
        ip link set "$veth" master "$BR" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr replace "$(host_ip "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
    done
}

start_sshd() {
    local i=$1 ns d
    ns=$(host_ns "$i"); d=$STATE/$ns
    sshd_running "$i" && return 0
    mkdir -p /run/sshd "$d/root"
    for p in "${PRIVATE_DIRS[@]}"; do mkdir -p "$p" "$d/root$p"; done
    cat > "$d/sshd_config" <<EOF
ListenAddress $(host_ip "$i")
Port 22
HostKey $d/ssh_host_ed25519_key
PidFile $d/sshd.pid
AuthorizedKeysFile $STATE/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
EOF
    local binds="hostname $ns"
    for p in "${PRIVATE_DIRS[@]}"; do binds+=" && mount --bind $d/root$p $p"; done
    # ip netns exec -> unshare (own mounts and hostname) -> sh -> exec sshd:
    # every ssh session, and every dsmd it starts, lives in this host.
    setsid ip netns exec "$ns" unshare --mount --uts --propagation private \
        sh -c "$binds && exec /usr/sbin/sshd -D -e -f $d/sshd_config" \
        </dev/null >>"$d/sshd.log" 2>&1 &
    local deadline=$((SECONDS + 30))
    # shellcheck disable=SC2046
    until ssh $(ssh_opts) "root@$(host_ip "$i")" true 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || { tail -n 20 "$d/sshd.log" >&2; die "sshd of $ns did not answer within 30 s"; }
        sleep 0.2
    done
}

write_inventory() {
    local inv=$STATE/inventory.yml
    {
        echo "# Generated by scripts/testhosts.sh up: the namespace test hosts."
        echo "all:"
        echo "  vars:"
        echo "    ansible_user: root"
        echo "    ansible_python_interpreter: /usr/bin/python3"
        echo "    ansible_ssh_private_key_file: $STATE/ssh/id_ed25519"
        echo "    ansible_ssh_common_args: -o UserKnownHostsFile=$STATE/ssh/known_hosts -o StrictHostKeyChecking=yes"
        echo "    dsm_cluster_name: testhosts"
        echo "    dsm_transport: tcp"
        echo "    dsm_net_device: eth0"
        echo "    dsm_client_net_device: $BR"
        echo "    dsm_partition: 64MiB"
        echo "    dsm_time_sync: none        # the hosts share this machine's clock"
        echo "    dsm_apt_update: false      # no registry from inside the namespaces"
        echo "    dsm_hugepages: 0           # a shared machine: leave vm.nr_hugepages alone"
        echo "    dsm_peer_timeout_ms: 3000"
        echo "    dsm_secret_local_file: $STATE/cluster.secret"
        echo "    dsm_teardown_purge: true"
        echo "    # 6 programs share 2 cores here: these check the path works, not its speed."
        echo "    dsm_verify_max_latency_us: 200000"
        echo "    dsm_verify_min_bandwidth_mbps: 1"
        echo "    dsm_verify_reads: 50"
        echo "    dsm_verify_bytes: 1048576"
        echo "    dsm_with_plots: false     # the hosts only run dsmd and the checks"
        echo "    ansible_pipelining: true"
        echo "  children:"
        echo "    dsm_nodes:"
        echo "      hosts:"
        for i in $(seq 1 "$N"); do
            echo "        $(host_ns "$i"):"
            echo "          ansible_host: $(host_ip "$i")"
        done
    } > "$inv"
    echo "$inv"
}

cmd_up() {
    need
    mkdir -p "$STATE"
    make_keys
    make_network
    for i in $(seq 1 "$N"); do start_sshd "$i"; done
    local inv
    inv=$(write_inventory)
    say "$N hosts up on $BR ($NET.0/24): $(for i in $(seq 1 "$N"); do printf '%s=%s ' "$(host_ns "$i")" "$(host_ip "$i")"; done)"
    say "inventory: $inv"
}

cmd_down() {
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    for i in $(seq 1 "$N"); do
        local ns
        ns=$(host_ns "$i")
        ip netns list | grep -qw "^$ns" || continue
        # Every process in the namespace was started by these hosts (sshd,
        # the sessions, the dsmd supervisors): end them, then the namespace.
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        # shellcheck disable=SC2086
        [ -z "$pids" ] || kill -TERM $pids 2>/dev/null || true
        for _ in $(seq 1 50); do
            [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
            sleep 0.1
        done
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        # shellcheck disable=SC2086
        [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    for i in $(seq 1 "$N"); do ip link del "$(host_veth "$i")" 2>/dev/null || true; done
    ip link del "$BR" 2>/dev/null || true
    # The empty mount points made at setup (never a directory with content).
    for p in "${PRIVATE_DIRS[@]}"; do rmdir "$p" 2>/dev/null || true; done
    rm -rf "$STATE"
    say "test hosts removed"
}

cmd_status() {
    for i in $(seq 1 "$N"); do
        local ns state=down
        ns=$(host_ns "$i")
        if ip netns list | grep -qw "^$ns"; then
            state="namespace up"
            sshd_running "$i" && state="$state, sshd pid $(cat "$STATE/$ns/sshd.pid")"
        fi
        echo "$ns $(host_ip "$i"): $state"
    done
}

cmd_ssh() {
    local i
    i=$(host_index "$1"); shift
    # shellcheck disable=SC2046
    exec ssh $(ssh_opts) "root@$(host_ip "$i")" "$@"
}

cmd_link() {
    local i
    i=$(host_index "$1")
    case ${2:-} in
        down|up) ip link set "$(host_veth "$i")" "$2" ;;
        *) die "usage: link HOST down|up" ;;
    esac
    say "$(host_ns "$i") link $2"
}

cmd_loss() {
    local i ns
    i=$(host_index "$1"); ns=$(host_ns "$i")
    # A chain of our own, jumped to from INPUT: flushing it removes the loss.
    local ipt=(ip netns exec "$ns" iptables)
    "${ipt[@]}" -N PYDSM_LOSS 2>/dev/null || true
    "${ipt[@]}" -C INPUT -j PYDSM_LOSS 2>/dev/null || "${ipt[@]}" -I INPUT -j PYDSM_LOSS
    "${ipt[@]}" -F PYDSM_LOSS
    case ${2:-} in
        off) say "$ns: no loss" ;;
        *)
            [[ ${2:-} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "usage: loss HOST PCT|off"
            local p
            p=$(awk -v pct="$2" 'BEGIN { printf "%.6f", pct / 100 }')
            "${ipt[@]}" -A PYDSM_LOSS -m statistic --mode random --probability "$p" -j DROP
            say "$ns: dropping $2 % of received packets"
            ;;
    esac
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    inventory) echo "$STATE/inventory.yml" ;;
    ssh) shift; [ $# -ge 1 ] || die "usage: ssh HOST [CMD...]"; cmd_ssh "$@" ;;
    link) shift; [ $# -eq 2 ] || die "usage: link HOST down|up"; cmd_link "$@" ;;
    loss) shift; [ $# -eq 2 ] || die "usage: loss HOST PCT|off"; cmd_loss "$@" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
