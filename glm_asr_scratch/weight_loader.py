"""Canonical checkpoint names (glm_asr_course.model.checkpoint) → this model's module names."""

import torch


def state_dict_for(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Attention and MLP projections sit directly on each layer here, so drop 'self_attn.' and 'mlp.'."""
    state = {}
    for name, tensor in weights.items():
        if name == "lm_head.weight":
            name = "decoder.lm_head.weight"
        state[name.replace("self_attn.", "").replace("mlp.", "")] = tensor
    return state
