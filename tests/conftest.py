"""Shared pytest fixtures: tiny random GLM-ASR checkpoints and test clips (glm_asr_course.reference.tiny_checkpoint).

All fixtures are session-scoped and written under ``tmp_path_factory``; building
one takes well under a second once transformers is imported.
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest
import torch

# Without a GPU, Triton kernels run in the interpreter; it must be chosen before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    from glm_asr_course.runtimes import triton_interpreter

    triton_interpreter.apply_fixes()
# Under pytest-xdist (utils/test.sh: two workers on a 2-core machine) each worker keeps to one core:
# torch's intra-op threads, here and in the subprocesses that tests start, would only contend with the
# other worker for the cores (the reason cutile_emulator runs its blocks on one thread).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

TESTS_DIR = pathlib.Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
for _p in (str(TESTS_DIR),):
    if _p not in sys.path:
        sys.path.insert(0, _p)


# `pytest -m "not slow"` is the quick suite for a student editing one kernel: the kernels against torch,
# the case tables, the runtimes, the package's rules. Slow: whole models end to end, the grader,
# Slurm, the browser, and compiling every cuTile signature for sm_90.
SLOW_MODULES = {
    "test_awkward_shapes", "test_benchmark_cli", "test_benchmark_detailed", "test_browser_demo",
    "test_class_grading", "test_cupy_model", "test_cutile_course_path", "test_demo", "test_forward_ops",
    "test_full_width", "test_gpu_fastpath_tool", "test_gpu_parity_tool", "test_grading", "test_parity",
    "test_planted_bugs", "test_quick_start", "test_slurm", "test_slurm_offline", "test_template",
    "test_course_model",
}


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config):
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        config.pluginmanager.register(SlowTestNames(reporter), "slow-test-names")
    config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")


class SlowTestNames:
    """In -q runs, a slow module's test names itself as it starts, then gets its dot: a test can take
    minutes on a CPU, and a bare row of dots would leave the user guessing what runs (-v does this for
    every test; the 369 kernel cases of the quick suite stay dots)."""

    def __init__(self, reporter):
        self.reporter = reporter

    def pytest_runtest_logstart(self, nodeid, location):
        if self.reporter.verbosity <= 0 and pathlib.Path(location[0]).stem in SLOW_MODULES:
            self.reporter.ensure_newline()
            self.reporter.write(f"{nodeid} ", flush=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__ in SLOW_MODULES or "sm_90" in item.name:
            item.add_marker(pytest.mark.slow)


class LaunchGrids:
    """Stands in for a @triton.jit kernel and records the grid of every launch."""

    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


@pytest.fixture
def launch_grids(monkeypatch):
    """launch_grids(module, name): module.name, a @triton.jit kernel, replaced for the test by a LaunchGrids
    of it, which is returned."""
    def record(module, name):
        grids = LaunchGrids(getattr(module, name))
        monkeypatch.setattr(module, name, grids)
        return grids
    return record


@pytest.fixture(scope="module")
def own_cutile_launch_record():
    """This module's cuTile launches recorded apart from those of the files that ran before it in the process.

    A module's sm_90 compile test compiles the signatures its cases launched. Under pytest-xdist the
    files that share a worker vary from run to run, and their launches (other shapes, other flags) could
    add minutes of compilation; set aside, the test compiles the same signatures every run. The earlier
    record comes back afterwards."""
    from glm_asr_course.runtimes.cutile import signatures_set_aside

    with signatures_set_aside():
        yield


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> pathlib.Path:
    """Unsharded, float32 storage, untied lm_head (own tensor)."""
    from glm_asr_course.reference.tiny_checkpoint import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ckpt"), sharded=False, storage_dtype="float32",
                                 tie_word_embeddings=False, seed=0)


@pytest.fixture(scope="session")
def tiny_ckpt_sharded_bf16(tmp_path_factory) -> pathlib.Path:
    """Sharded (model.safetensors.index.json + >=3 shards), bfloat16 storage, untied."""
    from glm_asr_course.reference.tiny_checkpoint import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ckpt_sharded_bf16"), sharded=True,
                                 storage_dtype="bfloat16", tie_word_embeddings=False, seed=0)


@pytest.fixture(scope="session")
def tiny_ckpt_tied(tmp_path_factory) -> pathlib.Path:
    """Unsharded, float32 storage, lm_head tied to the embedding (no lm_head tensor on disk)."""
    from glm_asr_course.reference.tiny_checkpoint import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ckpt_tied"), sharded=False, storage_dtype="float32",
                                 tie_word_embeddings=True, seed=0)


@pytest.fixture(scope="session")
def clips(tmp_path_factory) -> dict[str, pathlib.Path]:
    """{"short": 22.05 kHz stereo PCM_16 (~3.5 s), "long45": 45 s 16 kHz float32, "other": 5 s 16 kHz PCM_16}."""
    from glm_asr_lab.derived_clips import make_clips

    return make_clips(tmp_path_factory.mktemp("clips"))


@pytest.fixture(scope="session")
def tiny_ckpt_sharded_fp16(tmp_path_factory) -> pathlib.Path:
    """Sharded, float16 storage, untied: the third storage dtype the loader converts."""
    from glm_asr_course.reference.tiny_checkpoint import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_ckpt_sharded_fp16"), sharded=True,
                                 storage_dtype="float16", tie_word_embeddings=False, seed=0)
