"""Grading a class on a Slurm cluster: a job array of tasks, one GPU each, then one collect job.

The grader runs the same work locally and on a cluster; only how the workers start differs. A *task*
is an argv that writes its own result file (one student's folder, say), and the *collect* step is an
argv that reads those files and writes the class summary. Locally the grader runs each task with
subprocess and then the collect command; on a cluster:

    tasks = read_tasks("grading/tasks.txt")           # one task a line: shell words or a JSON list
    script = write_array_script("grading/array.sbatch", tasks, log_dir="grading/logs")
    array_id = submit(script)                         # task i of the array runs tasks[i]
    collect_id = submit_after(array_id, ["python", "collect.py"], log_dir="grading/logs")
    wait_for_jobs([array_id, collect_id], timeout_s=3600)   # for tests and a --wait mode

Results travel through files, not through Slurm, so a task that crashes or runs out of time is simply
a missing result file that the collect step reports; that is why the collect job runs after the
array has ended whatever its outcome (afterany), not only after success.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from glm_asr_course.errors import UserError

# squeue states after which a job will not run again. Any other state counts as still going, so an
# unusual one (STOPPED, a requeue) makes wait_for_jobs wait, not return early.
FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                             "PREEMPTED", "BOOT_FAIL", "DEADLINE"})


def read_tasks(path: str | Path) -> list[list[str]]:
    """The tasks of a tasks file, one argv a line: shell words (`python grade.py alice`) or a JSON
    list of strings (for a grader that writes the file itself and wants no quoting rules).
    Blank lines and lines starting with # are skipped."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise UserError(f"cannot read the tasks file {path}: {e.strerror}") from None
    tasks = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            argv = json.loads(line) if line.startswith("[") else shlex.split(line)
        except ValueError as e:
            raise UserError(f"{path}:{number}: not a JSON list nor shell words ({e})") from None
        if not argv or not all(isinstance(word, str) for word in argv):
            raise UserError(f"{path}:{number}: a task must be a non-empty list of strings")
        tasks.append(argv)
    if not tasks:
        raise UserError(f"{path}: no tasks in it")
    return tasks


