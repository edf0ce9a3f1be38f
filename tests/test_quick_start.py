"""README's quick start on a machine without a GPU or the hub, as a newcomer types it.

The first command, `./benchmark.sh glm_asr_triton_example`, cannot reach the hub: its one error line
names the route that works on a CPU, `./benchmark.sh glm_asr_triton_example --model tiny`, and that
command runs from a fresh shell (no PYTHONPATH, no TRITON_INTERPRET, an empty cache: it builds the tiny
checkpoint) and ends with the verdict on random weights. `./benchmark.sh glm_asr_triton_example --device cpu
--random-weights` would run the full-size model in the Triton interpreter for hours: it is refused
in one line that names the same route, before any weight is made. The PyTorch track and the tiny
checkpoints pass the same check.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glm_asr_course.model.checkpoint import default_config_dict
from glm_asr_course.command_line import INTERPRETED_MAX_PARAMETERS, refuse_interpreted_full_size, parameter_count
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.errors import UserError
from glm_asr_course.tracks import open_checkpoint

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY_ROUTE = "./benchmark.sh glm_asr_triton_example --model tiny"


def fresh_shell(**env) -> dict:
    """The environment of a new terminal: none of the variables a test run or an activated venv sets,
    except VIRTUAL_ENV where the checkout has no .venv of its own (a worktree of a checkout that has one)."""
    fresh = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "GLM_ASR_CUTILE")}
    if (REPO_ROOT / ".venv").is_dir():
        fresh.pop("VIRTUAL_ENV", None)
    return dict(fresh, **env)


def run(command: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=fresh_shell(**env))


def test_full_size_in_the_interpreter_is_refused_in_one_line():
    done = run(["./benchmark.sh", "glm_asr_triton_example", "--device", "cpu", "--random-weights"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: on the CPU glm_asr_triton_example runs its kernels in the Triton "
                                  "interpreter, where this 2.3 B-parameter model takes hours a transcription; "
                                  "run them on a tiny random checkpoint instead"), done.stderr
    assert TINY_ROUTE in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the route of a machine without a GPU")
def test_the_first_command_offline_on_a_cpu_names_the_route_that_works(tmp_path):
    done = run(["./benchmark.sh", "glm_asr_triton_example"], HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: cannot get zai-org/GLM-ASR-Nano-2512 from the Hugging Face hub"), done.stderr
    assert f"on a CPU the quick route is a tiny random checkpoint (meaningless text, ids checked against " \
           f"transformers'): {TINY_ROUTE}" in done.stderr
    assert "--random-weights" not in done.stderr  # refused on a CPU: not advised there


def test_the_tiny_route_runs_and_checks_its_ids(tmp_path):
    """The one command, from a fresh shell, with the cache in a folder of this test: it builds the tiny
    checkpoint there first."""
    done = run(TINY_ROUTE.split() + ["--device", "cpu"], GLM_ASR_CACHE=str(tmp_path / "cache"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    built = list((tmp_path / "cache").glob("tiny-random-seed0-*"))
    assert len(built) == 1 and lines[0] == f"Building the tiny random checkpoint in {built[0]} (once)"
    assert lines[1].startswith("CPU defaults: 5 new tokens, no warm-up, 1 run")
    assert re.fullmatch(r"Time: \d+\.\dms \(1 run\)", next(x for x in lines if x.startswith("Time: ")))  # no spread
    assert next(x for x in lines if x.startswith("  Run 1: ")).startswith(
        "  Run 1: encoder layer 1 2, prefill layer 1 2, token 1 2 3 4 5 -> ")  # progress before the first token
    assert lines[-2:] == ["Status: NOT CHECKED (random weights)", "ids equal transformers' fp32: yes (5 tokens)"]


def test_the_threshold_lies_between_the_tiny_and_the_real_model(tiny_ckpt):
    tiny = parameter_count(open_checkpoint(str(tiny_ckpt), torch.float32).config)
    full = parameter_count(ModelConfig.from_dict(default_config_dict()))
    assert tiny < INTERPRETED_MAX_PARAMETERS / 50 and full > INTERPRETED_MAX_PARAMETERS * 40


@pytest.mark.parametrize("folder, path, model, random, refused", [
    ("glm_asr_scratch", "course", "zai-org/GLM-ASR-Nano-2512", True, False),
    ("glm_asr_triton_example", "course", "zai-org/GLM-ASR-Nano-2512", True, True),
    ("glm_asr_triton_example", "fast", "TINY", False, False),
])
def test_only_interpreted_full_size_runs_are_refused(folder, path, model, random, refused, tiny_ckpt):
    model = str(tiny_ckpt) if model == "TINY" else model
    if refused:
        with pytest.raises(UserError, match="takes hours a transcription"):
            refuse_interpreted_full_size(model, random, folder, path)
    else:
        refuse_interpreted_full_size(model, random, folder, path)


def test_self_check_runs_the_chosen_files_in_turn_from_a_fresh_shell():
    done = run(["./benchmark.sh", "glm_asr_triton_example", "--self-check", "gelu_kernel", "fast_rope.py"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("== ")] == [
        "== python glm_asr_triton_example/layers.py gelu_kernel", "== python -m glm_asr_triton_example.fast_rope"]
    assert lines[-4:] == ["Self-checks of glm_asr_triton_example:",
                          "  layers.py            PASS  4 passed, 0 failed, 0 TODO",
                          "  fast_rope.py         PASS  1 passed, 0 failed, 0 TODO",
                          "2 of 2 files passed"]


def test_self_check_of_a_template_exits_1_on_its_todo_kernels():
    done = run(["./benchmark.sh", "glm_asr_triton_template", "--self-check", "silu_kernel"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-3:] == ["Self-checks of glm_asr_triton_template:",
                                             "  layers.py            TODO  0 passed, 0 failed, 4 TODO",
                                             "0 of 1 files passed; 1 did not: exit 1"]


def test_self_check_of_an_unknown_kernel_is_one_line_exit_2():
    done = run(["./benchmark.sh", "glm_asr_triton_example", "--self-check", "flash_kernel"])
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: --self-check: flash_kernel is neither a kernel nor a kernel file of "
                                  "glm_asr_triton_example; kernels: apply_rope_kernel, "), done.stderr


def test_self_check_commands_cover_every_kernel_file():
    from glm_asr_course.kernels.self_check import folder_commands

    commands = {file: command[1:] for file, command in folder_commands("glm_asr_triton_example")}
    assert list(commands) == ["layers.py", "attention.py", "rope.py", "glue.py", "conv.py", "fast_attention.py",
                              "fast_head.py", "fast_linear.py", "fast_rope.py"]
    assert commands["rope.py"] == ["glm_asr_triton_example/rope.py"]
    assert commands["fast_head.py"] == ["-m", "glm_asr_triton_example.fast_head"]
    assert [file for file, _ in folder_commands("glm_asr_triton_template")] == [
        "layers.py", "attention.py", "rope.py", "glue.py", "conv.py"]


def test_the_quiet_suite_names_each_slow_test_as_it_starts():
    """utils/test.sh runs pytest -q: a slow module's test prints its name before its dot (tests/conftest.py)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                           "commands_cover_every_kernel_file"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout
    assert "\ntests/test_quick_start.py::test_self_check_commands_cover_every_kernel_file ." in "\n" + done.stdout


