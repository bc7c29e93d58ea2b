#!/usr/bin/env bash
# local_slurm.sh - start/stop a minimal, private, single-machine Slurm cluster
# for tests (so job scripts can be submitted with `sbatch --wait`).
#
#   local_slurm.sh available          exit 0 if slurmctld, slurmd, sbatch exist
#   local_slurm.sh start STATE_DIR    write STATE_DIR/slurm.conf, start slurmctld
#                                     and slurmd, wait until the node is idle,
#                                     print `export SLURM_CONF=STATE_DIR/slurm.conf`
#   local_slurm.sh stop STATE_DIR     stop the daemons started by `start`
#                                     (by their pid files); idempotent
#
# Everything (config, spool, state, logs, pid files) lives in STATE_DIR; no
# global configuration (/etc/slurm, munge) is used or touched.  Auth is
# auth/none + cred/none, so the daemons and clients must run as the same
# machine (they do) and the cluster must only be used for tests.
#
# Environment knobs:
#   LOCAL_SLURM_CPUS      CPUs declared for the node (default 4; overrides the
#                         real core count via SlurmdParameters=config_overrides)
#   LOCAL_SLURM_TIMEOUT   seconds to wait for the node to become idle (default 30)
#   LOCAL_SLURM_DEBUG     slurmctld/slurmd log level (default info)

set -u

die() { # one-line reason on stdout, log tails on stderr, exit 1
    echo "local_slurm: $*"
    if [ -n "${STATE:-}" ]; then
        for f in "$STATE/log/slurmctld.stdout" "$STATE/log/slurmctld.log" \
                 "$STATE/log/slurmd.stdout" "$STATE/log/slurmd.log"; do
            if [ -s "$f" ]; then
                echo "---- last lines of $f ----" >&2
                tail -n 25 "$f" >&2
            fi
        done
    fi
    exit 1
}

cmd_available() {
    local b missing=""
    for b in slurmctld slurmd sbatch sinfo scontrol; do
        command -v "$b" >/dev/null 2>&1 || missing="$missing $b"
    done
    if [ -n "$missing" ]; then
        echo "local_slurm: Slurm not available (missing:$missing)"
        return 1
    fi
    return 0
}

# Is TCP port $1 free (nothing listening on it, IPv4 or IPv6)?
port_free() {
    local hex f
    hex=$(printf '%04X' "$1")
    for f in /proc/net/tcp /proc/net/tcp6; do
        [ -r "$f" ] || continue
        # local_address is field 2: ADDR:PORT (hex)
        if awk -v p="$hex" 'NR>1 { split($2, a, ":"); if (a[2] == p) { found=1 } } END { exit !found }' "$f"; then
            return 1
        fi
    done
    return 0
}

# Pick two consecutive free ports in a high range.
pick_ports() {
    local i base
    for i in $(seq 1 50); do
        base=$(( 20000 + (RANDOM * 32768 + RANDOM) % 30000 ))
        if port_free "$base" && port_free $((base + 1)); then
            echo "$base"
            return 0
        fi
    done
    return 1
}

pid_alive() { # pid alive and not a zombie
    local pid=$1 st
    [ -n "$pid" ] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [ "$st" != "Z" ]
}

# Does pid $1 look like the daemon $2 using our config $3?
pid_is_ours() {
    local pid=$1 name=$2 conf=$3 cmdline
    pid_alive "$pid" || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
    case "$cmdline" in
        *"$name"*"$conf"*) return 0 ;;
    esac
    return 1
}

stop_one() { # stop_one NAME PIDFILE CONF
    local name=$1 pidfile=$2 conf=$3 pid i
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile" 2>/dev/null)
    if pid_is_ours "$pid" "$name" "$conf"; then
        kill -TERM "$pid" 2>/dev/null
        for i in $(seq 1 100); do          # up to 10 s
            pid_alive "$pid" || break
            sleep 0.1
        done
        if pid_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null
            for i in $(seq 1 20); do
                pid_alive "$pid" || break
                sleep 0.1
            done
        fi
    fi
    rm -f "$pidfile"
}

