#!/usr/bin/env bash
# A single-node Slurm on this machine, for tests/test_slurm.py (CI runs it from .ci/run, as root).
# Installs Debian's slurmctld, slurmd, slurm-client and munge if missing, writes /etc/slurm/slurm.conf
# for this host alone with one fake GPU, starts munged, slurmctld and slurmd as plain daemons and waits
# until the node is idle. A second call while it is up exits 0 at once. Run as root.
#
# What a container needs, and why the configuration looks the way it does:
# - No systemd: the packages' units never start (policy-rc.d refuses), so the daemons are started here
#   directly, and munged as its own user (runuser), the way its unit would.
# - No usable cgroups: proctrack/linuxproc (finds a job's processes through /proc) and task/none.
# - No database: accounting_storage/none and jobcomp/none, so `sacct` answers nothing here; finished
#   jobs stay visible to `squeue -t all` for MinJobAge seconds (300 by default).
# - The controller and the node are addressed as 127.0.0.1, so a hostname that does not resolve does
#   not matter; the node is still named `hostname -s`, which is what squeue prints.
# - A fake GPU: a GPU gres needs a device file, and with Count alone slurmd reports 0 GPUs and the node
#   goes INVAL ("gres/gpu count reported lower than configured"). /dev/null as the "device" works:
#   `--gres=gpu:1` is accepted and jobs get CUDA_VISIBLE_DEVICES=0. Only one job holds it at a time.
# - Memory is not a consumable (CR_Core): otherwise every job without --mem takes the whole node and
#   jobs run one at a time.
# - Each start clears the controller's saved state (slurmctld -c): jobs of an earlier run are gone.
# Logs: /var/spool/glm-asr-slurm/slurmctld.log and slurmd.log.
set -euo pipefail

conf=/etc/slurm/slurm.conf
marker="# Written by glm-asr utils/ci/start_slurm.sh"
spool=/var/spool/glm-asr-slurm
node=$(hostname -s)

fail() { echo "error: $*" >&2; exit 2; }

node_state() { sinfo -h -n "$node" -o %t 2>/dev/null || true; }

# The pid a daemon of an earlier start wrote, if that process still runs; a stale pid file's number
# may belong to another process by now, hence the check of the name.
running_pid() {
    local pid
    pid=$(cat "$spool/$1.pid" 2>/dev/null) || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] && echo "$pid"
}

[ "$(id -u)" = 0 ] || fail "start_slurm.sh must run as root (it installs packages and starts daemons)"

# (sinfo would wait ~10 s for a controller that is not there: ask it only when the daemons run.)
if [ -f "$conf" ] && grep -qxF "$marker" "$conf" && running_pid slurmctld >/dev/null && running_pid slurmd >/dev/null; then
    case "$(node_state)" in
        idle*|mix*|alloc*) echo "Slurm is already running (node $node)"; exit 0 ;;
    esac
fi

missing=()
for package in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || fail "Debian's ${missing[*]} are needed and there is no apt-get to install them"
    echo "Installing ${missing[*]}..."
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Never overwrite a real cluster's configuration.
if [ -f "$conf" ] && ! grep -qxF "$marker" "$conf"; then
    fail "$conf exists and was not written by this script; not touching that Slurm"
fi

# munge: the key (Debian's package usually makes one), then the daemon unless it already answers.
if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
if ! munge -n >/dev/null 2>&1; then
    install -d -o munge -g munge -m 755 /run/munge
    runuser -u munge -- /usr/sbin/munged
fi

# The node line as slurmd itself sees this machine (CPUs, sockets, cores, threads, RealMemory).
hardware=$(/usr/sbin/slurmd -C | head -n 1)
install -d -m 755 "$spool" "$spool/state" "$spool/slurmd" /etc/slurm
cat >"$conf" <<EOF
$marker
ClusterName=glm-asr-test
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
StateSaveLocation=$spool/state
SlurmdSpoolDir=$spool/slurmd
SlurmctldPidFile=$spool/slurmctld.pid
SlurmdPidFile=$spool/slurmd.pid
SlurmctldLogFile=$spool/slurmctld.log
SlurmdLogFile=$spool/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
GresTypes=gpu
$hardware NodeAddr=127.0.0.1 Gres=gpu:1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
echo "NodeName=$node Name=gpu File=/dev/null" >/etc/slurm/gres.conf

# A daemon left from an earlier start may hold an older configuration: stop it and start afresh.
for daemon in slurmd slurmctld; do
    if pid=$(running_pid "$daemon"); then
        kill "$pid"
        while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    fi
done
/usr/sbin/slurmctld -c
/usr/sbin/slurmd

for _ in $(seq 60); do
    case "$(node_state)" in
        idle*) echo "Slurm is up: node $node, partition test, one fake GPU (logs in $spool)"; exit 0 ;;
    esac
    sleep 0.5
done
fail "the node did not become idle within 30 s (sinfo: $(node_state); see $spool/slurmctld.log and slurmd.log)"
