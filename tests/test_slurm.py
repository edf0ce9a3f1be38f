"""The cluster tools on a real Slurm: show_tunnel.sh with a running job, utils/slurm/*.sbatch run as
jobs, glm_asr_lab.grading.slurm's job array with its collect job, and the class grader's array
(./benchmark.sh --grade --slurm).

They need a Slurm whose node answers, with a GPU gres: `bash utils/ci/start_slurm.sh` (as root)
starts a single-node one with a fake GPU on this machine, and .ci/run does so in CI. Without it, and
on any other Slurm (a real cluster's, where they would queue for its GPUs), this module skips, saying
why. Each test cancels the jobs it submitted, finished or not.
"""

import csv
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from glm_asr_lab.grading import slurm
from glm_asr_course.errors import UserError
from test_slurm_offline import assert_one_error_line, run_show_tunnel

REPO = Path(__file__).resolve().parent.parent


START_HINT = "as root, bash utils/ci/start_slurm.sh starts a single-node one"


def _why_no_slurm():
    if shutil.which("sinfo") is None:
        return f"Slurm is not installed (no sinfo on PATH); {START_HINT}"
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
    if config.returncode != 0:
        return f"no Slurm controller answers ({config.stderr.strip()}); {START_HINT}"
    # On a real cluster's login node these tests would queue jobs for its GPUs and wait behind others.
    if not re.search(r"^ClusterName\s*=\s*glm-asr-test$", config.stdout, re.MULTILINE):
        return "this Slurm is not the test one that utils/ci/start_slurm.sh starts (ClusterName glm-asr-test)"
    result = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    states = result.stdout.split()
    if result.returncode != 0 or not any(state.startswith(("idle", "mix", "alloc")) for state in states):
        return f"no Slurm node is up (sinfo: {result.stderr.strip() or ' '.join(states) or 'no nodes'}); {START_HINT}"
    return None


NO_SLURM = _why_no_slurm()
if NO_SLURM:
    pytest.skip(NO_SLURM, allow_module_level=True)

USER = pwd.getpwuid(os.getuid()).pw_name
# This machine may have fewer CPUs than the scripts' --cpus-per-task: sbatch's options win over #SBATCH lines.
ONE_CPU = "--cpus-per-task=1"


@pytest.fixture
def submitted():
    """A list to put the ids of submitted jobs in; they are cancelled when the test ends."""
    job_ids = []
    yield job_ids
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True)


def sbatch(job_ids, *args, cwd=REPO, **env_changes):
    result = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, cwd=cwd,
                            env={**os.environ, **env_changes}, timeout=30)
    assert result.returncode == 0, result.stderr
    job_ids.append(result.stdout.strip())
    return job_ids[-1]


def squeue_field(job_id, field):
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", field], capture_output=True, text=True).stdout.strip()


def wait_until(condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.3)


@pytest.fixture
def sleeping_job(submitted):
    job_id = sbatch(submitted, "--job-name=glm-asr-test-sleep", ONE_CPU, "--output=/dev/null", "--wrap=sleep 120")
    wait_until(lambda: squeue_field(job_id, "%T") == "RUNNING", 30, f"job {job_id} running")
    return job_id


def test_show_tunnel_names_the_node_of_the_running_job(sleeping_job):
    node = squeue_field(sleeping_job, "%B")
    result = run_show_tunnel("8501", GLM_ASR_LOGIN_HOST="login.cluster.example.edu")
    assert result.returncode == 0, result.stderr
    assert f"Job {sleeping_job} (glm-asr-test-sleep) runs on {node}." in result.stdout
    assert f"\n    ssh -N -L 8501:{node}:8501 {USER}@login.cluster.example.edu\n" in result.stdout
    assert result.stdout.rstrip().endswith("then open http://localhost:8501")

    login_host = subprocess.run(["hostname", "-f"], capture_output=True, text=True).stdout.strip()
    default_host = run_show_tunnel("8080", sleeping_job, GLM_ASR_LOGIN_HOST="")
    assert f"ssh -N -L 8080:{node}:8080 {USER}@{login_host}\n" in default_host.stdout


def test_show_tunnel_without_a_running_job():
    # nobody has no jobs; the script asks squeue about $USER.
    assert_one_error_line(run_show_tunnel("8501", USER="nobody"), "no running Slurm job of nobody")


