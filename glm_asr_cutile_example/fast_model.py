"""GLM-ASR on fused cuTile kernels: the cuTile example's fast path (``--path fast``, the default).

The same model as model.py, with the work of several course kernels folded into one launch wherever
that saves a round trip through memory or a launch. Read top to bottom:

  encode_audio    conv1 / conv2 as unfold + GEMM with the bias and GELU in the epilogue → 32 ×
                  [LayerNorm → q|k|v GEMM (+bias) → RoPE on q, k → flash attention (non-causal, the
                  whole 30 s window) → o GEMM (+bias, added into the residual) → LayerNorm → fc1
                  (+bias, GELU) → fc2 (+bias, added into the residual)] → LayerNorm
  project_audio   merge 4 frames (a view) → GEMM (+bias, GELU) → GEMM (+bias)
  decoder_layers  28 × [RMSNorm → q|k|v → RoPE + KV-cache write → attention (causal flash for the
                  prompt, split flash-decoding for one new token) → o (+residual) → RMSNorm →
                  gate|up with SwiGLU → down (+residual)]. For one token at batch 1 a layer is five
                  launches: RMSNorm → q|k|v GEMV → RoPE → cache write in one, attention, o GEMV
                  (+residual), RMSNorm → gate|up GEMV, SwiGLU → down GEMV (+residual), each with
                  programmatic dependent launch: a kernel starts, and loads its first weights,
                  while the one before it drains.
  greedy_head     RMSNorm + lm_head + argmax fused: the logits never reach memory.

Kernels: fast_linear.py (GEMM / GEMV), fast_attention.py, fast_rope.py, fast_head.py; shared with the
course path: layers.layernorm_kernel and rmsnorm_kernel (launched by fast_linear at their own rows a block,
except the encoder's last LayerNorm and the logits' RMSNorm, which FastPathModel runs through the course's ops),
rope.rope_tables / apply_rope, glue (embedding, token positions, KV-cache write) and conv's
unfolding. This file holds the cuTile launches; the model
around them (weights, RoPE tables, the encoder stack, projector, embedding, logits) is FastPathModel
in glm_asr_course/model/fast_model.py, which the Triton fast path fills too.
glm_asr_course.model.engine.GreedyModel captures the prompt phase and each decode step as CUDA graphs
(cuTile launches on the current stream are captured) and replays them.
"""

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.course_model import track_ops
from glm_asr_course.model.fast_model import FastPathModel
from glm_asr_course.model.precision import Precision
from glm_asr_course.model.regions import region
from glm_asr_course.runtimes.cutile import launch
from glm_asr_course.runtimes.tile_helpers import cdiv, next_power_of_2

from .conv import TAPS, conv_unfold_kernel
from .fast_attention import EMULATED, decode_attention, flash_attention
from .fast_head import greedy_head
from .fast_linear import layernorm, linear, llama_mlp
from .fast_rope import project_qkv_into_cache
from .glue import token_positions
from .rope import apply_rope


