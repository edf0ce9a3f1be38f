"""The cluster tools where no Slurm runs: show_tunnel.sh's bad input, and glm_asr_lab.grading.slurm's
tasks files, array scripts and its error without sbatch. tests/test_slurm.py runs them on a real Slurm."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glm_asr_lab.grading import slurm
from glm_asr_course.errors import UserError

REPO = Path(__file__).resolve().parent.parent
SHOW_TUNNEL = REPO / "show_tunnel.sh"


def run_show_tunnel(*args, **env_changes):
    """show_tunnel.sh ARGS with these environment variables changed; through /bin/bash, so a PATH
    without Slurm's commands (or any others) still runs it."""
    env = {**os.environ, **env_changes}
    return subprocess.run(["/bin/bash", str(SHOW_TUNNEL), *args], capture_output=True, text=True, env=env,
                          timeout=30)


def assert_one_error_line(result, fragment):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("args, fragment", [
    ((), "which port?"),
    (("abc",), "port must be a number from 1 to 65535, not 'abc'"),
    (("0",), "not '0'"),
    (("65536",), "not '65536'"),
    (("99999999999999999999",), "not '99999999999999999999'"),
    (("8501", "12", "13"), "too many arguments"),
    (("8501", "demo"), "JOBID must be a Slurm job id"),
])
def test_show_tunnel_bad_arguments(args, fragment):
    assert_one_error_line(run_show_tunnel(*args), fragment)


def test_show_tunnel_without_slurm():
    assert_one_error_line(run_show_tunnel("8501", PATH="/nonexistent"), "squeue is not on PATH")


def test_show_tunnel_help_names_the_login_host_variable():
    result = run_show_tunnel("--help")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("Usage: ./show_tunnel.sh PORT [JOBID]")
    assert "GLM_ASR_LOGIN_HOST" in result.stdout


def test_read_tasks_takes_shell_words_and_json(tmp_path):
    tasks_file = tmp_path / "tasks.txt"
    tasks_file.write_text("# one task a line\n"
                          "python grade.py 'alice smith' --runs 3\n"
                          "\n"
                          + json.dumps(["python", "grade.py", "bob's folder"]) + "\n")
    assert slurm.read_tasks(tasks_file) == [["python", "grade.py", "alice smith", "--runs", "3"],
                                            ["python", "grade.py", "bob's folder"]]


@pytest.mark.parametrize("text, fragment", [
    ("python ok.py\n[\"unclosed\"\n", "tasks.txt:2: not a JSON list nor shell words"),
    ("python 'unbalanced\n", "tasks.txt:1: not a JSON list nor shell words"),
    ("[\"python\", 3]\n", "tasks.txt:1: a task must be a non-empty list of strings"),
    ("[]\n", "tasks.txt:1: a task must be a non-empty list of strings"),
    ("# nothing but a comment\n\n", "tasks.txt: no tasks in it"),
])
def test_read_tasks_bad_lines(tmp_path, text, fragment):
    tasks_file = tmp_path / "tasks.txt"
    tasks_file.write_text(text)
    with pytest.raises(UserError, match=fragment.replace("[", r"\[")):
        slurm.read_tasks(tasks_file)


def test_read_tasks_missing_file(tmp_path):
    with pytest.raises(UserError, match="cannot read the tasks file"):
        slurm.read_tasks(tmp_path / "absent.txt")


def test_array_script_runs_each_task_argv_unchanged(tmp_path):
    """The script runs outside Slurm too, given SLURM_ARRAY_TASK_ID: each task gets its argv back
    word for word, quotes and spaces included, and a task number past the end is an error."""
    echo_argv = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    tasks = [[*echo_argv, "first"], [*echo_argv, "it's a \"quoted\" word", "$HOME", "*"]]
    script = slurm.write_array_script(tmp_path / "array.sbatch", tasks, log_dir=tmp_path / "logs")
    assert (tmp_path / "logs").is_dir()

    def run_task(index):
        return subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path,
                              env={**os.environ, "SLURM_ARRAY_TASK_ID": str(index)}, timeout=30)

    result = run_task(1)
    assert result.returncode == 0, result.stderr
    header, output = result.stdout.splitlines()
    assert header.startswith("task 1 on ")
    assert json.loads(output) == ["it's a \"quoted\" word", "$HOME", "*"]
    past_end = run_task(2)
    assert past_end.returncode == 2 and past_end.stderr.strip() == "error: no task 2 in this script"


def test_array_script_options(tmp_path):
    tasks = [["true"]] * 5
    with_gpus = slurm.write_array_script(tmp_path / "a.sbatch", tasks, log_dir=tmp_path / "logs",
                                         time_limit="00:05:00", gpus=2, gpu_gres="gpu:h100", max_parallel=2,
                                         job_name="class", workdir=tmp_path)
    options = [line.split(" ", 1)[1] for line in with_gpus.read_text().splitlines() if line.startswith("#SBATCH")]
    assert options == ["--job-name=class", "--array=0-4%2", "--time=00:05:00", "--cpus-per-task=4",
                       f'--output="{tmp_path}/logs/%x-%A_%a.out"', f'--chdir="{tmp_path}"', "--gres=gpu:h100:2"]
    without_gpus = slurm.write_array_script(tmp_path / "b.sbatch", tasks, log_dir=tmp_path / "logs", gpus=0)
    assert "--gres" not in without_gpus.read_text()


def test_submit_without_sbatch_is_a_user_error(tmp_path, monkeypatch):
    script = slurm.write_array_script(tmp_path / "a.sbatch", [["true"]], log_dir=tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="sbatch is not on PATH"):
        slurm.submit(script)
    with pytest.raises(UserError, match="sbatch is not on PATH"):
        slurm.submit_after("12", ["true"], log_dir=tmp_path)
    with pytest.raises(UserError, match="squeue is not on PATH"):
        slurm.wait_for_jobs(["12"], timeout_s=1)
