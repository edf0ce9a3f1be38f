"""GLM-ASR on fused production kernels: the example's fast path (``--path fast``, the default).

The same model as model.py, with the work of several course kernels folded into one launch wherever
that saves a round trip through memory or a launch. Read top to bottom:

  encode_audio    conv1d+GELU ×2 (implicit GEMM, time-major out) → 32 × [LayerNorm → fused QKV GEMM
                  (+bias) → RoPE on q,k (first half of each head) → flash attention (non-causal, the
                  whole 30 s window) → O GEMM (+bias +residual) → LayerNorm → FC1 (+bias, GELU) →
                  FC2 (+bias +residual)] → LayerNorm
  project_audio   merge 4 frames (a view) → GEMM (+bias, GELU) → GEMM (+bias)
  decoder_layers  28 × [RMSNorm → fused QKV GEMM → RoPE + KV-cache write → attention (causal flash
                  for the prompt, split-K flash-decoding for one new token) → O GEMM (+residual) →
                  RMSNorm → fused gate/up GEMM with SwiGLU → down GEMM (+residual)]. For one token
                  (decode, batch 1) a layer is 5 kernels: RMSNorm → q|k|v GEMV → RoPE → cache write in
                  one, attention, O (+residual), RMSNorm → gate|up, and SwiGLU → down (+residual).
  greedy_head     RMSNorm + lm_head + argmax fused: the logits never reach memory.

Kernels: fast_linear.py (GEMM / GEMV), fast_attention.py, fast_rope.py, fast_head.py; shared with the
course path: conv.py, glue.py (embedding, argmax helpers), layers.layernorm / rmsnorm, rope.rope_tables
and rope.apply_rope (the encoder's rotation). FastGlmAsr below writes the launches in this track's
conventions: conv stem, GEMM, encoder layer, decoder layers, head. The rest (weights, RoPE tables,
the encoder stack, projector, embedding, logits) is FastPathModel's, glm_asr_course/model/fast_model.py,
which the cuTile fast path fills too.
"""

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.course_model import track_ops
from glm_asr_course.model.fast_model import FastPathModel
from glm_asr_course.model.precision import Precision
from glm_asr_course.model.regions import region

from .conv import conv1d
from .fast_attention import decode_attention, flash_attention
from .fast_head import greedy_head
from .fast_linear import linear, llama_mlp
from .fast_rope import project_qkv_into_cache
from .layers import layernorm
from .rope import apply_rope


class FastGlmAsr(FastPathModel):
    fused_linear = staticmethod(linear)

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str):
        super().__init__(cfg, weights, device, precision, track_ops(__package__))

    def conv_gelu(self, x, weight, bias, stride: int):
        return conv1d(x, weight, bias, stride=stride, gelu=True, precision=self.dot)

    # ---- audio encoder ------------------------------------------------------------------------
    def _encoder_layer(self, layer, x, attn):
        """One layer over the residual stream x (windows · frames, hidden), updated in place; attn:
        a (windows, frames, heads, head_dim) buffer."""
        e = self.cfg.encoder
        windows, frames, heads, head_dim = attn.shape
        h = layernorm(x, layer.ln1_weight, layer.ln1_bias, e.layer_norm_eps)
        qkv = linear(h, layer.qkv_weight, layer.qkv_bias, precision=self.dot)
        qkv = qkv.view(windows, frames, 3 * heads, head_dim)
        apply_rope(qkv[:, :, : 2 * heads], self.enc_cos, self.enc_sin, self.enc_positions[:frames], e.rotary_dim)
        q, k, v = qkv[:, :, :heads], qkv[:, :, heads:2 * heads], qkv[:, :, 2 * heads:]
        flash_attention(q, k, v, head_dim ** -0.5, causal=False, precision=self.dot, out=attn)
        linear(attn.view(windows * frames, -1), layer.o_weight, layer.o_bias, residual=x, out=x,
               precision=self.dot)
        h = layernorm(x, layer.ln2_weight, layer.ln2_bias, e.layer_norm_eps)
        h = linear(h, layer.fc1_weight, layer.fc1_bias, gelu=True, precision=self.dot)
        linear(h, layer.fc2_weight, layer.fc2_bias, residual=x, out=x, precision=self.dot)

    # ---- text decoder -------------------------------------------------------------------------
    def decoder_layers(self, x, state, tokens: int, decode: bool):
        """x (batch·tokens, hidden) holds cache slots cache_pos … cache_pos + tokens − 1."""
        d = self.cfg.decoder
        q = torch.empty((state.batch, tokens, d.num_heads, d.head_dim), dtype=self.dtype, device=self.device)
        for layer, k_cache, v_cache in zip(self.w.decoder_layers, state.k_cache, state.v_cache):
            with region("decoder.layer"):
                project_qkv_into_cache(x, layer.qkv_weight, layer.ln1_weight, d.rms_norm_eps, d.num_heads,
                                       d.num_kv_heads, d.head_dim, self.dec_cos, self.dec_sin, d.rotary_dim,
                                       q, k_cache, v_cache, state.cache_pos, state.kv_start, precision=self.dot)
                if decode:
                    attn = decode_attention(q, k_cache, v_cache, state.valid_len, state.kv_start, d.head_dim ** -0.5,
                                            precision=self.dot)
                else:
                    attn = flash_attention(q, k_cache, v_cache, d.head_dim ** -0.5, causal=True, precision=self.dot,
                                           kv_start=state.kv_start, kv_layout="bhtd")
                x = linear(attn.view(state.batch * tokens, -1), layer.o_weight, residual=x, out=x,
                           precision=self.dot)
                x = llama_mlp(x, layer.ln2_weight, d.rms_norm_eps, layer.gate_up_weight, layer.down_weight,
                              precision=self.dot)
        return x

    def greedy_head(self, last_hidden, state):
        greedy_head(last_hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps, self.w.lm_head,
                    self.eos_ids, state.ban_eos, state.token_ids, precision=self.dot)


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str) -> FastGlmAsr:
    return FastGlmAsr(cfg, weights, device, precision)