def test_show_tunnel_names_a_job_that_is_not_running(sleeping_job):
    assert_one_error_line(run_show_tunnel("8501", "999999"), f"job 999999 of {USER} is not running")


def test_wait_for_jobs_gives_up_after_its_timeout(sleeping_job):
    with pytest.raises(UserError, match=f"still pending or running after 1 s: {sleeping_job} "):
        slurm.wait_for_jobs([sleeping_job], timeout_s=1, poll_s=0.2)


def test_benchmark_sbatch_logs_to_logs_folder(submitted, tiny_ckpt, tmp_path):
    # The tiny checkpoint is of random weights: NOT CHECKED, its ids held to transformers' (the CPU runs fp32).
    clip = tmp_path / "clip.wav"
    shutil.copy(REPO / "test_audio.wav", clip)
    # GLM_ASR_VENV: the job's utils/setup-triton.sh finds this environment ready instead of making .venv.
    job_id = sbatch(submitted, ONE_CPU, "utils/slurm/benchmark.sbatch", "--device", "cpu", "--model", str(tiny_ckpt),
                    "--audio", str(clip), "--warmup", "0", "--runs", "1", "--max-new-tokens", "3",
                    FOLDER="glm_asr_scratch", GLM_ASR_VENV=sys.prefix)
    log = REPO / "logs" / f"glm-asr-benchmark-{job_id}.out"
    try:
        assert slurm.wait_for_jobs([job_id], timeout_s=60) == {job_id: "COMPLETED"}, log.exists() and log.read_text()
        text = log.read_text()
    finally:
        log.unlink(missing_ok=True)
    assert f"Job {job_id} on " in text and ": ./benchmark.sh glm_asr_scratch --device cpu" in text
    assert "Ran: glm_asr_scratch, course path, precision fp32, cpu" in text
    assert "Status: NOT CHECKED (random weights)\nids equal transformers' fp32: yes (3 tokens)" in text


