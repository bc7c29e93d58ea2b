source "$(dirname "$0")/lib/common.sh"
# Multi-host runs of ./train on one machine: tests/hosts/netns_cluster.sh makes "hosts" h1..hN
# out of network namespaces (own hostname, own 10.77.0.I address, veth links to one bridge),
# tests/hosts/netns_mpiexec.sh launches mpiexec on h1 with tests/hosts/netns_rsh as its ssh,
# and ranks on different hosts talk TCP over the veth links only (pml ob1, btl tcp,self).
# Needs root; without network namespaces the suite prints one SKIP line.
#
# --threads 1 everywhere: each namespace sees all the machine's cores, so the default (cores /
# ranks on the node) would run 2 threads per rank on every host, oversubscribing the 2 cores
# several times over (20x slower here), and the thread count also changes the numbers.
cd "$REPO" || exit 1
hosts_dir=$REPO/tests/hosts
cluster=$hosts_dir/netns_cluster.sh
train=$MPICNN_BUILD/bin/train
[ -x "$train" ] || train=./train
opts=(--dataset synthetic -e 2 -b 32 --progress plain --threads 1)

if ! why=$("$cluster" available 2>&1); then
  skip multihost "${why:-network namespaces are not available}"
  exit 0
fi

# (b) 3 hosts, 1 rank each: a finished run whose summary sees 3 nodes with 3 host names.
on_exit "'$cluster' down"
if ! out=$("$cluster" up 3 2>&1); then
  fail "multihost: cluster up" "$(echo "$out" | tail -1)"
  finish
fi
before=$("$cluster" counters)
run=$SCRATCH/run
if "$hosts_dir/netns_mpiexec.sh" 3 1 -- "$train" "${opts[@]}" -s "$run" >"$SCRATCH/run.log" 2>&1; then
  pass "multihost: 3 hosts x 1 rank train"
else
  fail "multihost: 3 hosts x 1 rank train" "exit $?: $(tail -1 "$SCRATCH/run.log")"
fi
after=$("$cluster" counters)

check_run() {
  [ -s "$run/latest/model.safetensors" ] || { echo "no $run/latest/model.safetensors"; return 1; }
  local nodes ranks hosts
  nodes=$(json_get "$run/summary.json" nodes) ranks=$(json_get "$run/summary.json" ranks)
  hosts=$(json_get "$run/summary.json" hosts | /usr/bin/python3 -c 'import json,sys; print(len(set(json.load(sys.stdin))))')
  [ "$nodes" = 3 ] && [ "$ranks" = 3 ] && [ "$hosts" = 3 ] ||
    { echo "summary.json: nodes $nodes, ranks $ranks, $hosts distinct hosts (want 3, 3, 3)"; return 1; }
}
check "multihost: 3 nodes, 3 distinct hosts in summary.json" check_run

# (c) The gradients crossed the veth links. For every element of the gradient, each rank has to
# send something (its value or a partial sum) and receive something (the others' share or the
# result), whatever the allreduce algorithm: each host's eth0 moved >= 4 bytes x parameters x
# steps each way (fp32 gradients). The header line gives the parameters, the steps per epoch.
check_traffic() {
  local params steps_per_epoch steps bound
  params=$(sed -nE 's/.*\(([0-9]+) parameters\).*/\1/p' "$SCRATCH/run.log" | head -1)
  steps_per_epoch=$(sed -nE 's/.* ([0-9]+) steps per epoch.*/\1/p' "$SCRATCH/run.log" | head -1)
  [ -n "$params" ] && [ -n "$steps_per_epoch" ] || { echo "no parameter or step count in the log"; return 1; }
  steps=$((steps_per_epoch * 2))
  bound=$((4 * params * steps))
  [ "$bound" -gt 1000000 ] || bound=1000000
  /usr/bin/python3 - "$bound" "$before" "$after" <<'EOF'
import sys
bound = int(sys.argv[1])
parse = lambda s: {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in s.splitlines() if l.strip()}
b, a = parse(sys.argv[2]), parse(sys.argv[3])
bad = []
for h in sorted(a):
    rx, tx = a[h][0] - b[h][0], a[h][1] - b[h][1]
    if rx < bound or tx < bound:
        bad.append(f"{h} rx {rx} tx {tx} bytes")
if len(a) != 3 or bad:
    print(f"want >= {bound} bytes each way on each of 3 hosts: " + ", ".join(bad or [str(a)]))
    sys.exit(1)
EOF
}
check "multihost: gradient traffic crossed the veth links" check_traffic

