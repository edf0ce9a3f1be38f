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
and rope.apply_rope (the encoder's rotation).
"""

import torch

from glm_asr_common.model.config import ModelConfig
from glm_asr_common.model.engine import GreedyModel
from glm_asr_common.model.precision import Precision
from glm_asr_common.model.regions import region

from .conv import conv1d
from .fast_attention import decode_attention, flash_attention
from .fast_head import greedy_head
from .fast_linear import linear, llama_mlp, lm_head_logits
from .fast_rope import project_qkv_into_cache
from .glue import embed_tokens
from .layers import layernorm, rmsnorm
from .rope import apply_rope, rope_tables
from .weight_loader import load_weights


class FastGlmAsr(GreedyModel):
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str):
        super().__init__(cfg, device, precision)
        self.w = load_weights(cfg, weights, self.device, self.dtype)
        e, d = cfg.encoder, cfg.decoder
        self.enc_cos, self.enc_sin = rope_tables(e.max_positions, e.rotary_dim, e.rope_theta, self.device)
        self.dec_cos, self.dec_sin = rope_tables(d.max_positions, d.rotary_dim, d.rope_theta, self.device)
        self.enc_positions = torch.arange(e.max_positions, dtype=torch.int32, device=self.device)
        self.dot = self.precision.dot

    # ---- audio encoder ------------------------------------------------------------------------
    @torch.inference_mode()
    @region("encoder")
    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        """(windows, mels, frames) log-mel → (windows, frames/2, hidden) after the final LayerNorm."""
        w = self.w
        features = features.to(self.device, self.dtype)
        with region("encoder.conv"):
            h = conv1d(features, w.conv1_weight, w.conv1_bias, stride=1, gelu=True, precision=self.dot)
            x = conv1d(h.transpose(1, 2), w.conv2_weight, w.conv2_bias, stride=2, gelu=True, precision=self.dot)
        windows, frames, hidden = x.shape
        x = x.view(windows * frames, hidden)
        for layer in w.encoder_layers:
            with region("encoder.layer"):
                x = self._encoder_layer(layer, x, windows, frames)
        with region("encoder.norm"):
            x = layernorm(x, w.encoder_norm_weight, w.encoder_norm_bias, self.cfg.encoder.layer_norm_eps)
        return x.view(windows, frames, hidden)

    def _encoder_layer(self, layer, x, windows: int, frames: int):
        e = self.cfg.encoder
        heads, head_dim = e.num_heads, e.head_dim
        h = layernorm(x, layer.ln1_weight, layer.ln1_bias, e.layer_norm_eps)
        qkv = linear(h, layer.qkv_weight, layer.qkv_bias, input_precision=self.dot)
        qkv = qkv.view(windows, frames, 3 * heads, head_dim)
        apply_rope(qkv[:, :, : 2 * heads], self.enc_cos, self.enc_sin, self.enc_positions[:frames], e.rotary_dim)
        q, k, v = qkv[:, :, :heads], qkv[:, :, heads:2 * heads], qkv[:, :, 2 * heads:]
        attn = flash_attention(q, k, v, head_dim ** -0.5, causal=False, precision=self.dot)
        x = linear(attn.view(windows * frames, -1), layer.o_weight, layer.o_bias, residual=x, out=x,
                   input_precision=self.dot)
        h = layernorm(x, layer.ln2_weight, layer.ln2_bias, e.layer_norm_eps)
        h = linear(h, layer.fc1_weight, layer.fc1_bias, activation="gelu", input_precision=self.dot)
        return linear(h, layer.fc2_weight, layer.fc2_bias, residual=x, out=x, input_precision=self.dot)

    @torch.inference_mode()
    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        """Concatenate each 4 consecutive frames (a free view), then Linear·GELU·Linear."""
        windows, frames, _ = encoded.shape
        merged = encoded.reshape(windows * frames // self.cfg.merge_factor, self.cfg.encoder.intermediate_size)
        with region("projector"):
            h = linear(merged, self.w.projector_1_weight, self.w.projector_1_bias, activation="gelu",
                       input_precision=self.dot)
            out = linear(h, self.w.projector_2_weight, self.w.projector_2_bias, input_precision=self.dot)
        return out.view(windows, frames // self.cfg.merge_factor, -1)

    # ---- text decoder -------------------------------------------------------------------------
    def embed(self, ids, audio_rows, audio_index):
        return embed_tokens(ids, self.w.embed_tokens, audio_rows, audio_index)

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
                           input_precision=self.dot)
                x = llama_mlp(x, layer.ln2_weight, d.rms_norm_eps, layer.gate_up_weight, layer.down_weight,
                              input_precision=self.dot)
        return x

    def logits(self, hidden):
        normed = rmsnorm(hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps)
        return lm_head_logits(normed, self.w.lm_head, input_precision=self.dot)

    def greedy_head(self, last_hidden, state):
        greedy_head(last_hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps, self.w.lm_head,
                    self.eos_ids, state.ban_eos, state.token_ids, input_precision=self.dot)


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str) -> FastGlmAsr:
    return FastGlmAsr(cfg, weights, device, precision)
