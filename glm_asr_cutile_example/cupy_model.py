"""GLM-ASR in plain CuPy array operations, no custom kernels: the cuTile example's baseline (``--path cupy``).

The same model as model.py and fast_model.py, written the way array code is written: matmuls, slices,
reductions and elementwise expressions, each one or a few library kernels (cuBLAS for the products,
CuPy's elementwise and reduction kernels for the rest), with every intermediate in memory. Timed
beside the kernel paths (``benchmark_detailed.py glm_asr_cutile_example --compare
glm_asr_cutile_example:cupy``), it shows what the kernels buy. Read top to bottom:

  encode_audio    conv stem as unfolded frames @ weight, GELU; 32 × [LayerNorm → q|k|v → RoPE →
                  softmax(q kᵀ) v over the window → o → + residual → LayerNorm → fc1 → GELU → fc2 →
                  + residual] → LayerNorm
  project_audio   merge 4 frames → linear → GELU → linear
  decoder_layers  28 × [RMSNorm → q|k|v → RoPE → k, v into the KV cache → masked softmax attention
                  over the cache (GQA: the query heads of one kv head share its keys) → o → +
                  residual → RMSNorm → silu(gate) * up → down → + residual]
  greedy_head     RMSNorm → lm_head → argmax (eos banned while min_new_tokens is not reached)

The array module is CuPy on a GPU and NumPy on a CPU (CuPy's API mirrors NumPy's), so this file
runs, and is tested against transformers, on a machine without a GPU. Tensors cross between torch
and the arrays without copies (DLPack on the GPU, the buffer protocol on the CPU; bfloat16 as its
16-bit pattern). The engine's buffers (KV cache, token ids, counters) stay torch tensors seen as
arrays. CUDA graphs are off: this is eager array code, one Python call per operation, and the
decode step reads the cache position back to the host.

Precision (what CuPy allows):
  fp32   IEEE fp32 arrays; cuBLAS in its default (pedantic-free, no TF32) mode. Comparable with
         transformers' fp32, as the kernel paths.
  tf32   fp32 arrays; cuBLAS with TF32 tensor-core products where CuPy exposes the setting
         (cupy._core set_compute_type), else IEEE, which the model's ``precision_note`` says. NumPy
         has no TF32: on a CPU it computes IEEE fp32.
  bf16   bfloat16 arrays from ml_dtypes (CuPy 14 and NumPy both take its dtype); products with fp32
         accumulation; norms, softmax, GELU, SiLU in fp32 and rounded back where transformers
         rounds. CuPy 14.2 multiplies bfloat16 matrices but not batches of them (attention's
         products): those are widened to fp32 and multiplied in TF32, which holds bf16 operands
         exactly. A CuPy with no bfloat16 matmul at all gets the weight matrices as fp32 copies of
         their bf16 values (the same arithmetic at twice the weight traffic; ``precision_note``
         says so). Without ml_dtypes bf16 is refused with one line.
"""

from __future__ import annotations

import numpy as np
import torch

from glm_asr_course.errors import UserError
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.engine import GreedyModel
from glm_asr_course.model.precision import Precision
from glm_asr_course.model.regions import region

from .weight_loader import load_weights

# ---------------------------------------------------------------------------------------------
# The array module and the torch ⇄ array bridge
# ---------------------------------------------------------------------------------------------


def _bfloat16_dtype():
    try:
        import ml_dtypes
    except ImportError:
        raise UserError("the cupy path's bf16 needs the ml_dtypes package (pip install ml_dtypes; "
                        "source utils/setup-cutile.sh installs it), or run it with --precision tf32 / fp32") from None
    return np.dtype(ml_dtypes.bfloat16)


