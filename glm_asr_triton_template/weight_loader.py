# Generated from glm_asr_triton_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""Checkpoint tensors → the layouts this track's kernels read (glm_asr_course.model.packed_weights): q|k|v and
gate|up fused into one matrix each; the conv weights stay (C_out, C_in, 3), as conv.py reads them."""

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.packed_weights import Weights, pack_weights


def load_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, dtype) -> Weights:
    return pack_weights(cfg, weights, device, dtype)