# A plain run is the course alone: the lab (grading, profiling, reports) stays out of its process, and
# what it imports of this repository is small enough to read (issue: at most 6,500 lines, track included).
IMPORTED_OF_THE_REPOSITORY = """import atexit, runpy, sys
from pathlib import Path
root = Path.cwd().resolve()
def report():
    files = {Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    ours = sorted(str(f.relative_to(root)) for f in files
                  if f.is_file() and f.is_relative_to(root) and ".venv" not in f.parts)
    print("IMPORTED", ";".join(ours), file=sys.stderr)
atexit.register(report)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU route: a tiny checkpoint in the interpreter")
def test_a_plain_run_imports_the_course_and_its_track_alone():
    done = run([sys.executable, "-c", IMPORTED_OF_THE_REPOSITORY, "benchmark_student.py", "glm_asr_triton_example",
                "--model", "tiny", "--max-new-tokens", "2"], PYTHONPATH=str(REPO_ROOT))
    assert done.returncode == 0, done.stdout + done.stderr
    imported = done.stderr.split("IMPORTED ")[-1].strip().split(";")
    assert not [f for f in imported if f.startswith("glm_asr_lab/")], imported
    assert {f.split("/")[0] for f in imported} <= {"benchmark_student.py", "glm_asr_course", "cutile_emulator",
                                                    "glm_asr_triton_example"}, imported
    lines = sum(len((REPO_ROOT / f).read_text().splitlines()) for f in imported)
    assert lines <= 6500, f"a plain run imports {len(imported)} of the repository's files, {lines} lines"