def _listens_on_all_addresses(port):
    """Whether a socket listens on 0.0.0.0:port (/proc/net/tcp: hex address:port, state 0A is LISTEN)."""
    rows = (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
    return any(row[1] == f"00000000:{port:04X}" and row[3] == "0A" for row in rows)


def _health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def test_demo_sbatch_serves_the_demo_and_says_how_to_reach_it(submitted):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job_id = sbatch(submitted, ONE_CPU, "utils/slurm/demo.sbatch", DEMO_PORT=str(port), GLM_ASR_VENV=sys.prefix)
    log = REPO / "logs" / f"glm-asr-demo-{job_id}.out"
    try:
        wait_until(lambda: _health(port) == "ok", 60, f"the demo answering on port {port}")
        node = squeue_field(job_id, "%B")
        text = log.read_text()
        assert f"Demo: job {job_id} on node {node}, port {port}." in text
        assert f"On the login node, run: ./show_tunnel.sh {port} {job_id}" in text
        # Reachable from the login node, not on the node's loopback alone.
        assert _listens_on_all_addresses(port)
        tunnel = run_show_tunnel(str(port), job_id, GLM_ASR_LOGIN_HOST="login")
        assert f"ssh -N -L {port}:{node}:{port} {USER}@login\n" in tunnel.stdout, tunnel.stderr
        subprocess.run(["scancel", job_id], check=True)
        wait_until(lambda: _health(port) is None, 30, "the demo stopped after scancel")
    finally:
        log.unlink(missing_ok=True)


def test_job_array_then_collect(submitted, tmp_path):
    """Three tasks write their result files, a fourth fails without one; the collect job still runs
    (afterany) and summarises the results it finds."""
    write_result = ("import json, os, sys; json.dump({'gpus': os.environ.get('CUDA_VISIBLE_DEVICES')}, "
                    "open(f'results/{sys.argv[1]}.json', 'w'))")
    (tmp_path / "results").mkdir()
    tasks_file = tmp_path / "tasks.txt"
    tasks_file.write_text(shlex.join([sys.executable, "-c", write_result, "alice"]) + "\n"
                          + json.dumps([sys.executable, "-c", write_result, "bob"]) + "\n"
                          + shlex.join([sys.executable, "-c", write_result, "carol"]) + "\n"
                          + shlex.join([sys.executable, "-c", "raise SystemExit(3)"]) + "\n")
    collect = [sys.executable, "-c", "import json, pathlib; names = sorted(p.stem for p in "
               "pathlib.Path('results').glob('*.json')); pathlib.Path('summary.json').write_text(json.dumps(names))"]
    logs = tmp_path / "logs"

    script = slurm.write_array_script(tmp_path / "array.sbatch", slurm.read_tasks(tasks_file), log_dir=logs,
                                      time_limit="00:02:00", cpus_per_task=1, workdir=tmp_path)
    array_id = slurm.submit(script)
    submitted.append(array_id)
    collect_id = slurm.submit_after(array_id, collect, log_dir=logs, workdir=tmp_path)
    submitted.append(collect_id)
    states = slurm.wait_for_jobs([array_id, collect_id], timeout_s=60, poll_s=0.5)

    assert states == {f"{array_id}_0": "COMPLETED", f"{array_id}_1": "COMPLETED", f"{array_id}_2": "COMPLETED",
                      f"{array_id}_3": "FAILED", collect_id: "COMPLETED"}
    for name in ("alice", "bob", "carol"):
        # Each task was given the (fake) GPU that the script asks for.
        assert json.loads((tmp_path / "results" / f"{name}.json").read_text()) == {"gpus": "0"}
    assert json.loads((tmp_path / "summary.json").read_text()) == ["alice", "bob", "carol"]
    for task in range(4):
        assert (logs / f"glm-asr-grade-{array_id}_{task}.out").read_text().startswith(f"task {task} on ")
    assert (logs / f"glm-asr-collect-{collect_id}.out").is_file()


def test_sbatch_refusal_is_a_user_error(tmp_path):
    script = slurm.write_array_script(tmp_path / "array.sbatch", [["true"]], log_dir=tmp_path, time_limit="soon")
    with pytest.raises(UserError, match=r"sbatch refused .*array\.sbatch: sbatch: error: Invalid --time specification"):
        slurm.submit(script)


def test_class_grading_as_a_job_array(submitted, tiny_ckpt, clips, tmp_path):
    """./benchmark.sh --grade --slurm: one array task per submission and baseline, then the collect job
    builds the table; grading the same class locally afterwards runs nothing (the results' keys match)
    and builds the same table. (The statuses of every kind of submission: tests/test_class_grading.py.)"""
    from glm_asr_lab import synthetic_class

    submissions, out = tmp_path / "submissions", tmp_path / "grading"
    synthetic_class.main([str(submissions), "--track", "triton", "--kinds", "correct,wrong"])
    command = [str(REPO / "benchmark.sh"), "--grade", str(submissions), "--out", str(out), "--device", "cpu",
               "--model", str(tiny_ckpt), "--audio", str(clips["short"]), "--max-new-tokens", "2",
               "--cases", "gelu_kernel", "--time-limit", "300"]
    result = subprocess.run([*command, "--slurm", "--wait", f"--slurm-arg={ONE_CPU}"], capture_output=True,
                            text=True, timeout=900)
    jobs = re.search(r"Submitted job array (\d+) .* collect job (\d+) after it", result.stdout)
    assert jobs, result.stdout + result.stderr
    submitted += jobs.groups()
    assert result.returncode == 0, result.stdout + result.stderr
    array_id = jobs.group(1)
    states = re.search(r"Jobs ended: (.*)", result.stdout).group(1)
    assert states.count("COMPLETED") == 6, states  # five tasks and the collect job
    assert "2 students: 1 PASS, 1 FAIL" in result.stdout  # the collect job's log, printed by --wait
    script = (out / "slurm" / "array.sbatch").read_text()
    assert "#SBATCH --array=0-4" in script and "--task correct" in script and "--gres" not in script
    for task in range(5):
        assert (out / "slurm" / "logs" / f"glm-asr-grade-{array_id}_{task}.out").is_file()

    with open(out / "grades.csv", newline="") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    assert {name: row["status"] for name, row in rows.items()} == {"correct": "PASS", "wrong": "FAIL"}
    assert rows["correct"]["ids_equal_transformers_fp32"] == "yes" and float(rows["correct"]["time_ms"]) > 0
    table = (out / "grades.md").read_text()

    local = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert local.returncode == 0 and ": 0 to run, 5 unchanged since their result" in local.stdout, local.stdout
    assert (out / "grades.md").read_text() == table