class ArrayBackend:
    """``xp`` (cupy or numpy) for one device, and zero-copy conversions between torch and its arrays."""

    def __init__(self, device: torch.device, dtype: torch.dtype):
        self.device = device
        if device.type == "cuda":
            try:
                import cupy
            except ImportError:
                raise UserError("the cupy path on a GPU needs CuPy (source utils/setup-cutile.sh installs it)") from None
            self.xp = cupy
            from cupyx.scipy.special import erf
        else:
            self.xp = np
            from scipy.special import erf
        self.erf = erf
        self.bf16 = _bfloat16_dtype() if dtype == torch.bfloat16 else None
        if self.bf16 is not None:
            try:
                self.xp.zeros(2, dtype=np.float32).astype(self.bf16).sum()
            except Exception as error:  # an old CuPy: its kernels have no bfloat16
                raise UserError(f"{self.xp.__name__} {self.xp.__version__} cannot compute in bfloat16 ({error}); "
                                "run the cupy path with --precision tf32 or fp32") from None
        self.dtype = self.bf16 if self.bf16 is not None else np.dtype(np.float32)
        # CuPy 14.2 holds and adds bfloat16 arrays and multiplies bfloat16 matrices, but its batched
        # matmul (3-d and up) takes the dtype for an integer one and fails; NumPy with ml_dtypes does both.
        self.bf16_matmul = self.bf16 is not None and self._multiplies(self.bf16, (2, 2))
        self.bf16_batched_matmul = self.bf16_matmul and self._multiplies(self.bf16, (2, 2, 2))

    def _multiplies(self, dtype, shape) -> bool:
        try:
            a = self.xp.ones(shape, dtype=np.float32).astype(dtype)
            return bool(((a @ a).astype(np.float32) == 2).all())
        except Exception:  # the library's own error, whichever it is: no such matmul there
            return False

    def array(self, t: torch.Tensor):
        """The torch tensor as an array of the same memory (no copy)."""
        bits = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        a = self.xp.from_dlpack(bits) if self.xp is not np else bits.numpy()
        return a.view(self.bf16) if t.dtype == torch.bfloat16 else a

    def tensor(self, a) -> torch.Tensor:
        """The array as a torch tensor of the same memory (no copy)."""
        if a.dtype == self.bf16:
            bits = a.view(np.int16)
            return (torch.from_dlpack(bits) if self.xp is not np else torch.from_numpy(bits)).view(torch.bfloat16)
        return torch.from_dlpack(a) if self.xp is not np else torch.from_numpy(a)


def _tf32_switch(xp):
    """A function turning cuBLAS' TF32 products for fp32 on or off, or None where CuPy hides it."""
    if xp is np:
        return None
    linalg = getattr(getattr(xp, "_core", None), "_routines_linalg", None)
    setter = getattr(linalg, "set_compute_type", None)
    tf32, default = getattr(linalg, "COMPUTE_TYPE_TF32", None), getattr(linalg, "COMPUTE_TYPE_DEFAULT", None)
    if setter is None or tf32 is None or default is None:
        return None
    return lambda on: setter(np.float32, tf32 if on else default)


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


