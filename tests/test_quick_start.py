"""README's quick start on a machine without a GPU or the hub, as a newcomer types it.

`./benchmark.sh glm_asr_triton_example --device cpu --random-weights` would run the full-size model
in the Triton interpreter for hours: it is refused in one line that says why and what to run instead,
before any weight is made. The PyTorch track and the tiny checkpoints pass the same check.
"""

import argparse
import subprocess
from pathlib import Path

import pytest
import torch

from glm_asr_common.checkpoint import default_config_dict
from glm_asr_common.cli import INTERPRETED_MAX_PARAMETERS, _refuse_interpreted_full_size, parameter_count
from glm_asr_common.config import ModelConfig
from glm_asr_common.errors import UserError
from glm_asr_common.runtime import open_checkpoint

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_full_size_in_the_interpreter_is_refused_in_one_line():
    done = subprocess.run(["./benchmark.sh", "glm_asr_triton_example", "--device", "cpu", "--random-weights"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: on the CPU glm_asr_triton_example runs its kernels in the Triton "
                                  "interpreter, where this 2.3 B-parameter model takes hours a transcription; "
                                  "run glm_asr_scratch (PyTorch) instead"), done.stderr
    assert "python -m glm_asr_common.tiny_checkpoint /tmp/tiny && ./benchmark.sh glm_asr_triton_example " \
           "--device cpu --model /tmp/tiny" in done.stderr


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
    args = argparse.Namespace(model=str(tiny_ckpt) if model == "TINY" else model, random_weights=random)
    if refused:
        with pytest.raises(UserError, match="takes hours a transcription"):
            _refuse_interpreted_full_size(args, folder, path)
    else:
        _refuse_interpreted_full_size(args, folder, path)
