"""README's quick start on a machine without a GPU or the hub, as a newcomer types it.

The first command, `./benchmark.sh glm_asr_triton_example`, cannot reach the hub: its one error line
names the route that works on a CPU, README's two tiny-checkpoint commands, and those two commands
run and end with the verdict on random weights. `./benchmark.sh glm_asr_triton_example --device cpu
--random-weights` would run the full-size model in the Triton interpreter for hours: it is refused
in one line that names the same route, before any weight is made. The PyTorch track and the tiny
checkpoints pass the same check.
"""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from glm_asr_course.model.checkpoint import default_config_dict
from glm_asr_course.command_line import INTERPRETED_MAX_PARAMETERS, refuse_interpreted_full_size, parameter_count
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.errors import UserError
from glm_asr_course.tracks import open_checkpoint

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY_ROUTE = ("python -m glm_asr_course.reference.tiny_checkpoint /tmp/tiny && "
              "./benchmark.sh glm_asr_triton_example --model /tmp/tiny")


def run(command: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **env))


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
    """README's two commands, with the checkpoint in a folder of this test."""
    first, second = TINY_ROUTE.replace("/tmp/tiny", str(tmp_path / "tiny")).split(" && ")
    assert run(first.split()).returncode == 0
    done = run(second.split() + ["--device", "cpu"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("CPU defaults: 5 new tokens, no warm-up, 1 run")
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
