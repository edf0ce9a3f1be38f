"""GLM-ASR on the course kernels: one model for both tracks. Read top to bottom:

  encode_audio    conv1 → GELU → conv2 (stride 2) → GELU, then 32 × [LayerNorm → q|k|v linear (+bias)
                  → RoPE on the first half of each q / k head → attention over the whole 30 s window
                  (scores, in-place softmax, P·V) → o linear (+bias) → residual add → LayerNorm →
                  fc1 (+bias) → GELU → fc2 (+bias) → residual add] → LayerNorm
  project_audio   merge 4 frames (a view) → linear → GELU → linear
  embed           token embeddings, each audio placeholder replaced by one projected audio row
  decoder_layers  28 × [RMSNorm → q|k|v linear → RoPE on q and k, k and v into the KV cache →
                  attention over the cache (scores, mask, softmax, P·V) → o linear → residual add →
                  RMSNorm → gate linear → SiLU, up linear, their product → down linear → residual add]
  logits          RMSNorm → lm_head linear;  greedy_head: the same, then argmax

Every matmul, norm, activation, softmax, RoPE table and rotation, and the three steps of attention is
one of the eleven course kernels, called by its launcher's name through ``ops``: the Triton track's
or the cuTile track's (``TrackOps``: the same names and signatures in both). The rest is provided
glue, also in the track (glue.py, conv.py): the conv stem's data movement, the embedding gather, RoPE
positions, the KV-cache write, the attention mask, residual adds, SwiGLU's product, the argmax. torch
only allocates and makes views. engine.GreedyModel owns buffers, the KV cache, CUDA graphs (the prompt
phase and each decode step are captured once and replayed) and the greedy loop.

Precision: fp32 operands meet the tensor cores as TF32 by default ("tf32"); with --precision fp32
every product is IEEE fp32; bf16 multiplies bf16 tiles and accumulates in fp32.
"""

import importlib
from dataclasses import dataclass, fields
from typing import Callable

import torch

from glm_asr_course.errors import UserError
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.engine import GreedyModel
from glm_asr_course.model.precision import Precision
from glm_asr_course.model.regions import region


# The eleven course kernels students write, by the file that holds each: the one list every tool reads
# (glm_asr_lab/make_template.py, --allow-reference, the self-checks, the tests). Each track's __init__.py
# exports it as STUDENT_KERNELS.
COURSE_KERNELS = (
    "attention_scores_kernel", "softmax_inplace_kernel", "attention_output_kernel",  # attention.py
    "rmsnorm_kernel", "layernorm_kernel", "gelu_kernel", "silu_kernel", "linear_kernel_tf32",  # layers.py
    "softmax_kernel",  # layers.py
    "compute_freqs_kernel", "apply_rope_kernel",  # rope.py
)


@dataclass(frozen=True)
class TrackOps:
    """A track's operations, by file: what the course model calls. Launchers take and return torch
    tensors; ``precision`` is "tf32" or "ieee" (fp32 operands; bf16 ignores it)."""

    # layers.py: course kernels
    rmsnorm: Callable  # (x, weight, eps) -> y
    layernorm: Callable  # (x, weight, bias, eps) -> y
    gelu: Callable  # (x) -> y
    silu: Callable  # (x) -> y
    linear_tf32: Callable  # (x, weight, bias=None, *, precision, out=None) -> out
    softmax: Callable  # (x) -> y, over the last dim
    # attention.py: course kernels
    attention_scores: Callable  # (q, k, scale, causal, *, precision) -> fp32 scores
    softmax_inplace: Callable  # (scores) -> scores
    attention_output: Callable  # (p, v, out=None, *, precision) -> out
    # rope.py: course kernels
    rope_tables: Callable  # (max_positions, rotary_dim, theta, device) -> cos, sin
    apply_rope: Callable  # (x, cos, sin, positions, rotary_dim) -> x, rotated in place
    # glue.py and conv.py: provided
    conv1d: Callable  # (x, weight, bias, stride, *, precision) -> (B, T_out, C_out)
    residual_add: Callable  # (x, y) -> x += y
    mul: Callable  # (a, b) -> a * b
    embed_tokens: Callable  # (ids, table, audio_rows, audio_index) -> rows
    token_positions: Callable  # (first_slot, row_start, tokens) -> (B, tokens) int32
    write_kv_cache: Callable  # (k, v, k_cache, v_cache, first_slot)
    mask_scores: Callable  # (scores, row_start, first_slot, valid_len) -> scores
    argmax_rows: Callable  # (logits, banned_ids, suppress, out_ids)
    # weight_loader.py: the checkpoint in the layouts the kernels read
    load_weights: Callable  # (cfg, weights, device, dtype) -> packed_weights.Weights


FILES = {"layers": ("rmsnorm", "layernorm", "gelu", "silu", "linear_tf32", "softmax"),
         "attention": ("attention_scores", "softmax_inplace", "attention_output"),
         "rope": ("rope_tables", "apply_rope"), "conv": ("conv1d",),
         "glue": ("residual_add", "mul", "embed_tokens", "token_positions", "write_kv_cache", "mask_scores",
                  "argmax_rows"),
         "weight_loader": ("load_weights",)}
