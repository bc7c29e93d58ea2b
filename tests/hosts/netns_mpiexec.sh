#!/usr/bin/env bash
# Runs an MPI program across the namespace hosts of tests/hosts/netns_cluster.sh: mpiexec starts
# on h1, reaches h2..hN through tests/hosts/netns_rsh, and every byte between ranks goes over
# TCP on 10.77.0.0/24 (pml ob1 with the tcp and self BTLs only: no shared memory, no UCX).
#
# Usage: netns_mpiexec.sh N RANKS_PER_HOST [MPIEXEC_OPTIONS...] -- PROGRAM [ARGS...]
# Runs from the current directory (shared by all hosts). The exit status is mpiexec's; a job
# that runs past NETNS_MPIEXEC_TIMEOUT seconds (default 300) is killed and gives 124.
# NETNS_RSH_LOG=FILE logs the launcher's calls to the agent. NETNS_BTL=LIST replaces the BTL list
# (default tcp,self): NETNS_BTL=vader,tcp,self lets the ranks of one host use shared memory
# (the namespaces share /dev/shm and the PID namespace, so vader and its CMA copies work) while
# hosts still talk TCP over the veth links, like several ranks per node on a real cluster.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { echo "usage: $0 N RANKS_PER_HOST [MPIEXEC_OPTIONS...] -- PROGRAM [ARGS...]" >&2; exit 2; }
[ $# -ge 4 ] || usage
n=$1 per=$2
shift 2
[[ "$n" =~ ^[1-9][0-9]*$ && "$per" =~ ^[1-9][0-9]*$ ]] || usage
extra=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
[ "${1:-}" = -- ] || usage
shift
[ $# -ge 1 ] || usage
for ((i = 1; i <= n; i++)); do
  [ -e "/run/netns/mpicnn-h$i" ] || { echo "netns_mpiexec: host h$i is not up (tests/hosts/netns_cluster.sh up $n)" >&2; exit 2; }
done

hostfile=$(mktemp /tmp/mpicnn-hostfile.XXXXXX)
trap 'rm -f "$hostfile"' EXIT
for ((i = 1; i <= n; i++)); do echo "h$i slots=$per max_slots=$per"; done >"$hostfile"

# Like ssh, netns_rsh gives the remote daemons a login environment, and OpenMPI passes on to
# ranks on other hosts only OMPI_* variables and those named by -x. Pass the ones that change
# the numbers or the threading (OPENBLAS_CORETYPE picks OpenBLAS's kernels: without it the
# ranks on h2.. compute with other kernels and a run is no longer bit-identical to a one-host
# run), plus NETNS_MPIEXEC_ENV="VAR ..." if set.
for v in $(compgen -e | grep -E '^(OPENBLAS_|OMP_|GOMP_|MKL_|MPICNN_)') ${NETNS_MPIEXEC_ENV:-}; do extra=(-x "$v" "${extra[@]}"); done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpiexec itself runs on h1 (its namespace, hostname h1) as if logged in there. timeout sends
# TERM (mpiexec then stops the remote daemons and ranks), and KILL 10 s later if that hangs.
# --bind-to none: every host is the same machine; OpenMPI's default (bind to a core for <= 2
# ranks) would pin the first rank of every host to core 0. Instead each host's processes run on
# its share of the cores (taskset here for h1, in netns_rsh for the others; see netns_cluster.sh).
# stdin is /dev/null: timeout runs mpiexec in its own process group, where reading a
# terminal would stop it.
pin=()
cpus=$(cat /run/mpicnn-netns/h1.cpus 2>/dev/null) && [ -n "$cpus" ] && pin=(taskset -c "$cpus")
timeout -k 10 "${NETNS_MPIEXEC_TIMEOUT:-300}" "${pin[@]}" \
  ip netns exec mpicnn-h1 unshare --uts /bin/sh -c 'hostname h1 && exec "$@"' netns_mpiexec \
  mpiexec --hostfile "$hostfile" -n $((n * per)) --map-by "ppr:$per:node" \
  --bind-to none --mca plm_rsh_agent "$here/netns_rsh" \
  --mca pml ob1 --mca btl "${NETNS_BTL:-tcp,self}" \
  --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
  "${extra[@]}" "$@" </dev/null