def write_array_script(path: str | Path, tasks: list[list[str]], *, log_dir: str | Path,
                       time_limit: str = "00:30:00", gpus: int = 1, gpu_gres: str = "gpu",
                       cpus_per_task: int = 4, job_name: str = "glm-asr-grade",
                       workdir: str | Path | None = None, max_parallel: int | None = None) -> Path:
    """Write an sbatch script whose array task i runs tasks[i], in `workdir` (default: here).

    The commands are written into the script itself, so it can be read, and submitted again, as is.
    time_limit (Slurm's [D-]HH:MM:SS) holds for each task; `gpus` of gres `gpu_gres` per task
    (e.g. "gpu:h100" on a cluster of typed GPUs), no --gres line when 0; max_parallel caps the tasks
    running at once (a class shouldn't take every GPU of a shared cluster). Each task logs to
    log_dir/JOBNAME-ARRAYID_TASK.out; log_dir is created, since Slurm fails a job whose log folder
    does not exist, and writes no log to say why."""
    if not tasks:
        raise UserError("no tasks to submit")
    log_dir = Path(log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(workdir or Path.cwd()).resolve()
    throttle = f"%{max_parallel}" if max_parallel else ""
    options = [f"--job-name={job_name}", f"--array=0-{len(tasks) - 1}{throttle}", f"--time={time_limit}",
               f"--cpus-per-task={cpus_per_task}", f'--output="{log_dir}/%x-%A_%a.out"', f'--chdir="{workdir}"']
    if gpus:
        options.append(f"--gres={gpu_gres}:{gpus}")
    cases = [f"    {index}) set -- {shlex.join(argv)} ;;" for index, argv in enumerate(tasks)]
    lines = ["#!/bin/bash",
             f"# Written by glm_asr_lab.grading.slurm: {len(tasks)} tasks; array task i runs task i. Submit: sbatch {Path(path).name}",
             *(f"#SBATCH {option}" for option in options),
             'case "$SLURM_ARRAY_TASK_ID" in',
             *cases,
             '    *) echo "error: no task $SLURM_ARRAY_TASK_ID in this script" >&2; exit 2 ;;',
             "esac",
             'echo "task $SLURM_ARRAY_TASK_ID on $(hostname -s): $*"',
             'exec "$@"']
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def submit(script: str | Path, extra_args: Sequence[str] = ()) -> str:
    """Submit an sbatch script; returns its job id (for an array, the array's id).
    extra_args go before the script and win over its #SBATCH lines (--partition, --account, ...)."""
    return _sbatch([*extra_args, str(script)], what=str(script))


def submit_after(job_id: str, command: list[str], *, log_dir: str | Path, job_name: str = "glm-asr-collect",
                 time_limit: str = "00:10:00", workdir: str | Path | None = None,
                 extra_args: Sequence[str] = ()) -> str:
    """Submit `command` (an argv) as a one-CPU job that starts once job `job_id` has ended, however
    it ended (afterany: a failed task must not keep the summary from being written). Logs to
    log_dir/JOBNAME-JOBID.out. Returns its job id."""
    log_dir = Path(log_dir).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(workdir or Path.cwd()).resolve()
    return _sbatch([f"--dependency=afterany:{job_id}", f"--job-name={job_name}", f"--time={time_limit}",
                    f"--output={log_dir}/%x-%j.out", f"--chdir={workdir}", *extra_args,
                    f"--wrap={shlex.join(command)}"], what=f"the job after {job_id}")


def wait_for_jobs(job_ids: list[str], timeout_s: float, poll_s: float = 2.0) -> dict[str, str]:
    """Wait until every job (every task of an array) has finished; returns {job: final state}, with
    array tasks named ARRAYID_TASK. Polls squeue, not sacct: sacct needs Slurm's accounting database,
    which a cluster may not run, while squeue -t all shows finished jobs for MinJobAge (300 s by
    default) after they end. A job squeue no longer knows counts as finished and is left out."""
    if shutil.which("squeue") is None:
        raise UserError("squeue is not on PATH: waiting for jobs needs Slurm's commands (run this on the login node)")
    wanted = {str(job_id) for job_id in job_ids}
    deadline = time.monotonic() + timeout_s
    while True:
        # %F is the array's id for an array task and the job's own id otherwise; -r lists tasks one a line.
        result = subprocess.run(["squeue", "-h", "-r", "-t", "all", "--me", "-o", "%F %i %T"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise UserError(f"squeue failed: {_last_line(result.stderr)}")
        states = {}
        for row in result.stdout.splitlines():
            group, job, state = row.split()
            if group in wanted:
                states[job] = state
        if all(state in FINISHED_STATES for state in states.values()):
            return states
        if time.monotonic() >= deadline:
            going = sorted(job for job, state in states.items() if state not in FINISHED_STATES)
            raise UserError(f"jobs still pending or running after {timeout_s:g} s: {', '.join(going)} "
                            f"(see squeue -j {','.join(sorted(wanted))})")
        time.sleep(poll_s)


def _sbatch(args: list[str], what: str) -> str:
    """Run sbatch --parsable ARGS and return the job id it prints; sbatch missing or refusing is a UserError."""
    if shutil.which("sbatch") is None:
        raise UserError("sbatch is not on PATH: submitting to Slurm needs Slurm's commands "
                        "(run this on the cluster's login node)")
    result = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise UserError(f"sbatch refused {what}: {_last_line(result.stderr) or f'exit code {result.returncode}'}")
    # --parsable prints "JOBID" or, on a federation of clusters, "JOBID;CLUSTER".
    job_id = result.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise UserError(f"sbatch accepted {what} but printed no job id: {result.stdout.strip()!r}")
    return job_id


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
