# Generated from glm_asr_triton_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""GLM-ASR on the course kernels: every matmul, norm, activation, softmax and attention is one of the
ten kernels of layers.py, attention.py and rope.py. Read top to bottom:

  encode_audio    conv1 → GELU → conv2 (stride 2) → GELU, then 32 × [LayerNorm → q|k|v linear (+bias)
                  → RoPE on the first half of each q / k head → attention over the whole 30 s window
                  (scores, in-place softmax, P·V) → o linear (+bias) → residual add → LayerNorm →
                  fc1 (+bias) → GELU → fc2 (+bias) → residual add] → LayerNorm
  project_audio   merge 4 frames (a view) → linear → GELU → linear
  embed           token embeddings, each audio placeholder replaced by one projected audio row
  decoder_layers  28 × [RMSNorm → q|k|v linear → RoPE, k and v into the KV cache → attention over the
                  cache (scores, mask, softmax, P·V) → o linear → residual add → RMSNorm → gate
                  linear → SiLU, up linear, their product → down linear → residual add]
  logits          RMSNorm → lm_head linear;  greedy_head: the same, then argmax

The provided glue (glue.py, conv.py) moves data and adds: the conv stem, the embedding gather, RoPE's
rotation with the KV-cache write, the attention mask, residual adds, SwiGLU's product, the argmax.
glm_asr_common.model.engine.GreedyModel owns the rest: buffers, the KV cache, CUDA graphs (the prompt phase
and each decode step are captured once and replayed, on this path too) and the greedy loop.
"""

import torch

from glm_asr_common.model.config import ModelConfig
from glm_asr_common.model.engine import GreedyModel
from glm_asr_common.model.precision import Precision
from glm_asr_common.model.regions import region

from .attention import decoder_attention, encoder_attention
from .conv import conv1d
from .glue import add, apply_rope, argmax_rows, embed_tokens, mul, rope_qkv_into_cache
from .layers import gelu, layernorm, linear_tf32, rmsnorm, silu
from .rope import rope_tables
from .weight_loader import load_weights


class CourseGlmAsr(GreedyModel):
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str):
        super().__init__(cfg, device, precision)
        self.w = load_weights(cfg, weights, self.device, self.dtype)
        e, d = cfg.encoder, cfg.decoder
        self.enc_cos, self.enc_sin = rope_tables(e.max_positions, e.rotary_dim, e.rope_theta, self.device)
        self.dec_cos, self.dec_sin = rope_tables(d.max_positions, d.rotary_dim, d.rope_theta, self.device)
        self.enc_positions = torch.arange(e.max_positions, dtype=torch.int32, device=self.device)

    def linear(self, x, weight, bias=None):
        return linear_tf32(x, weight, bias, precision=self.precision.dot)

    # ---- audio encoder ------------------------------------------------------------------------
    @torch.inference_mode()
    @region("encoder")
    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        """(windows, mels, frames) log-mel → (windows, frames/2, hidden) after the final LayerNorm."""
        w, dot = self.w, self.precision.dot
        features = features.to(self.device, self.dtype)
        with region("encoder.conv"):
            h = gelu(conv1d(features, w.conv1_weight, w.conv1_bias, stride=1, gelu=False, precision=dot))
            x = gelu(conv1d(h.transpose(1, 2), w.conv2_weight, w.conv2_bias, stride=2, gelu=False, precision=dot))
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
        qkv = self.linear(h, layer.qkv_weight, layer.qkv_bias).view(windows, frames, 3 * heads, head_dim)
        apply_rope(qkv[:, :, : 2 * heads], self.enc_cos, self.enc_sin, self.enc_positions[:frames], e.rotary_dim)
        q, k, v = (qkv[:, :, i * heads:(i + 1) * heads].transpose(1, 2) for i in range(3))  # (W, H, T, D) views
        attn = torch.empty((windows, frames, heads, head_dim), dtype=self.dtype, device=self.device)
        encoder_attention(q, k, v, head_dim ** -0.5, attn.transpose(1, 2), precision=self.precision.dot)
        x = add(x, self.linear(attn.view(windows * frames, -1), layer.o_weight, layer.o_bias), out=x)
        h = layernorm(x, layer.ln2_weight, layer.ln2_bias, e.layer_norm_eps)
        h = gelu(self.linear(h, layer.fc1_weight, layer.fc1_bias))
        return add(x, self.linear(h, layer.fc2_weight, layer.fc2_bias), out=x)

    @torch.inference_mode()
    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        """Concatenate each 4 consecutive frames (a free view), then Linear·GELU·Linear."""
        windows, frames, _ = encoded.shape
        merged = encoded.reshape(windows * frames // self.cfg.merge_factor, self.cfg.encoder.intermediate_size)
        with region("projector"):
            h = gelu(self.linear(merged, self.w.projector_1_weight, self.w.projector_1_bias))
            out = self.linear(h, self.w.projector_2_weight, self.w.projector_2_bias)
        return out.view(windows, frames // self.cfg.merge_factor, -1)

    # ---- text decoder -------------------------------------------------------------------------
    def embed(self, ids, audio_rows, audio_index):
        return embed_tokens(ids, self.w.embed_tokens, audio_rows, audio_index)

    def decoder_layers(self, x, state, tokens: int, decode: bool):
        """x (batch·tokens, hidden) holds cache slots cache_pos … cache_pos + tokens − 1."""
        d = self.cfg.decoder
        q = torch.empty((state.batch, d.num_heads, tokens, d.head_dim), dtype=self.dtype, device=self.device)
        for layer, k_cache, v_cache in zip(self.w.decoder_layers, state.k_cache, state.v_cache):
            with region("decoder.layer"):
                h = rmsnorm(x, layer.ln1_weight, d.rms_norm_eps)
                qkv = self.linear(h, layer.qkv_weight).view(state.batch, tokens, -1)
                rope_qkv_into_cache(qkv, d.num_heads, d.num_kv_heads, d.head_dim, self.dec_cos, self.dec_sin,
                                    d.rotary_dim, q.transpose(1, 2), k_cache, v_cache, state.cache_pos, state.kv_start)
                attn = decoder_attention(q, k_cache, v_cache, d.head_dim ** -0.5, causal=not decode,
                                         n_keys=state.cache_len if decode else tokens, kv_start=state.kv_start,
                                         cache_pos=state.cache_pos, valid_len=state.valid_len,
                                         precision=self.precision.dot)
                # (B, Hq, T, D) → (B·T, Hq·D) rows for o_proj: free for one token, a copy for a prompt.
                attn = attn.transpose(1, 2).reshape(state.batch * tokens, -1)
                x = add(x, self.linear(attn, layer.o_weight), out=x)
                h = rmsnorm(x, layer.ln2_weight, d.rms_norm_eps)
                gate_weight, up_weight = layer.gate_up_weight.chunk(2)
                act = mul(silu(self.linear(h, gate_weight)), self.linear(h, up_weight))
                x = add(x, self.linear(act, layer.down_weight), out=x)
        return x

    def logits(self, hidden):
        normed = rmsnorm(hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps)
        return self.linear(normed, self.w.lm_head)

    def greedy_head(self, last_hidden, state):
        argmax_rows(self.logits(last_hidden), self.eos_ids, state.ban_eos, state.token_ids)


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str) -> CourseGlmAsr:
    return CourseGlmAsr(cfg, weights, device, precision)