# slurmstepd processes of this cluster (they outlive slurmd): recognised by
# an open descriptor on this cluster's slurmd log file.
our_stepds() {
    local pid f c
    for pid in /proc/[0-9]*/comm; do
        read -r c <"$pid" 2>/dev/null || continue
        [ "$c" = slurmstepd ] || continue
        pid=${pid#/proc/}; pid=${pid%/comm}
        for f in /proc/"$pid"/fd/*; do
            if [ "$(readlink "$f" 2>/dev/null)" = "$STATE/log/slurmd.log" ]; then
                pid_alive "$pid" && echo "$pid"
                break
            fi
        done
    done
}

descendants() { # all descendants of pid $1 (not $1 itself)
    ps -eo pid=,ppid= 2>/dev/null | awk -v root="$1" '
        { parent[$1] = $2 }
        END {
            for (p in parent) {
                q = parent[p]; n = 0
                while (q != "" && q != root && q > 1 && n++ < 100) q = parent[q]
                if (q == root) print p
            }
        }'
}

cmd_stop() {
    local conf="$STATE/slurm.conf" ctld d i pids p
    [ -f "$conf" ] || return 0
    ctld=$(cat "$STATE/run/slurmctld.pid" 2>/dev/null)
    d=$(cat "$STATE/run/slurmd.pid" 2>/dev/null)
    # Cancel every job first: slurmstepd and the job processes survive slurmd.
    if pid_is_ours "$ctld" slurmctld "$conf" && pid_is_ours "$d" slurmd "$conf"; then
        SLURM_CONF="$conf" scancel --user="$(id -un)" >/dev/null 2>&1
        for i in $(seq 1 40); do           # up to 10 s (KillWait=5)
            [ -z "$(our_stepds)" ] && break
            sleep 0.25
        done
    fi
    stop_one slurmd "$STATE/run/slurmd.pid" "$conf"
    stop_one slurmctld "$STATE/run/slurmctld.pid" "$conf"
    # Anything left over (daemons already dead, or a job ignoring SIGTERM):
    # kill the job processes, then their slurmstepd.
    pids=$(our_stepds)
    if [ -n "$pids" ]; then
        for p in $pids; do
            kill -KILL $(descendants "$p") "$p" 2>/dev/null
        done
        for i in $(seq 1 20); do
            [ -z "$(our_stepds)" ] && break
            sleep 0.1
        done
    fi
    return 0
}

write_conf() {
    local host=$1 port=$2 cpus=$3 level=$4 conf="$STATE/slurm.conf"
    cat >"$conf" <<EOF
# Generated by tests/slurm/local_slurm.sh - private test cluster, do not edit.
ClusterName=mpicnn-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$(id -un)
SlurmdUser=root

AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Schedule batch jobs at submit time (default delays them up to 3 s).
SchedulerParameters=batch_sched_delay=0
SlurmdParameters=config_overrides
ReturnToService=2
# Reject jobs that can never run (e.g. --ntasks above the node CPUs) at
# submit time instead of leaving them pending forever.
EnforcePartLimits=ALL
PlugStackConfig=$STATE/plugstack.conf
MailProg=/bin/true

StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=$level
SlurmdDebug=$level

# Fast turnaround for tests.  sbatch --wait sleeps 2 s between polls and
# multiplies that by 4 (up to 32 s) while it is < MinJobAge/2 (integer
# division): MinJobAge<=5 keeps the poll at 2 s (the default 300 turns a 12 s
# job into a 42 s wait).  Cost: a finished job is forgotten by slurmctld
# (scontrol show job) ~5 s after it ends; there is no accounting database.
MinJobAge=5
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
SlurmctldTimeout=60
MessageTimeout=10
UnkillableStepTimeout=30

NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    : >"$STATE/plugstack.conf"
}

node_state() { # prints compact node state, e.g. idle, down*, unk*
    SLURM_CONF="$STATE/slurm.conf" sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -n 1
}

cmd_start() {
    cmd_available || exit 1
    local host cpus timeout level port conf i st
    host=$(hostname)
    [ -n "$host" ] || die "cannot determine hostname"
    cpus=${LOCAL_SLURM_CPUS:-4}
    timeout=${LOCAL_SLURM_TIMEOUT:-30}
    level=${LOCAL_SLURM_DEBUG:-info}
    conf="$STATE/slurm.conf"

    mkdir -p "$STATE" || die "cannot create $STATE"
    STATE=$(cd "$STATE" && pwd -P)
    conf="$STATE/slurm.conf"
    # A previous cluster in this directory? Stop it first (idempotent).
    if [ -f "$conf" ]; then cmd_stop; fi
    rm -rf "$STATE/ctld" "$STATE/spool" "$STATE/run"
    mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/run" "$STATE/log" || die "cannot create dirs in $STATE"
    : >"$STATE/log/slurmctld.log"
    : >"$STATE/log/slurmd.log"

    port=$(pick_ports) || die "no free TCP ports found"
    write_conf "$host" "$port" "$cpus" "$level"

    # -c: start with a clean job state.  Both daemonize and write pid files.
    slurmctld -f "$conf" -c >>"$STATE/log/slurmctld.stdout" 2>&1 \
        || die "slurmctld failed to start"
    slurmd -f "$conf" >>"$STATE/log/slurmd.stdout" 2>&1 \
        || { cmd_stop; die "slurmd failed to start"; }

    st=""
    for i in $(seq 1 $((timeout * 5))); do
        st=$(node_state "$host")
        case "$st" in
            idle) break ;;
            down*|drain*|fail*)
                # e.g. left down from an old state: resume it
                SLURM_CONF="$conf" scontrol update nodename="$host" state=resume >/dev/null 2>&1 ;;
        esac
        if [ $((i % 5)) -eq 0 ]; then
            local p
            p=$(cat "$STATE/run/slurmctld.pid" 2>/dev/null)
            pid_alive "$p" || { cmd_stop; die "slurmctld exited during startup"; }
            p=$(cat "$STATE/run/slurmd.pid" 2>/dev/null)
            pid_alive "$p" || { cmd_stop; die "slurmd exited during startup"; }
        fi
        sleep 0.2
    done
    if [ "$st" != idle ]; then
        cmd_stop
        die "node $host not idle after ${timeout}s (state: ${st:-unknown})"
    fi
    echo "export SLURM_CONF=$conf"
    return 0
}

case "${1:-}" in
    available)
        cmd_available; exit $? ;;
    start|stop)
        [ $# -eq 2 ] && [ -n "$2" ] || { echo "usage: $0 $1 STATE_DIR"; exit 2; }
        STATE=$2
        if [ "$1" = start ]; then
            cmd_start; exit $?
        fi
        [ -d "$STATE" ] || exit 0
        STATE=$(cd "$STATE" && pwd -P)
        cmd_stop; exit 0 ;;
    *)
        echo "usage: $0 available | start STATE_DIR | stop STATE_DIR" >&2
        exit 2 ;;
esac
