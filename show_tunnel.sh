#!/usr/bin/env bash
# ./show_tunnel.sh PORT [JOBID]   (on the cluster's login node)
# Prints the ssh command that makes PORT of a compute node, where your Slurm job serves something (the
# demo of utils/slurm/demo.sbatch on 8501, say), open as http://localhost:PORT on your own computer.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: ./show_tunnel.sh PORT [JOBID]     (run it on the cluster's login node)

Finds the compute node of your first running Slurm job (or of job JOBID) and prints the ssh
command to run on your own computer: it forwards localhost:PORT there to PORT on that node,
through this login node. Then open http://localhost:PORT in your browser.
For the demo: sbatch utils/slurm/demo.sbatch, then ./show_tunnel.sh 8501 once it runs.

The login host in the command is `hostname -f` of this machine; where that name is not the one
you ssh to from outside, set GLM_ASR_LOGIN_HOST, e.g. GLM_ASR_LOGIN_HOST=login.cluster.example.edu
EOF
}

fail() { echo "error: $*" >&2; exit 2; }

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
    "") fail "which port? usage: ./show_tunnel.sh PORT [JOBID] (e.g. 8501 for the demo; --help for more)" ;;
esac
[ $# -le 2 ] || fail "too many arguments; usage: ./show_tunnel.sh PORT [JOBID]"
port=$1
job=${2:-}
# 10# reads "08080" as decimal; the length cap keeps bash arithmetic from overflowing.
if ! [[ $port =~ ^[0-9]{1,5}$ ]] || (( 10#$port < 1 || 10#$port > 65535 )); then
    fail "port must be a number from 1 to 65535, not '$port'"
fi
port=$((10#$port))
[[ -z $job || $job =~ ^[0-9]+(_[0-9]+)?$ ]] || fail "JOBID must be a Slurm job id such as 12345, not '$job'"
command -v squeue >/dev/null || fail "squeue is not on PATH: run this on the cluster's login node, where Slurm's commands are"

user=${USER:-$(id -un)}
# %B is the node running the job's batch script: the first of a multi-node job, where the demo runs.
# stderr joins stdout so that a failure's reason fits in the one error line; job lines start with their id.
if ! squeue_out=$(squeue -u "$user" -h -t RUNNING --sort=i -o '%i %B %j' 2>&1); then
    fail "squeue failed: $(tail -n 1 <<<"$squeue_out")"
fi
jobs=$(grep -E '^[0-9]' <<<"$squeue_out" || true)
if [ -n "$job" ]; then
    jobs=$(awk -v job="$job" '$1 == job' <<<"$jobs")
    [ -n "$jobs" ] || fail "job $job of $user is not running (squeue -u $user lists your jobs)"
fi
[ -n "$jobs" ] || fail "no running Slurm job of $user (submit one, e.g. sbatch utils/slurm/demo.sbatch, and wait until squeue -u $user shows it R)"

read -r job_id node name <<<"$(head -n 1 <<<"$jobs")"
count=$(wc -l <<<"$jobs")
if [ "$count" -gt 1 ]; then
    echo "note: $count jobs of $user are running; using the first, $job_id (pass a JOBID to choose another)" >&2
fi
login_host=${GLM_ASR_LOGIN_HOST:-$(hostname -f)}
echo "Job $job_id ($name) runs on $node. On your own computer, run (and leave it running):"
echo
echo "    ssh -N -L $port:$node:$port $user@$login_host"
echo
echo "then open http://localhost:$port"
