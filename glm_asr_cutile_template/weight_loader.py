# Generated from glm_asr_cutile_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""Checkpoint tensors → the layouts this track's kernels read (glm_asr_course.model.packed_weights): q|k|v and
gate|up fused into one matrix each, and each conv weight (C_out, C_in, 3) relaid as the tap-major
(C_out, 3 · C_in) matrix that conv.py's unfolded GEMM multiplies by."""

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.packed_weights import Weights, pack_weights

from .conv import conv_weight_as_matrix


def load_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, dtype) -> Weights:
    return pack_weights(cfg, weights, device, dtype, conv_layout=conv_weight_as_matrix)