assert sorted(n for names in FILES.values() for n in names) == sorted(f.name for f in fields(TrackOps))


def track_ops(package: str) -> TrackOps:
    """The operations of a track package (an example, a template, a student's copy), by name."""
    found = {}
    for file, names in FILES.items():
        module = importlib.import_module(f"{package}.{file}")
        for name in names:
            if not hasattr(module, name):
                raise UserError(f"{package}/{file}.py has no {name}: the course model calls it "
                                "(course_model.TrackOps lists what a track provides)")
            found[name] = getattr(module, name)
    return TrackOps(**found)


# ---- attention, from the three course kernels ------------------------------------------------


def encoder_attention(ops: TrackOps, q, k, v, scale: float, out, *, precision: str):
    """softmax(q k^T * scale) v over every frame of each window, no mask: q, k, v, out (W, H, T, D)
    views. The (W, H, T, T) fp32 scores are normalised in place."""
    probs = ops.softmax_inplace(ops.attention_scores(q, k, scale, False, precision=precision))
    return ops.attention_output(probs, v, out, precision=precision)


def decoder_attention(ops: TrackOps, q, k_cache, v_cache, scale: float, *, causal: bool, n_keys: int,
                      kv_start, cache_pos, valid_len, precision: str, out=None):
    """Attention of q (B, Hq, Tq, D) over cache slots [0, n_keys) of k_cache / v_cache
    (B, Hkv, Tmax, D), into out (B, Hq, Tq, D) (allocated when None); returns out. q and out may be
    any views with a contiguous last dim (the q heads of the fused QKV output and a token-major
    buffer, seen head-major: no copies).

    causal: prefill (query t sits in slot t, n_keys = Tq). Otherwise (decode) every slot up to the
    cache's static length is scored and mask_scores hides those at or past valid_len (int32 device
    tensor (1,)), so the launch shapes never change between steps (one CUDA graph serves them all).
    kv_start (int32 (B,)): a row's keys below it are its left padding; cache_pos (int32 (1,)): the
    first query's slot (a query always sees itself).

    GQA without copying: for each batch row, the query heads are seen as (Hkv, group, Tq, D) and each
    kv head as (Hkv, group, n_keys, D) through a group stride of 0, so the course kernels' (batch,
    head) grid runs over (kv head, query head of its group). The probabilities come from
    softmax_kernel, out of place.
    """
    B, Hq, Tq, D = q.shape
    Hkv = k_cache.shape[1]
    group = Hq // Hkv
    if out is None:
        out = torch.empty((B, Hq, Tq, D), dtype=q.dtype, device=q.device)
    for b in range(B):
        k = k_cache[b, :, None, :n_keys].expand(Hkv, group, n_keys, D)
        v = v_cache[b, :, None, :n_keys].expand(Hkv, group, n_keys, D)
        scores = ops.attention_scores(q[b].view(Hkv, group, Tq, D), k, scale, causal, precision=precision)
        ops.mask_scores(scores, kv_start[b:b + 1], cache_pos, valid_len)
        ops.attention_output(ops.softmax(scores), v, out[b].view(Hkv, group, Tq, D), precision=precision)
    return out


# ---- the model --------------------------------------------------------------------------------


def model_loader(package: str) -> Callable:
    """A track's ``load_model(cfg, weights, device, precision)``: the course model on the package's
    operations (looked up on first use, so that importing model.py launches nothing)."""
    def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str):
        return CourseGlmAsr(cfg, weights, device, precision, track_ops(package))
    return load_model


