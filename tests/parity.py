"""Helpers that run transformers' GlmAsr (glm_asr_course.reference.hf_model) and a track on the same
checkpoint and inputs."""

import copy
import dataclasses
import hashlib

import numpy as np
import torch

from glm_asr_course.model.frontend import ASRInputs, prepare_inputs
from glm_asr_course.model.precision import get_precision
from glm_asr_course.reference.hf_model import from_checkpoint
from glm_asr_course.reference.hf_model import generate as generate_with_transformers
from glm_asr_course.reference.hf_model import model_inputs as hf_kwargs  # noqa: F401  (the tests' name for it)
from glm_asr_course.tracks import import_track, open_checkpoint

_HF_CACHE = {}
_HF_IDS = {}


def hf_model(model_dir, dtype=torch.float32):
    """transformers' model of a checkpoint directory, read once per (directory, dtype) in a test session."""
    key = (str(model_dir), dtype)
    if key not in _HF_CACHE:
        _HF_CACHE[key] = from_checkpoint(model_dir, dtype)
    return _HF_CACHE[key]


def hf_generate(model, inputs: ASRInputs, max_new_tokens: int, min_new_tokens: int, eos, **options) -> list[list[int]]:
    """transformers' greedy ids (glm_asr_course.reference.hf_model.generate), run once per model, inputs,
    limits and options in a test session: every track of a parametrized test is compared with the same
    reference run, a few seconds each on a CPU. The model is kept with its ids, so its id is never reused."""
    digest = hashlib.sha256()
    for field in dataclasses.fields(inputs):
        array = getattr(inputs, field.name)
        digest.update(f"{field.name}{array.dtype}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    key = (id(model), digest.hexdigest(), max_new_tokens, min_new_tokens, tuple(eos), repr(sorted(options.items())))
    if key not in _HF_IDS:
        _HF_IDS[key] = model, generate_with_transformers(model, inputs, max_new_tokens, min_new_tokens, eos, **options)
    return copy.deepcopy(_HF_IDS[key][1])


# The tests' device: the GPU where there is one (utils/gpu_check.sh runs some of these files there),
# else the CPU, through Triton's interpreter and the cuTile emulator.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def track_model(track, model_dir, precision="fp32"):
    """(model, checkpoint) of a "folder:path" track (or a bare folder: its default path) on DEVICE."""
    folder, _, path = track.partition(":")
    precision = get_precision(precision)
    ckpt = open_checkpoint(str(model_dir), precision.dtype)
    module = import_track(folder, path or None, DEVICE)
    return module.load_model(ckpt.config, ckpt.weights, DEVICE, precision), ckpt


def inputs_for(ckpt, audios) -> ASRInputs:
    return prepare_inputs(list(audios), ckpt.config, ckpt.processor)


def rel_err(ours, ref) -> float:
    ours, ref = torch.as_tensor(ours).double().cpu(), torch.as_tensor(ref).double().cpu()
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    assert torch.isfinite(ours).all()
    return float((ours - ref).norm() / ref.norm())


def valid_audio_rows(inputs: ASRInputs, projected: torch.Tensor) -> torch.Tensor:
    """The projector rows that replace placeholders (padding windows' tail rows are never used)."""
    rows = np.sort(inputs.audio_index[inputs.audio_index >= 0])
    return projected.reshape(-1, projected.shape[-1])[torch.from_numpy(rows)]
