#!/usr/bin/env bash
# A cluster of N "hosts" on this one machine, made of Linux network namespaces, so that MPI runs
# cross a real network stack (TCP over veth links) instead of shared memory.
#
# Topology: host i is the namespace mpicnn-hI (hostname hI, address 10.77.0.I/24 on its eth0).
# Each eth0 is one end of a veth pair; the other ends (vhI) are ports of the bridge br0 in a
# "switch" namespace mpicnn-sw, so nothing is added to the root namespace's links and the
# root namespace's firewall never sees the traffic. Host names resolve through
# /etc/netns/mpicnn-hI/hosts, which `ip netns exec` (and so tests/hosts/netns_rsh) bind-mounts
# over /etc/hosts inside the namespace only; the real /etc/hosts is never touched.
# CPUs: namespaces do not split the machine's cores, so `up` also gives each host a share of
# them in /run/mpicnn-netns/hI.cpus (cores split evenly; round robin, one core each, when there
# are more hosts than cores) and netns_rsh / netns_mpiexec.sh run each host's processes on its
# share (taskset), like separate machines. NETNS_PIN=0 at `up` time: no shares, no pinning.
#
# Usage (as root):
#   netns_cluster.sh up N        create hosts h1..hN (tears down an earlier cluster first)
#   netns_cluster.sh down        remove everything `up` made; idempotent, also after a crash
#   netns_cluster.sh rate RATE   limit every host link to RATE in both directions (tc rate units:
#                                100mbit, 1gbit, ...; `none` removes the limit). netem when this
#                                kernel has it, else a token bucket (tbf)
#   netns_cluster.sh available   exit 0 when namespaces can be made here, else print why, exit 1
#   netns_cluster.sh hosts       the host names of the cluster that is up, one a line
#   netns_cluster.sh counters    "HOST RX_BYTES TX_BYTES" of each host's eth0, one a line
set -u
PREFIX=mpicnn-h
SWITCH=mpicnn-sw
SUBNET=10.77.0
STATE=/run/mpicnn-netns

die() { echo "netns_cluster: $*" >&2; exit 1; }

# The hosts of the cluster that is up, by their namespaces: h1 h2 ...
host_list() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sed "s/^${PREFIX}/h/" |
    sort -t h -k2 -n
}