class CourseGlmAsr(GreedyModel):
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str,
                 ops: TrackOps):
        super().__init__(cfg, device, precision)
        self.ops = ops
        self.w = ops.load_weights(cfg, weights, self.device, self.dtype)
        e, d = cfg.encoder, cfg.decoder
        self.enc_cos, self.enc_sin = ops.rope_tables(e.max_positions, e.rotary_dim, e.rope_theta, self.device)
        self.dec_cos, self.dec_sin = ops.rope_tables(d.max_positions, d.rotary_dim, d.rope_theta, self.device)
        # Every window numbers its frames 0, 1, ...: positions from slot 0, no padding.
        no_offset = torch.zeros(1, dtype=torch.int32, device=self.device)
        self.enc_positions = ops.token_positions(no_offset, no_offset, e.max_positions)

    def linear(self, x, weight, bias=None):
        return self.ops.linear_tf32(x, weight, bias, precision=self.precision.dot)

    # ---- audio encoder ------------------------------------------------------------------------
    @torch.inference_mode()
    @region("encoder")
    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        """(windows, mels, frames) log-mel → (windows, frames/2, hidden) after the final LayerNorm."""
        ops, w, dot = self.ops, self.w, self.precision.dot
        features = features.to(self.device, self.dtype)
        with region("encoder.conv"):
            h = ops.gelu(ops.conv1d(features, w.conv1_weight, w.conv1_bias, 1, precision=dot))
            x = ops.gelu(ops.conv1d(h.transpose(1, 2), w.conv2_weight, w.conv2_bias, 2, precision=dot))
        windows, frames, hidden = x.shape
        x = x.view(windows * frames, hidden)
        for layer in w.encoder_layers:
            with region("encoder.layer"):
                self._encoder_layer(layer, x, windows, frames)
        with region("encoder.norm"):
            x = ops.layernorm(x, w.encoder_norm_weight, w.encoder_norm_bias, self.cfg.encoder.layer_norm_eps)
        return x.view(windows, frames, hidden)

    def _encoder_layer(self, layer, x, windows: int, frames: int):
        """One layer over the residual stream x (windows · frames, hidden), updated in place."""
        ops, e = self.ops, self.cfg.encoder
        heads, head_dim = e.num_heads, e.head_dim
        h = ops.layernorm(x, layer.ln1_weight, layer.ln1_bias, e.layer_norm_eps)
        qkv = self.linear(h, layer.qkv_weight, layer.qkv_bias).view(windows, frames, 3 * heads, head_dim)
        ops.apply_rope(qkv[:, :, :2 * heads], self.enc_cos, self.enc_sin, self.enc_positions[:, :frames],
                       e.rotary_dim)
        q, k, v = (qkv[:, :, i * heads:(i + 1) * heads].transpose(1, 2) for i in range(3))  # (W, H, T, D) views
        attn = torch.empty((windows, frames, heads, head_dim), dtype=self.dtype, device=self.device)
        encoder_attention(ops, q, k, v, head_dim ** -0.5, attn.transpose(1, 2), precision=self.precision.dot)
        ops.residual_add(x, self.linear(attn.view(windows * frames, -1), layer.o_weight, layer.o_bias))
        h = ops.layernorm(x, layer.ln2_weight, layer.ln2_bias, e.layer_norm_eps)
        h = ops.gelu(self.linear(h, layer.fc1_weight, layer.fc1_bias))
        ops.residual_add(x, self.linear(h, layer.fc2_weight, layer.fc2_bias))

    @torch.inference_mode()
    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        """Concatenate each 4 consecutive frames (a free view), then Linear·GELU·Linear."""
        windows, frames, _ = encoded.shape
        merged = encoded.reshape(windows * frames // self.cfg.merge_factor, self.cfg.encoder.intermediate_size)
        with region("projector"):
            h = self.ops.gelu(self.linear(merged, self.w.projector_1_weight, self.w.projector_1_bias))
            out = self.linear(h, self.w.projector_2_weight, self.w.projector_2_bias)
        return out.view(windows, frames // self.cfg.merge_factor, -1)

    # ---- text decoder -------------------------------------------------------------------------
    def embed(self, ids, audio_rows, audio_index):
        return self.ops.embed_tokens(ids, self.w.embed_tokens, audio_rows, audio_index)

    def decoder_layers(self, x, state, tokens: int, decode: bool):
        """x (batch·tokens, hidden) holds cache slots cache_pos … cache_pos + tokens − 1."""
        ops, d = self.ops, self.cfg.decoder
        Hq, Hkv, D = d.num_heads, d.num_kv_heads, d.head_dim
        positions = ops.token_positions(state.cache_pos, state.kv_start, tokens)
        attn = torch.empty((state.batch, tokens, Hq, D), dtype=self.dtype, device=self.device)
        for layer, k_cache, v_cache in zip(self.w.decoder_layers, state.k_cache, state.v_cache):
            with region("decoder.layer"):
                h = ops.rmsnorm(x, layer.ln1_weight, d.rms_norm_eps)
                qkv = self.linear(h, layer.qkv_weight).view(state.batch, tokens, Hq + 2 * Hkv, D)
                ops.apply_rope(qkv[:, :, :Hq + Hkv], self.dec_cos, self.dec_sin, positions, d.rotary_dim)
                ops.write_kv_cache(qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:], k_cache, v_cache, state.cache_pos)
                # q and the output are (B, T, H, D) token-major, seen head-major: no copies.
                decoder_attention(ops, qkv[:, :, :Hq].transpose(1, 2), k_cache, v_cache, D ** -0.5,
                                  causal=not decode, n_keys=state.cache_len if decode else tokens,
                                  kv_start=state.kv_start, cache_pos=state.cache_pos, valid_len=state.valid_len,
                                  precision=self.precision.dot, out=attn.transpose(1, 2))
                ops.residual_add(x, self.linear(attn.view(state.batch * tokens, Hq * D), layer.o_weight))
                h = ops.rmsnorm(x, layer.ln2_weight, d.rms_norm_eps)
                gate_weight, up_weight = layer.gate_up_weight.chunk(2)
                act = ops.mul(ops.silu(self.linear(h, gate_weight)), self.linear(h, up_weight))
                ops.residual_add(x, self.linear(act, layer.down_weight))
        return x

    def logits(self, hidden):
        normed = self.ops.rmsnorm(hidden, self.w.decoder_norm_weight, self.cfg.decoder.rms_norm_eps)
        return self.linear(normed, self.w.lm_head)

    def greedy_head(self, last_hidden, state):
        self.ops.argmax_rows(self.logits(last_hidden), self.eos_ids, state.ban_eos, state.token_ids)
