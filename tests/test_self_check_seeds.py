"""Self-checks draw their random inputs from a seed the case gives, never from the clock or the global
generator: two runs of a check see the same inputs, so a failure can be run again."""

import importlib
import time

import pytest
import torch

from glm_asr_course.kernels import self_check
from glm_asr_course.kernels.greedy_head_case import greedy_head_case


def at_another_moment(monkeypatch, moment: float):
    """The clock and torch's global generator as a later run would find them."""
    monkeypatch.setattr(time, "time", lambda: moment)
    torch.manual_seed(int(moment))


def test_the_greedy_head_case_is_the_same_in_every_run(monkeypatch):
    at_another_moment(monkeypatch, 1_000.0)
    first = greedy_head_case(False, "cpu", cpu_vocab=300)
    at_another_moment(monkeypatch, 2_000.0)
    second = greedy_head_case(False, "cpu", cpu_vocab=300)
    for name in ("x", "norm_weight", "lm_head", "banned"):
        assert torch.equal(getattr(first, name), getattr(second, name)), name
    assert first.x.abs().sum() > 0


def reference_outputs(module, monkeypatch) -> list[torch.Tensor]:
    """The reference of every check the module's self-check makes (a pure function of its inputs),
    its kernels never launched."""
    seen = []

    def check(self, name, launch, reference, *args, **kwargs):
        seen.append(reference().float().cpu())

    monkeypatch.setattr(self_check.SelfCheck, "check", check)
    monkeypatch.setattr(self_check.SelfCheck, "finish", lambda self: 0)
    module._self_check()
    return seen


@pytest.mark.parametrize("module_name", ["glm_asr_triton_example.fast_linear", "glm_asr_cutile_example.fast_linear"])
def test_a_fast_path_self_check_draws_the_same_inputs_in_every_run(module_name, monkeypatch):
    module = importlib.import_module(module_name)
    at_another_moment(monkeypatch, 1_000.0)
    first = reference_outputs(module, monkeypatch)
    at_another_moment(monkeypatch, 2_000.0)
    second = reference_outputs(module, monkeypatch)
    assert len(first) == len(second) >= 5
    assert all(torch.equal(a, b) for a, b in zip(first, second))
