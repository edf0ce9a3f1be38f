"""Canonical checkpoint tensors → the packed layouts the kernel tracks read, on the device, once at load.

Two fusions are made here so the forward pass launches fewer, larger GEMMs:
  * q, k, v projections of a layer → one (q + k + v, hidden) matrix (the encoder's k_proj has no bias,
    so its slice of the fused bias is zero: adding 0.0 changes nothing);
  * the decoder MLP's gate and up projections → one (2 · intermediate, hidden) matrix, rows [gate; up]:
    a fused gated GEMM reads it whole, the course paths its two halves (free row views).
A track's weight_loader.py calls ``pack_weights`` with its own conv layout, if any.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from glm_asr_course.model.config import ModelConfig


@dataclass
class EncoderLayerWeights:
    ln1_weight: torch.Tensor
    ln1_bias: torch.Tensor
    qkv_weight: torch.Tensor
    qkv_bias: torch.Tensor
    o_weight: torch.Tensor
    o_bias: torch.Tensor
    ln2_weight: torch.Tensor
    ln2_bias: torch.Tensor
    fc1_weight: torch.Tensor
    fc1_bias: torch.Tensor
    fc2_weight: torch.Tensor
    fc2_bias: torch.Tensor


@dataclass
class DecoderLayerWeights:
    ln1_weight: torch.Tensor
    qkv_weight: torch.Tensor
    o_weight: torch.Tensor
    ln2_weight: torch.Tensor
    gate_up_weight: torch.Tensor
    down_weight: torch.Tensor


@dataclass
class Weights:
    conv1_weight: torch.Tensor
    conv1_bias: torch.Tensor
    conv2_weight: torch.Tensor
    conv2_bias: torch.Tensor
    encoder_layers: list[EncoderLayerWeights]
    encoder_norm_weight: torch.Tensor
    encoder_norm_bias: torch.Tensor
    projector_1_weight: torch.Tensor
    projector_1_bias: torch.Tensor
    projector_2_weight: torch.Tensor
    projector_2_bias: torch.Tensor
    embed_tokens: torch.Tensor
    decoder_layers: list[DecoderLayerWeights]
    decoder_norm_weight: torch.Tensor
    lm_head: torch.Tensor


def pack_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, dtype, *,
                 conv_layout: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Weights:
    """Canonical tensors (glm_asr_course.model.checkpoint names) → ``Weights`` on ``device`` in ``dtype``.
    ``conv_layout`` re-lays each conv weight (C_out, C_in, k) for a track whose conv reads another
    layout; by default it stays as stored."""
    relayout = conv_layout or (lambda t: t)

    def get(name):
        return weights[name].to(device=device, dtype=dtype).contiguous()

    def cat(*names):
        return torch.cat([weights[n].to(dtype) for n in names]).to(device).contiguous()

    encoder_layers = []
    for i in range(cfg.encoder.num_layers):
        p = f"encoder.layers.{i}."
        q_bias = weights[p + "self_attn.q_proj.bias"]
        encoder_layers.append(EncoderLayerWeights(
            ln1_weight=get(p + "input_layernorm.weight"), ln1_bias=get(p + "input_layernorm.bias"),
            qkv_weight=cat(*(p + f"self_attn.{x}_proj.weight" for x in "qkv")),
            qkv_bias=torch.cat([q_bias, torch.zeros_like(q_bias), weights[p + "self_attn.v_proj.bias"]])
            .to(device=device, dtype=dtype),
            o_weight=get(p + "self_attn.o_proj.weight"), o_bias=get(p + "self_attn.o_proj.bias"),
            ln2_weight=get(p + "post_attention_layernorm.weight"), ln2_bias=get(p + "post_attention_layernorm.bias"),
            fc1_weight=get(p + "mlp.fc1.weight"), fc1_bias=get(p + "mlp.fc1.bias"),
            fc2_weight=get(p + "mlp.fc2.weight"), fc2_bias=get(p + "mlp.fc2.bias"),
        ))
    decoder_layers = []
    for i in range(cfg.decoder.num_layers):
        p = f"decoder.layers.{i}."
        decoder_layers.append(DecoderLayerWeights(
            ln1_weight=get(p + "input_layernorm.weight"),
            qkv_weight=cat(*(p + f"self_attn.{x}_proj.weight" for x in "qkv")),
            o_weight=get(p + "self_attn.o_proj.weight"),
            ln2_weight=get(p + "post_attention_layernorm.weight"),
            gate_up_weight=cat(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
            down_weight=get(p + "mlp.down_proj.weight"),
        ))
    return Weights(
        conv1_weight=relayout(get("encoder.conv1.weight")).contiguous(), conv1_bias=get("encoder.conv1.bias"),
        conv2_weight=relayout(get("encoder.conv2.weight")).contiguous(), conv2_bias=get("encoder.conv2.bias"),
        encoder_layers=encoder_layers,
        encoder_norm_weight=get("encoder.norm.weight"), encoder_norm_bias=get("encoder.norm.bias"),
        projector_1_weight=get("projector.linear_1.weight"), projector_1_bias=get("projector.linear_1.bias"),
        projector_2_weight=get("projector.linear_2.weight"), projector_2_bias=get("projector.linear_2.bias"),
        embed_tokens=get("decoder.embed_tokens.weight"),
        decoder_layers=decoder_layers,
        decoder_norm_weight=get("decoder.norm.weight"),
        lm_head=get("lm_head.weight"),
    )