class CupyGlmAsr(GreedyModel):
    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str):
        super().__init__(cfg, device, precision)
        self.use_cuda_graph = False  # eager array code (module docstring)
        self.backend = b = ArrayBackend(self.device, self.dtype)
        self.xp, self.act = b.xp, b.dtype
        tf32_wanted = self.dtype == torch.float32 and self.precision.dot == "tf32"
        self._tf32 = _tf32_switch(self.xp)
        self.precision_note = ("" if not tf32_wanted or self._tf32 is not None else
                               f"{self.xp.__name__} exposes no TF32 switch: fp32 products are IEEE")
        # Without a bfloat16 matmul the weight matrices are held as fp32 copies of their bf16 values and
        # multiplied with TF32 products, which hold bf16 values exactly: a bf16 GEMM's arithmetic
        # (fp32 accumulation), at twice its weight traffic.
        widen = b.bf16 is not None and not b.bf16_matmul
        if widen:
            self.precision_note = (f"{self.xp.__name__} {self.xp.__version__} has no bfloat16 matmul: weight "
                                   "matrices held in fp32 (their bf16 values), products in TF32")
        # The course path's layouts (fused q|k|v, [gate; up], conv weights as matrices), seen as arrays.
        tw = load_weights(cfg, weights, self.device, self.dtype)
        self.w = _as_arrays(tw, b, widen_matrices=widen)
        self._keep = tw  # the torch tensors own the memory the arrays view
        e, d = cfg.encoder, cfg.decoder
        self.enc_cos, self.enc_sin = self._rope_tables(e.max_positions, e.rotary_dim, e.rope_theta)
        self.dec_cos, self.dec_sin = self._rope_tables(d.max_positions, d.rotary_dim, d.rope_theta)
        self.eos = self.xp.asarray(np.asarray(cfg.eos_token_ids, dtype=np.int64))
        self._state_arrays = None

    # ---- helpers ------------------------------------------------------------------------------
    def f32(self, a):
        return a.astype(self.xp.float32, copy=False)

    def rounded(self, a):
        """``a`` in the activation dtype: where transformers materialises a tensor."""
        return a.astype(self.act, copy=False)

    def _product(self, a, b):
        """a @ b as the library returns it: in the operands' dtype, or in fp32 from operands widened
        to fp32 where they differ or the library has no bf16 matmul."""
        b16 = self.backend
        widen = a.dtype != b.dtype or (a.dtype == b16.bf16 and not (
            b16.bf16_batched_matmul if max(a.ndim, b.ndim) > 2 else b16.bf16_matmul))
        if self._tf32 is not None:
            # TF32 holds a bf16 value exactly: fp32 products of bf16 values lose nothing by it.
            self._tf32(self.precision.dot == "tf32" or (widen and self.dtype == torch.bfloat16))
        return self.f32(a) @ self.f32(b) if widen else a @ b

    def matmul(self, a, b, fp32_out: bool = False):
        """a @ b in the activation dtype (cuBLAS / BLAS; fp32 accumulation for bf16), or with
        fp32_out the product of the operands widened to fp32, unrounded (attention scores)."""
        if fp32_out:
            return self._product(self.f32(a), self.f32(b))
        return self.rounded(self._product(a, b))

    def linear(self, x, weight, bias=None):
        """x @ weight^T (+ bias) in the activation dtype. The bias is added to the product as the
        library returns it: fp32 from NumPy (one rounding, as torch), already bf16 from CuPy (a
        second rounding: a fused bias would need a kernel of our own)."""
        rows = x.reshape(-1, x.shape[-1])  # one matrix product (a library's 2-d GEMM), not a batch of them
        if bias is None:
            y = self.matmul(rows, weight.T)
        else:
            y = self.rounded(self.f32(self._product(rows, weight.T)) + self.f32(bias))
        return y.reshape(*x.shape[:-1], -1)

    def gelu(self, x):
        v = self.f32(x)
        return self.rounded(0.5 * v * (1.0 + self.backend.erf(v * np.float32(0.7071067811865476))))

    def layernorm(self, x, weight, bias, eps):
        v = self.f32(x)
        mean = v.mean(-1, keepdims=True)
        centred = v - mean
        var = (centred * centred).mean(-1, keepdims=True)
        return self.rounded(centred / self.xp.sqrt(var + np.float32(eps)) * self.f32(weight) + self.f32(bias))

    def rmsnorm(self, x, weight, eps):
        v = self.f32(x)
        normed = self.rounded(v * (1.0 / self.xp.sqrt((v * v).mean(-1, keepdims=True) + np.float32(eps))))
        return self.rounded(weight * normed)

    def _rope_tables(self, positions: int, rotary_dim: int, theta: float):
        """cos, sin (positions, rotary_dim / 2) in fp32, built as transformers builds them."""
        xp = self.xp
        inv_freq = (1.0 / (theta ** (np.arange(0, rotary_dim, 2, dtype=np.int64).astype(np.float32) / rotary_dim))
                    ).astype(np.float32)
        angles = np.arange(positions, dtype=np.float32)[:, None] * inv_freq[None, :]
        return xp.asarray(np.cos(angles)), xp.asarray(np.sin(angles))

    def rope(self, x, cos, sin, rotary_dim):
        """Rotate-half RoPE on the first rotary_dim channels of x (..., T, H, D); cos/sin (..., T, half)
        rows of the tables. Every product and the sum in the activation dtype, as transformers."""
        half = rotary_dim // 2
        c = self.rounded(cos)[..., None, :]
        s = self.rounded(sin)[..., None, :]
        x1, x2 = x[..., :half], x[..., half:rotary_dim]
        first = self.rounded(self.rounded(x1 * c) - self.rounded(x2 * s))
        second = self.rounded(self.rounded(x2 * c) + self.rounded(x1 * s))
        return self.xp.concatenate([first, second, x[..., rotary_dim:]], axis=-1)

    def attention(self, q, k, v, scale, hidden):
        """softmax(q kᵀ · scale) v; q (B, Hkv, G·T, D) (the G query heads of each kv head stacked),
        k, v (B, Hkv, L, D); hidden: boolean, broadcast to the scores, True where a key is masked.
        A query with every key masked gets zeros."""
        xp = self.xp
        # Scores stay fp32, as in transformers' fused attention (rounded to bf16 they would lose
        # the small differences between 1500 keys).
        scores = self.matmul(q, k.transpose(0, 1, 3, 2), fp32_out=True) * np.float32(scale)
        if hidden is not None:
            scores = xp.where(hidden, np.float32(-np.inf), scores)
        peak = scores.max(-1, keepdims=True)
        weights = xp.exp(scores - xp.where(xp.isfinite(peak), peak, np.float32(0.0)))
        total = weights.sum(-1, keepdims=True)
        # Like transformers' eager attention: probabilities normalised in fp32, rounded to the
        # value dtype, then multiplied.
        probs = weights / xp.where(total == 0, np.float32(1.0), total)
        return self.matmul(self.rounded(probs), v)

    # ---- audio encoder ------------------------------------------------------------------------
    def conv_gelu(self, x, weight, bias, stride: int):
        """gelu(conv1d(x, w, b, stride, padding=1)), kernel 3: x (B, C_in, T_in) → (B, T_out, C_out)."""
        xp = self.xp
        B, C, T_in = x.shape
        T_out = (T_in - 1) // stride + 1
        padded = xp.pad(x, ((0, 0), (0, 0), (1, 1)))
        taps = [padded[:, :, k:k + stride * (T_out - 1) + 1:stride] for k in range(3)]
        unfolded = xp.stack(taps, axis=1).transpose(0, 3, 1, 2).reshape(B * T_out, 3 * C)  # rows: [tap, channel]
        return self.gelu(self.linear(unfolded, weight, bias)).reshape(B, T_out, -1)

    @region("encoder")
    def encode_audio(self, features: torch.Tensor) -> torch.Tensor:
        """(windows, mels, frames) log-mel → (windows, frames/2, hidden) after the final LayerNorm."""
        w, e = self.w, self.cfg.encoder
        x = self.backend.array(features.to(self.device, self.dtype).contiguous())
        with region("encoder.conv"):
            h = self.conv_gelu(x, w.conv1_weight, w.conv1_bias, 1)
            h = self.conv_gelu(h.transpose(0, 2, 1), w.conv2_weight, w.conv2_bias, 2)
        windows, frames, hidden = h.shape
        for layer in w.encoder_layers:
            with region("encoder.layer"):
                h = self._encoder_layer(layer, h)
        with region("encoder.norm"):
            h = self.layernorm(h, w.encoder_norm_weight, w.encoder_norm_bias, e.layer_norm_eps)
        return self.backend.tensor(self.xp.ascontiguousarray(h))

    def _encoder_layer(self, layer, x):
        e = self.cfg.encoder
        W, T, _ = x.shape
        H, D = e.num_heads, e.head_dim
        h = self.layernorm(x, layer.ln1_weight, layer.ln1_bias, e.layer_norm_eps)
        qkv = self.linear(h, layer.qkv_weight, layer.qkv_bias).reshape(W, T, 3 * H, D)
        qk = self.rope(qkv[:, :, :2 * H], self.enc_cos[:T], self.enc_sin[:T], e.rotary_dim)
        q, k = qk[:, :, :H].transpose(0, 2, 1, 3), qk[:, :, H:].transpose(0, 2, 1, 3)
        v = qkv[:, :, 2 * H:].transpose(0, 2, 1, 3)
        attn = self.attention(q, k, v, D ** -0.5, None).transpose(0, 2, 1, 3).reshape(W, T, H * D)
        x = self.rounded(x + self.linear(attn, layer.o_weight, layer.o_bias))
        h = self.gelu(self.linear(self.layernorm(x, layer.ln2_weight, layer.ln2_bias, e.layer_norm_eps),
                                  layer.fc1_weight, layer.fc1_bias))
        return self.rounded(x + self.linear(h, layer.fc2_weight, layer.fc2_bias))

    def project_audio(self, encoded: torch.Tensor) -> torch.Tensor:
        """Concatenate each 4 consecutive frames, then Linear·GELU·Linear."""
        windows, frames, _ = encoded.shape
        merged = self.backend.array(encoded.contiguous()).reshape(windows * frames // self.cfg.merge_factor, -1)
        w = self.w
        with region("projector"):
            h = self.gelu(self.linear(merged, w.projector_1_weight, w.projector_1_bias))
            out = self.linear(h, w.projector_2_weight, w.projector_2_bias)
        return self.backend.tensor(out).view(windows, frames // self.cfg.merge_factor, -1)

    # ---- text decoder -------------------------------------------------------------------------
    def embed(self, ids, audio_rows, audio_index):
        xp, b = self.xp, self.backend
        rows = self.rounded(self.w.embed_tokens[b.array(ids)])
        index = b.array(audio_index)
        if audio_rows.shape[0]:
            from_audio = index >= 0
            audio = b.array(audio_rows.contiguous())[xp.where(from_audio, index, 0)]
            rows = xp.where(from_audio[:, None], audio, rows)
        return b.tensor(xp.ascontiguousarray(rows))

    def _cache_arrays(self, state):
        """The state's torch buffers seen as arrays, made once per DecodeState."""
        if self._state_arrays is None or self._state_arrays[0] is not state:
            b = self.backend
            self._state_arrays = (state, [b.array(t) for t in state.k_cache], [b.array(t) for t in state.v_cache],
                                  b.array(state.kv_start), b.array(state.token_ids))
        return self._state_arrays[1:]

    def decoder_layers(self, x, state, tokens: int, decode: bool):
        """x (batch·tokens, hidden) holds cache slots cache_pos … cache_pos + tokens − 1."""
        xp, d = self.xp, self.cfg.decoder
        k_caches, v_caches, kv_start, _ = self._cache_arrays(state)
        # Plain array code indexes with host integers: one read-back per call.
        first, valid = (int(v) for v in state.counters[:2].tolist())
        B, T = state.batch, tokens
        group = d.num_heads // d.num_kv_heads
        slots = first + xp.arange(T)
        positions = xp.maximum(slots[None, :] - kv_start[:, None].astype(xp.int64), 0)  # (B, T)
        cos, sin = self.dec_cos[positions], self.dec_sin[positions]
        keys = xp.arange(valid)
        hidden = (keys[None, :] < kv_start[:, None])[:, None, None, :]  # left padding: (B, 1, 1, L)
        if not decode:
            causal = keys[None, :] > slots[:, None]  # (T, L)
            hidden = hidden | xp.tile(causal, (group, 1))[None, None]
        h_all = self.backend.array(x).reshape(B, T, -1)
        for layer, k_cache, v_cache in zip(self.w.decoder_layers, k_caches, v_caches):
            with region("decoder.layer"):
                h_all = self._decoder_layer(layer, h_all, k_cache, v_cache, cos, sin, first, valid, hidden)
        return self.backend.tensor(xp.ascontiguousarray(h_all)).view(B * T, -1)

    def _decoder_layer(self, layer, x, k_cache, v_cache, cos, sin, first, valid, hidden):
        d = self.cfg.decoder
        B, T, _ = x.shape
        Hq, Hkv, D = d.num_heads, d.num_kv_heads, d.head_dim
        qkv = self.linear(self.rmsnorm(x, layer.ln1_weight, d.rms_norm_eps), layer.qkv_weight).reshape(B, T, -1, D)
        qk = self.rope(qkv[:, :, :Hq + Hkv], cos, sin, d.rotary_dim)
        k_cache[:, :, first:first + T] = qk[:, :, Hq:].transpose(0, 2, 1, 3)
        v_cache[:, :, first:first + T] = qkv[:, :, Hq + Hkv:].transpose(0, 2, 1, 3)
        # (B, T, Hq, D) → (B, Hkv, group · T, D): each kv head's query heads, stacked.
        q = qk[:, :, :Hq].reshape(B, T, Hkv, Hq // Hkv, D).transpose(0, 2, 3, 1, 4).reshape(B, Hkv, -1, D)
        attn = self.attention(q, k_cache[:, :, :valid], v_cache[:, :, :valid], D ** -0.5, hidden)
        attn = attn.reshape(B, Hkv, Hq // Hkv, T, D).transpose(0, 3, 1, 2, 4).reshape(B, T, Hq * D)
        x = self.rounded(x + self.linear(attn, layer.o_weight))
        h = self.rmsnorm(x, layer.ln2_weight, d.rms_norm_eps)
        gate_up = self.linear(h, layer.gate_up_weight)
        gate, up = self.f32(gate_up[..., :d.intermediate_size]), gate_up[..., d.intermediate_size:]
        activated = self.rounded(self.rounded(gate / (1.0 + self.xp.exp(-gate))) * up)
        return self.rounded(x + self.linear(activated, layer.down_weight))

    def _logits(self, hidden):
        normed = self.rmsnorm(self.backend.array(hidden.contiguous()), self.w.decoder_norm_weight,
                              self.cfg.decoder.rms_norm_eps)
        return self.linear(normed, self.w.lm_head)

    def logits(self, hidden):
        return self.backend.tensor(self._logits(hidden))

    def greedy_head(self, last_hidden, state):
        logits = self.f32(self._logits(last_hidden))
        if bool(state.ban_eos.item()):
            logits[:, self.eos] = -np.inf
        token_ids = self._cache_arrays(state)[3]
        token_ids[...] = logits.argmax(-1)  # the first maximum: the lowest id on ties, as torch


def _as_arrays(weights, backend: ArrayBackend, widen_matrices: bool):
    """weight_loader's dataclasses with every tensor seen as an array (lists of layers kept); with
    widen_matrices, the 2-d ones as fp32 copies."""
    import copy
    import dataclasses

    def convert(value):
        if isinstance(value, torch.Tensor):
            array = backend.array(value)
            return array.astype(np.float32) if widen_matrices and array.ndim == 2 else array
        if isinstance(value, list):
            return [convert(v) for v in value]
        if dataclasses.is_dataclass(value):
            out = copy.copy(value)
            for field in dataclasses.fields(value):
                setattr(out, field.name, convert(getattr(value, field.name)))
            return out
        return value

    return convert(weights)


def load_model(cfg: ModelConfig, weights: dict[str, torch.Tensor], device, precision: Precision | str) -> CupyGlmAsr:
    return CupyGlmAsr(cfg, weights, device, precision)