def conv1d_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int, *, precision: str):
    """gelu(conv1d(x, w, bias, stride, padding=1)), kernel 3, time-major (B, T_out, C_out): conv.py's
    unfolding, then one GEMM with the bias and the exact GELU in its epilogue.

    x: (B, C_in, T_in), any strides (a time-major activation as ``h.transpose(1, 2)``); weight: the
    (C_out, 3 * C_in) matrix of conv.conv_weight_as_matrix."""
    B, C_in, T_in = x.shape
    T_out = (T_in - 1) // stride + 1
    unfolded = torch.empty((B, T_out, TAPS, C_in), dtype=x.dtype, device=x.device)
    block_c = min(next_power_of_2(C_in), 128)
    block_t = min(next_power_of_2(T_out), (16384 if EMULATED else 4096) // block_c)
    launch((cdiv(T_out, block_t), cdiv(C_in, block_c), B), conv_unfold_kernel, x, unfolded, stride, block_t, block_c)
    out = linear(unfolded.view(B * T_out, TAPS * C_in), weight, bias, gelu=True, precision=precision)
    return out.view(B, T_out, -1)


class FastGlmAsr(FastPathModel):
    fused_linear = staticmethod(linear)

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str):
        super().__init__(cfg, weights, device, precision, track_ops(__package__))

    def conv_gelu(self, x, weight, bias, stride: int):
        return conv1d_gelu(x, weight, bias, stride, precision=self.dot)

    # ---- audio encoder ------------------------------------------------------------------------
    def _encoder_layer(self, layer, x, attn):
        """One layer over the residual stream x (windows · frames, hidden), updated in place; attn:
        a (windows, frames, heads, head_dim) buffer."""
        e = self.cfg.encoder
        windows, frames, heads, head_dim = attn.shape
        h = layernorm(x, layer.ln1_weight, layer.ln1_bias, e.layer_norm_eps)
        qkv = linear(h, layer.qkv_weight, layer.qkv_bias, precision=self.dot).view(windows, frames, 3 * heads, head_dim)
        apply_rope(qkv[:, :, :2 * heads], self.enc_cos, self.enc_sin, self.enc_positions[:frames], e.rotary_dim)
        q, k, v = (qkv[:, :, i * heads:(i + 1) * heads].transpose(1, 2) for i in range(3))  # (W, H, T, D) views
        flash_attention(q, k, v, head_dim ** -0.5, attn.transpose(1, 2), causal=False, precision=self.dot)
        linear(attn.view(windows * frames, -1), layer.o_weight, layer.o_bias, accumulate_into=x, precision=self.dot)
        h = layernorm(x, layer.ln2_weight, layer.ln2_bias, e.layer_norm_eps)
        h = linear(h, layer.fc1_weight, layer.fc1_bias, gelu=True, precision=self.dot)
        linear(h, layer.fc2_weight, layer.fc2_bias, accumulate_into=x, precision=self.dot)

    # ---- text decoder -------------------------------------------------------------------------
    def decoder_layers(self, x, state, tokens: int, decode: bool):
        """x (batch·tokens, hidden) holds cache slots cache_pos … cache_pos + tokens − 1."""
        d = self.cfg.decoder
        Hq, Hkv, D = d.num_heads, d.num_kv_heads, d.head_dim
        positions = token_positions(state.cache_pos, state.kv_start, tokens)
        q_buffer = torch.empty((1, 1, Hq, D), dtype=self.dtype, device=self.device)
        attn = torch.empty((state.batch, tokens, Hq, D), dtype=self.dtype, device=self.device)
        for layer, k_cache, v_cache in zip(self.w.decoder_layers, state.k_cache, state.v_cache):
            with region("decoder.layer"):
                q = project_qkv_into_cache(x, layer.qkv_weight, layer.ln1_weight, d.rms_norm_eps, Hq, Hkv, D,
                                           self.dec_cos, self.dec_sin, d.rotary_dim, positions, k_cache, v_cache,
                                           state.cache_pos, state.kv_start, q_buffer, precision=self.dot)
                if decode:
                    decode_attention(q[:, 0], k_cache, v_cache, state.valid_len, state.kv_start, D ** -0.5,
                                     attn[:, 0], precision=self.dot)
                else:
                    # The prompt was just written to cache slots 0 .. tokens - 1: its keys.
                    flash_attention(q.transpose(1, 2), k_cache[:, :, :tokens], v_cache[:, :, :tokens], D ** -0.5,
                                    attn.transpose(1, 2), causal=True, precision=self.dot, kv_start=state.kv_start)
                linear(attn.view(state.batch * tokens, Hq * D), layer.o_weight, accumulate_into=x, precision=self.dot)
                llama_mlp(x, layer.ln2_weight, d.rms_norm_eps, layer.gate_up_weight, layer.down_weight,
                          precision=self.dot)
        return x

    def greedy_head(self, last_hidden, state):
        greedy_head(last_hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps, self.w.lm_head,
                    self.eos_ids, state.ban_eos, state.token_ids)


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str) -> FastGlmAsr:
    return FastGlmAsr(cfg, weights, device, precision)