# (d) 2 hosts x 1 rank trains the same model, bit for bit, as 2 ranks on one host with
# shared memory (the allreduce of 2 float32 values is one addition either way).
run2=$SCRATCH/run2 local2=$SCRATCH/local2
check_same() {
  local out
  out=$("$hosts_dir/netns_mpiexec.sh" 2 1 -- "$train" "${opts[@]}" -s "$run2" 2>&1) ||
    { echo "2-host run failed: $(echo "$out" | tail -1)"; return 1; }
  out=$(timeout 300 mpiexec -n 2 --oversubscribe "$train" "${opts[@]}" -s "$local2" 2>&1 </dev/null) ||
    { echo "1-host run failed: $(echo "$out" | tail -1)"; return 1; }
  [ "$(json_get "$run2/summary.json" nodes)" = 2 ] || { echo "the 2-host run saw $(json_get "$run2/summary.json" nodes) node(s)"; return 1; }
  cmp "$run2/latest/model.safetensors" "$local2/latest/model.safetensors"
}
check "multihost: 2 hosts give the model of 2 ranks on one host" check_same

# (e) 2 hosts x 2 ranks: auto picks the hierarchical allreduce (node reduce, leader allreduce,
# node broadcast); it trains the flat ring's model up to the order of the float sums (4 values
# summed as (a+b)+(c+d) instead of the ring's order), and with fp16 compression the model of
# 16-bit sums. --check-sync 1: every rank holds rank 0's weights after every step.
# The namespaces of the 3-host cluster go down first (their processes killed, the namespaces
# deleted): one more try after a pause if that races with processes still exiting; a second
# failure fails both cases below (one FAIL line each), with netns_cluster.sh's reason.
if ! out=$("$cluster" up 2 2>&1) && ! { sleep 2; out=$("$cluster" up 2 2>&1); }; then
  why="netns_cluster.sh up 2 failed twice: $(echo "$out" | tail -1)"
  fail "multihost: 2 hosts x 2 ranks, hierarchical allreduce" "$why"
  fail "multihost: 2 hosts x 2 ranks, fp16-compressed gradients" "$why"
  finish
fi
hier=$SCRATCH/hier ring=$SCRATCH/ring fp16=$SCRATCH/fp16
run_2x2() {
  local dir=$1
  shift
  # A host's 2 ranks share memory, hosts talk TCP; waiting ranks yield the 2 cores to the 4
  # computing ones (a namespace host does not count as oversubscribed, so MPI would spin).
  NETNS_BTL=vader,tcp,self OMPI_MCA_mpi_yield_when_idle=1 \
    "$hosts_dir/netns_mpiexec.sh" 2 2 -- "$train" "${opts[@]}" --check-sync 1 -s "$dir" "$@" >"$dir.log" 2>&1 ||
    { echo "$(basename "$dir") run failed: $(tail -1 "$dir.log")"; return 1; }
}
# max |a - b| / max |a| over the float tensors of two runs' final models
model_diff() {
  /usr/bin/python3 - "$1/latest/model.safetensors" "$2/latest/model.safetensors" <<'EOF'
import json, struct, sys
import numpy as np
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32)
            for k, v in head.items() if k != "__metadata__" and v["dtype"] == "F32"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
print(max(float(np.abs(a[k] - b[k]).max()) for k in a) / max(float(np.abs(a[k]).max()) for k in a))
EOF
}
within() { /usr/bin/python3 -c 'import sys; d, lo, hi = map(float, sys.argv[1:]); sys.exit(0 if lo <= d < hi else 1)' "$@"; }
check_hierarchical() {
  run_2x2 "$hier" && run_2x2 "$ring" --allreduce ring || return 1
  local algo d
  algo=$(json_get "$hier/summary.json" allreduce)
  [ "$algo" = hierarchical ] || { echo "auto chose '$algo' on 2 hosts x 2 ranks (want hierarchical)"; return 1; }
  grep -q "gradient sync: hierarchical allreduce, progress thread" "$hier.log" ||
    { echo "no 'gradient sync: hierarchical allreduce, progress thread' line in the log"; return 1; }
  d=$(model_diff "$ring" "$hier") || return 1
  within "$d" 0 1e-4 || { echo "hierarchical vs ring: max relative weight difference $d (want < 1e-4)"; return 1; }
}
check "multihost: 2 hosts x 2 ranks, hierarchical allreduce (auto) trains the ring's model" check_hierarchical
check_fp16() {
  run_2x2 "$fp16" --grad-compression fp16 || return 1
  grep -q "hierarchical allreduce, progress thread, fp16" "$fp16.log" || { echo "no fp16 sync line in the log"; return 1; }
  local d
  d=$(model_diff "$ring" "$fp16") || return 1
  within "$d" 1e-9 0.05 || { echo "fp16-compressed vs fp32 ring: max relative weight difference $d (want in (0, 0.05))"; return 1; }
}
check "multihost: 2 hosts x 2 ranks, fp16-compressed gradients, replicas in sync" check_fp16

finish
