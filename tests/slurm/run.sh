#!/usr/bin/env bash
# deploy/slurm/mlperf-net.sbatch on a real Slurm cluster: this host acting as
# the whole cluster (Debian's slurmctld, slurmd and munge, configured here in
# a scratch folder with ports of their own, and stopped at the end), driven
# by tests/tests/slurm.rs. Needs root; skips, saying why, where the packages
# cannot be installed or the cluster does not come up.
set -euo pipefail
cd "$(dirname "$0")/../.."

skip() {
    echo "slurm test: skipped ($*)"
    exit 0
}
[ "$(id -u)" = 0 ] || skip "needs root, to run slurmd and munged"
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 ||
    ! command -v munged >/dev/null 2>&1 || ! command -v sbatch >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        # No service is started by the packages where policy-rc.d says so;
        # this script starts its own daemons either way.
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            slurmctld slurmd slurm-client munge) >/dev/null 2>&1 || true
    fi
fi
for b in slurmctld slurmd munged sbatch; do
    command -v "$b" >/dev/null 2>&1 || skip "$b cannot be installed here"
done
echo "slurm test: $(slurmctld -V), $(munged -V 2>&1 | head -1)"
cargo build -p sut-node -p loadgen-cli --bins

work=$(mktemp -d "${TMPDIR:-/tmp}/mlpn-slurm.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# munge, on a socket and key of its own.
dd if=/dev/urandom of="$work/munge.key" bs=1024 count=1 status=none
chmod 600 "$work/munge.key"
munged --foreground --force --socket="$work/munge.sock" --key-file="$work/munge.key" \
    --pid-file="$work/munged.pid" --log-file="$work/munged.log" \
    --seed-file="$work/munged.seed" >"$work/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do [ -S "$work/munge.sock" ] && break; sleep 0.1; done
[ -S "$work/munge.sock" ] || { cat "$work/munged.out"; skip "munged did not start"; }

# One node, mlpn-1, reached at 127.0.0.1, with CPUs for four sut-nodes and
# the batch script whatever the host has.
host=$(hostname -s)
mkdir -p "$work/state" "$work/spool"
cat >"$work/slurm.conf" <<CONF
ClusterName=mlpn
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge.sock
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
NodeName=mlpn-1 NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=mlpn Nodes=mlpn-1 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N mlpn-1 -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 &
pids+=($!)
up=
for _ in $(seq 1 100); do
    if sinfo -h -n mlpn-1 -o %t 2>/dev/null | grep -qx idle; then up=1; break; fi
    sleep 0.2
done
if [ -z "$up" ]; then
    tail -n 20 "$work/slurmctld.out" "$work/slurmd.out" >&2 || true
    skip "the one-host cluster did not come up"
fi
echo "slurm test: cluster up: $(sinfo -h -o '%P %D %t %N')"
status=0
MLPN_SLURM_CONF=$SLURM_CONF cargo test -p tests --test slurm -- --nocapture --test-threads 1 || status=$?
if [ "$status" != 0 ]; then
    tail -n 30 "$work/slurmctld.log" "$work/slurmd.log" >&2 || true
fi
exit "$status"