cmd_available() {
  if [ "$(id -u)" != 0 ]; then echo "needs root (network namespaces)"; return 1; fi
  local t
  for t in ip tc unshare timeout; do
    command -v "$t" >/dev/null 2>&1 || { echo "no $t command"; return 1; }
  done
  local probe=mpicnn-probe$$ out
  if ! out=$(ip netns add "$probe" 2>&1); then echo "cannot create a network namespace: $out"; return 1; fi
  if ! out=$(ip netns exec "$probe" sh -c 'ip link set lo up && ip link add p0 type veth peer name p1 && ip link add b0 type bridge' 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot create veth pairs or bridges in a namespace: $out"
    return 1
  fi
  if ! out=$(ip netns exec "$probe" unshare --uts sh -c 'hostname mpicnn-probe' 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot give a namespace its own hostname (unshare --uts): $out"
    return 1
  fi
  ip netns del "$probe" 2>/dev/null
  return 0
}

# Kill what still runs inside our namespaces (left behind by a killed job), then delete them.
cmd_down() {
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^(${PREFIX}[0-9]+|${SWITCH}|mpicnn-probe[0-9]+)$"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086  # one pid a word
      kill $pids 2>/dev/null
      for _ in $(seq 20); do  # up to 2 s for a clean exit, then KILL
        sleep 0.1
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -z "$pids" ] && break
      done
      # shellcheck disable=SC2086
      [ -n "$pids" ] && kill -9 $pids 2>/dev/null && sleep 0.2
    fi
    ip netns del "$ns" 2>/dev/null  # its veth ends go with it, and their peers with them
  done
  rm -rf /etc/netns/${PREFIX}[0-9]* "$STATE" 2>/dev/null
  rmdir /etc/netns 2>/dev/null  # only when empty: `ip` made it for us or nobody uses it
  return 0
}

cmd_up() {
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "usage: up N (1..250)"
  cmd_available >/dev/null || die "$(cmd_available)"
  cmd_down
  local i ns hosts
  hosts=$(printf '127.0.0.1 localhost\n'; for ((i = 1; i <= n; i++)); do printf '%s.%d h%d\n' "$SUBNET" "$i" "$i"; done)
  ip netns add "$SWITCH" || die "cannot create namespace $SWITCH"
  ip -n "$SWITCH" link set lo up
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  for ((i = 1; i <= n; i++)); do
    ns=$PREFIX$i
    ip netns add "$ns" || { cmd_down; die "cannot create namespace $ns"; }
    ip -n "$ns" link set lo up
    # Create the pair in the host namespace, then move the switch end out.
    ip -n "$ns" link add eth0 type veth peer name "vh$i" netns "$SWITCH" &&
      ip -n "$ns" addr add "$SUBNET.$i/24" dev eth0 &&
      ip -n "$ns" link set eth0 up &&
      ip -n "$SWITCH" link set "vh$i" master br0 &&
      ip -n "$SWITCH" link set "vh$i" up || { cmd_down; die "cannot wire $ns"; }
    mkdir -p "/etc/netns/$ns"
    printf '%s\n' "$hosts" >"/etc/netns/$ns/hosts"
  done
  if [ "${NETNS_PIN:-1}" != 0 ]; then
    local cores first last
    cores=$(nproc --all 2>/dev/null || nproc)
    mkdir -p "$STATE"
    for ((i = 1; i <= n; i++)); do
      if [ "$n" -le "$cores" ]; then
        first=$(((i - 1) * cores / n)) last=$((i * cores / n - 1))
      else
        first=$(((i - 1) % cores)) last=$first
      fi
      if [ "$first" = "$last" ]; then echo "$first"; else echo "$first-$last"; fi >"$STATE/h$i.cpus"
    done
  fi
  # Wait until every host answers (bridge ports start forwarding at once without STP, but the
  # addresses need a moment for duplicate address detection on some kernels).
  local ok
  for ((i = 2; i <= n; i++)); do
    ok=0
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      if ip netns exec "${PREFIX}1" ping -c1 -W1 "$SUBNET.$i" >/dev/null 2>&1; then ok=1; break; fi
      command -v ping >/dev/null 2>&1 || { ok=1; break; }  # no ping here: trust the links
      sleep 0.2
    done
    [ "$ok" = 1 ] || { cmd_down; die "h1 cannot reach h$i"; }
  done
  local pin="not pinned"
  [ -d "$STATE" ] && pin="CPUs $(for ((i = 1; i <= n; i++)); do printf 'h%d:%s ' "$i" "$(cat "$STATE/h$i.cpus")"; done)"
  echo "up: $n hosts (h1..h$n = $SUBNET.1..$SUBNET.$n/24), bridge br0 in namespace $SWITCH; ${pin% }"
}

have_netem() {
  local probe=mpicnn-probe$$ rc
  ip netns add "$probe" 2>/dev/null || return 1
  ip -n "$probe" link set lo up
  ip netns exec "$probe" tc qdisc add dev lo root netem rate 1mbit >/dev/null 2>&1
  rc=$?
  ip netns del "$probe" 2>/dev/null
  return $rc
}

# rate RATE: the qdisc goes on both ends of every host's veth pair: eth0 (what the host sends)
# and vhI in the switch (what the host receives), so each link is RATE in each direction.
cmd_rate() {
  local rate=${1:-}
  [ -n "$rate" ] || die "usage: rate RATE|none"
  local hosts h i
  hosts=$(host_list)
  [ -n "$hosts" ] || die "no cluster is up"
  local kind=tbf burst=""
  if [ "$rate" != none ]; then
    local bits
    bits=$(tc_rate_bits "$rate") || die "cannot read rate '$rate' (use e.g. 10mbit, 1gbit)"
    if have_netem; then
      kind=netem
    else
      # A token bucket: bucket of 10 ms of traffic (at least 64 kB, so a full 64 kB GSO packet
      # fits without being split), queue of up to 50 ms more before drops.
      burst=$((bits / 8 / 100))
      [ "$burst" -lt 65536 ] && burst=65536
    fi
  fi
  for h in $hosts; do
    i=${h#h}
    tc -n "$PREFIX$i" qdisc del dev eth0 root 2>/dev/null
    tc -n "$SWITCH" qdisc del dev "vh$i" root 2>/dev/null
    [ "$rate" = none ] && continue
    if [ "$kind" = netem ]; then
      tc -n "$PREFIX$i" qdisc add dev eth0 root netem rate "$rate" limit 10000 &&
        tc -n "$SWITCH" qdisc add dev "vh$i" root netem rate "$rate" limit 10000 || die "tc netem failed on $h"
    else
      tc -n "$PREFIX$i" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms &&
        tc -n "$SWITCH" qdisc add dev "vh$i" root tbf rate "$rate" burst "$burst" latency 50ms || die "tc tbf failed on $h"
    fi
  done
  if [ "$rate" = none ]; then echo "rate: no limit"; else echo "rate: $rate each way on every host link ($kind)"; fi
}

# tc_rate_bits RATE: bits/s of a tc rate such as 100mbit, 1gbit, 500kbit, 1000000bit.
tc_rate_bits() {
  local r=${1,,} num unit
  [[ "$r" =~ ^([0-9]+)([a-z]*)$ ]] || return 1
  num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case "$unit" in
    bit | "") echo "$num" ;;
    kbit) echo $((num * 1000)) ;;
    mbit) echo $((num * 1000000)) ;;
    gbit) echo $((num * 1000000000)) ;;
    *) return 1 ;;
  esac
}

cmd_counters() {
  local h
  for h in $(host_list); do
    echo "$h $(ip netns exec "$PREFIX${h#h}" cat /sys/class/net/eth0/statistics/rx_bytes /sys/class/net/eth0/statistics/tx_bytes | tr '\n' ' ')"
  done
}

case "${1:-}" in
  up) cmd_up "${2:-}" ;;
  down) cmd_down ;;
  rate) cmd_rate "${2:-}" ;;
  available) cmd_available ;;
  hosts) host_list ;;
  counters) cmd_counters ;;
  *) die "usage: $0 up N | down | rate RATE|none | available | hosts | counters" ;;
esac
