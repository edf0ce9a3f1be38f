"""The fast path's attention: fused kernels whose scores never leave the chip.

    flash_attention(q, k, v, scale, causal=..., precision=..., kv_start=..., kv_layout=...)
        prefill and encoder: one program per (query block, batch x head), online softmax over key
        blocks, fp32 statistics and accumulator. GQA by head index, causal mask, left-padding mask.
    decode_attention(q, k_cache, v_cache, cache_len, kv_start, scale, precision=...)
        one new token per row, flash-decoding: the cache is cut into splits processed in parallel,
        then a second kernel merges the per-split (max, sum, partial output).

Softmax runs in base 2: exp(x) == exp2(x * log2(e)), so log2(e) is folded into the score scale and
the exponentials are single exp2 instructions. Any head size works: channels are padded to a power of
two and masked.

Self-check: python -m glm_asr_triton_example.fast_attention  (without a GPU: the Triton interpreter)
"""


import torch
import triton
import triton.language as tl

from glm_asr_course.runtimes.triton_helpers import (INTERPRET, batch_and_head, dot, fma_dot, pdl_options,
                                                    release_consumer, round_to, wait_for_producer)

LOG2E = 1.4426950408889634


# ==================================================================================================
# Flash attention (prefill, encoder)
# ==================================================================================================


@triton.jit
def _flash_block(acc, m_i, l_i, q, k_rows, v_rows, start_n, offs_m, offs_n, offs_d, kv_lo, Tk,
                 qk_scale, stride_kt, stride_vt, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """Fold keys [start_n, start_n + BLOCK_N) into the running (acc, max m_i, sum l_i) of each row.

    MASKED blocks straddle the causal diagonal, the left-padding edge or the end of the keys; all
    other blocks skip the key mask. Channels past HEAD_DIM (a head size that is not a power of two,
    padded to BLOCK_D) always read as zeros: they add nothing to q.k and are never stored.
    """
    n = start_n + offs_n
    k_ptrs = k_rows + n[:, None] * stride_kt + offs_d[None, :]
    v_ptrs = v_rows + n[:, None] * stride_vt + offs_d[None, :]
    d_ok = offs_d[None, :] < HEAD_DIM
    if MASKED:
        # Keys outside [kv_lo, Tk) read as zeros, so stray memory (even NaN) never reaches P @ V.
        key_ok = (n >= kv_lo) & (n < Tk)
        k = tl.load(k_ptrs, mask=key_ok[:, None] & d_ok, other=0.0)
        v = tl.load(v_ptrs, mask=key_ok[:, None] & d_ok, other=0.0)
    elif BLOCK_D == HEAD_DIM:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    else:
        k = tl.load(k_ptrs, mask=d_ok, other=0.0)
        v = tl.load(v_ptrs, mask=d_ok, other=0.0)
    s = dot(q, tl.trans(k), None, INPUT_PRECISION) * qk_scale  # acc None: a fresh fp32 accumulator
    if MASKED:
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (n[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_ref = m_new
    if MASKED:
        # A row with every key masked so far has max -inf; subtract 0 instead, so that
        # exp2(-inf - (-inf)) = NaN never appears (its p and alpha are then exactly 0).
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    # Rescale what was accumulated under the old max, then add this block.
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    # Like transformers' eager path in bf16: probabilities rounded to the value dtype before P @ V.
    acc = dot(round_to(p, v.dtype), v, acc * alpha[:, None], INPUT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, kv_start_ptr,
                           Tq, Tk, n_q_heads, group, qk_scale,
                           stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                           stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
                           CAUSAL: tl.constexpr, HAS_KV_START: tl.constexpr, HEAD_DIM: tl.constexpr,
                           BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           INPUT_PRECISION: tl.constexpr, PDL: tl.constexpr):
    release_consumer(PDL)
    wait_for_producer(PDL)
    pid_m = tl.program_id(0)
    b, h = batch_and_head(tl.program_id(1), n_q_heads)
    # GQA: `group` consecutive query heads read the same kv head.
    hk = h // group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = (offs_m[:, None] < Tq) & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :],
                mask=row_ok, other=0.0)
    k_rows = k_ptr + b * stride_kb + hk * stride_kh
    v_rows = v_ptr + b * stride_vb + hk * stride_vh

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    # Keys this query block can see: [kv_lo, kv_hi). Left padding hides keys < kv_start[b]; causal
    # attention hides keys past the block's last query.
    kv_lo = 0
    if HAS_KV_START:
        kv_lo = tl.load(kv_start_ptr + b)
    kv_hi = Tk
    if CAUSAL:
        kv_hi = tl.minimum(Tk, (pid_m + 1) * BLOCK_M)
    # Blocks in [full_lo, full_hi) need no mask: entirely past kv_lo, inside Tk and (causal) at or
    # below the diagonal for every query of the block. BLOCK_M is a multiple of BLOCK_N, so the
    # diagonal starts on a block boundary.
    full_lo = tl.cdiv(kv_lo, BLOCK_N) * BLOCK_N
    full_hi = (Tk // BLOCK_N) * BLOCK_N
    if CAUSAL:
        full_hi = tl.minimum(full_hi, pid_m * BLOCK_M)
    full_hi = tl.maximum(full_hi, full_lo)
    # The block holding the left-padding edge (if kv_lo is not block-aligned) ...
    for start_n in range((kv_lo // BLOCK_N) * BLOCK_N, tl.minimum(full_lo, kv_hi), BLOCK_N):
        acc, m_i, l_i = _flash_block(acc, m_i, l_i, q, k_rows, v_rows, start_n, offs_m, offs_n, offs_d,
                                     kv_lo, Tk, qk_scale, stride_kt, stride_vt, MASKED=True, CAUSAL=CAUSAL,
                                     HEAD_DIM=HEAD_DIM, BLOCK_D=BLOCK_D, INPUT_PRECISION=INPUT_PRECISION)
    # ... the bulk of the keys, unmasked ...
    for start_n in range(full_lo, full_hi, BLOCK_N):
        acc, m_i, l_i = _flash_block(acc, m_i, l_i, q, k_rows, v_rows, start_n, offs_m, offs_n, offs_d,
                                     kv_lo, Tk, qk_scale, stride_kt, stride_vt, MASKED=False, CAUSAL=CAUSAL,
                                     HEAD_DIM=HEAD_DIM, BLOCK_D=BLOCK_D, INPUT_PRECISION=INPUT_PRECISION)
    # ... and the diagonal blocks plus the ragged end of the keys.
    for start_n in range(full_hi, kv_hi, BLOCK_N):
        acc, m_i, l_i = _flash_block(acc, m_i, l_i, q, k_rows, v_rows, start_n, offs_m, offs_n, offs_d,
                                     kv_lo, Tk, qk_scale, stride_kt, stride_vt, MASKED=True, CAUSAL=CAUSAL,
                                     HEAD_DIM=HEAD_DIM, BLOCK_D=BLOCK_D, INPUT_PRECISION=INPUT_PRECISION)

    # A query row with no visible key (a left-padding query) has l = 0: write zeros, not 0/0.
    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_i[:, None]
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :]
    tl.store(o_ptrs, round_to(o, o_ptr.dtype.element_ty), mask=row_ok)


def _flash_config(head_dim: int, dtype: torch.dtype, precision: str) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages), the fastest of a sweep on an H200 (Triton 3.6);
    head_dim is the padded one (a power of two)."""
    if fma_dot(dtype, precision):
        # IEEE fp32 dots run on the CUDA cores, each thread holding its operand slices in registers:
        # small tiles. At head_dim 128 (the decoder's prefill) 32 x 32 spills 2.4 KB a thread and
        # 16 x 16 nothing (ptxas on sm_90a); at 64 (the encoder) 32 x 32 spills nothing.
        return (32, 32, 4, 2) if head_dim <= 64 else (16, 16, 4, 2)
    if dtype == torch.float32:
        # tf32 on the tensor cores; fp32 tiles take twice the shared memory of bf16 ones.
        return (64, 64, 4, 3) if head_dim <= 64 else (64, 32, 4, 2)
    if head_dim <= 64:
        # Encoder, 1500 x 1500, 20 heads: on par with torch's SDPA flash backend (docs/performance.md).
        return 128, 64, 8, 3
    # Decoder prefill, head_dim 128: 64-row query blocks give short prompts enough programs.
    return 64, 64, 4, 3


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, *, causal: bool,
                    precision: str, kv_start: torch.Tensor | None = None, out: torch.Tensor | None = None,
                    kv_layout: str = "bthd", tiles: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v, fused. Returns out (B, Tq, Hq, D), contiguous.

    q: (B, Tq, Hq, D), any strides with a contiguous last dim (e.g. a view into a fused QKV output).
    kv_layout selects how k and v are given (last dim contiguous in both cases):
      "bthd": (B, Tk, Hkv, D) token-major, e.g. views into the encoder's fused QKV output.
      "bhtd": KV caches (B, Hkv, Tmax, D); the keys are cache slots 0 .. Tq-1, i.e. the prompt that
              rope_qkv_into_cache has just written (decoder prefill), so Tk = Tq.
    GQA: query head h reads kv head h // (Hq // Hkv).
    causal: query t sees keys <= t (queries and keys share indices 0 .. T-1; needs Tq == Tk).
    kv_start: optional int32 (B,), keys j < kv_start[b] are masked (left padding). Query rows that
              see no key at all come out as zeros.
    precision: "tf32" or "ieee" for fp32 operands. Any head size D (padded to a power of two, masked).
    tiles: (BLOCK_M, BLOCK_N, num_warps, num_stages) in place of _flash_config's (for
    glm_asr_lab/tuning/sweep_attention.py); BLOCK_M must be a multiple of BLOCK_N when causal.
    """
    B, Tq, Hq, D = q.shape
    if kv_layout == "bthd":
        Tk, Hkv = k.shape[1], k.shape[2]
        k_strides = (k.stride(0), k.stride(1), k.stride(2))
        v_strides = (v.stride(0), v.stride(1), v.stride(2))
    elif kv_layout == "bhtd":
        Tk, Hkv = Tq, k.shape[1]
        assert k.shape[2] >= Tq, "the cache is shorter than the prompt"
        k_strides = (k.stride(0), k.stride(2), k.stride(1))
        v_strides = (v.stride(0), v.stride(2), v.stride(1))
    else:
        raise ValueError(f"kv_layout must be 'bthd' or 'bhtd', not {kv_layout!r}")
    assert k.shape == v.shape and k.shape[0] == B and k.shape[3] == D and Hq % Hkv == 0
    assert q.stride(3) == k.stride(3) == v.stride(3) == 1, "last dims must be contiguous"
    assert not causal or Tq == Tk
    if kv_start is not None:
        assert kv_start.dtype == torch.int32 and kv_start.shape == (B,)
    if out is None:
        out = torch.empty((B, Tq, Hq, D), dtype=q.dtype, device=q.device)
    assert out.shape == (B, Tq, Hq, D) and out.is_contiguous()
    block_d = max(16, triton.next_power_of_2(D))
    block_m, block_n, num_warps, num_stages = tiles or _flash_config(block_d, q.dtype, precision)
    if INTERPRET:
        # The interpreter pays per program and per block step, not per element: take big tiles.
        block_m, block_n = min(512, triton.next_power_of_2(Tq)), min(512, triton.next_power_of_2(Tk))
    grid = (triton.cdiv(Tq, block_m), B * Hq)
    flash_attention_kernel[grid](
        q, k, v, out, kv_start if kv_start is not None else out,
        Tq, Tk, Hq, Hq // Hkv, scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2), *k_strides, *v_strides,
        out.stride(0), out.stride(1), out.stride(2),
        CAUSAL=causal, HAS_KV_START=kv_start is not None, HEAD_DIM=D, BLOCK_D=block_d,
        BLOCK_M=block_m, BLOCK_N=block_n, INPUT_PRECISION=precision, num_warps=num_warps, num_stages=num_stages,
        **pdl_options(q.device),
    )
    return out


# ==================================================================================================
# Split-K decode attention (flash-decoding)
# ==================================================================================================


@triton.jit
def _split_keys(split, b, kv_start_ptr, cache_len_ptr, HAS_KV_START: tl.constexpr, SPLIT: tl.constexpr):
    """Cache slots [lo, hi) that split(s) ``split`` of row b attend to (empty when lo >= hi): left
    padding below kv_start[b] and slots past the live cache length are outside."""
    kv_lo = 0
    if HAS_KV_START:
        kv_lo = tl.load(kv_start_ptr + b)
    return tl.maximum(split * SPLIT, kv_lo), tl.minimum((split + 1) * SPLIT, tl.load(cache_len_ptr))


@triton.jit
def decode_attention_split_kernel(q_ptr, k_ptr, v_ptr, cache_len_ptr, kv_start_ptr,
                                  m_ptr, l_ptr, acc_ptr, o_ptr, n_kv_heads, group, qk_scale,
                                  stride_qb, stride_qh, stride_kb, stride_kh, stride_kt,
                                  stride_vb, stride_vh, stride_vt,
                                  stride_mb, stride_mh, stride_ab, stride_ah, stride_as, stride_ob, stride_oh,
                                  HAS_KV_START: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                                  SPLIT: tl.constexpr, DIRECT: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                                  PDL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr):
    """One split of the cache for the `group` query heads of one kv head. DIRECT (a single split):
    the normalised output goes straight to o_ptr and no combine kernel runs.

    cache_len and kv_start are read before the PDL wait: no kernel of a decode step writes them (the
    host sets them before the step), so their round trip overlaps the previous kernel's tail."""
    release_consumer(PDL)
    split = tl.program_id(0)
    b, hk = batch_and_head(tl.program_id(1), n_kv_heads)
    # The grid covers the whole cache (fixed when a CUDA graph is captured); the live length is read
    # on the device. Keys this split owns: [lo, hi).
    lo, hi = _split_keys(split, b, kv_start_ptr, cache_len_ptr, HAS_KV_START, SPLIT)
    wait_for_producer(PDL)
    # A split wholly past the live cache (or inside the left padding) runs no block and leaves
    # (max, sum, acc) = (-inf, 0, 0); the combine kernel applies the same test and skips it.
    first = (lo // BLOCK_N) * BLOCK_N
    end = tl.where(lo < hi, hi, first)
    # All `group` query heads sharing kv head hk are rows of one tile, so each K/V tile is read
    # from memory once for the whole group (decode is bound by reading the cache). BLOCK_G pads
    # the group to the 16 rows a tensor-core dot needs.
    g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < HEAD_DIM
    heads = hk * group + g
    rows = g < group
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=rows[:, None] & d_ok,
                other=0.0)
    k_rows = k_ptr + b * stride_kb + hk * stride_kh
    v_rows = v_ptr + b * stride_vb + hk * stride_vh
    m_i = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, BLOCK_D), dtype=tl.float32)
    # Every block below holds at least one visible key (its first block contains lo), so the
    # row max is finite from the first block on.
    for start_n in range(first, end, BLOCK_N):
        n = start_n + tl.arange(0, BLOCK_N)
        key_ok = (n >= lo) & (n < hi)
        # Masked keys read as zeros: cache slots past cache_len may hold anything.
        k = tl.load(k_rows + n[:, None] * stride_kt + offs_d[None, :], mask=key_ok[:, None] & d_ok, other=0.0)
        v = tl.load(v_rows + n[:, None] * stride_vt + offs_d[None, :], mask=key_ok[:, None] & d_ok, other=0.0)
        s = dot(q, tl.trans(k), None, INPUT_PRECISION) * qk_scale
        s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = dot(round_to(p, v.dtype), v, acc * alpha[:, None], INPUT_PRECISION)
        m_i = m_new
    if DIRECT:
        # No visible key at all: output 0 instead of NaN, as the combine kernel does.
        o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
                 round_to(o, o_ptr.dtype.element_ty), mask=rows[:, None] & d_ok)
    else:
        # Partials stay unnormalised in fp32: (max, sum, sum of p*v) per query head and split.
        tl.store(m_ptr + b * stride_mb + heads * stride_mh + split, m_i, mask=rows)
        tl.store(l_ptr + b * stride_mb + heads * stride_mh + split, l_i, mask=rows)
        a_ptrs = acc_ptr + b * stride_ab + heads[:, None] * stride_ah + split * stride_as + offs_d[None, :]
        tl.store(a_ptrs, acc, mask=rows[:, None] & d_ok)


@triton.jit
def decode_attention_combine_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, cache_len_ptr, kv_start_ptr,
                                    n_q_heads, num_splits,
                                    stride_mb, stride_mh, stride_ab, stride_ah, stride_as,
                                    stride_ob, stride_oh,
                                    HAS_KV_START: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                                    SPLIT: tl.constexpr, PDL: tl.constexpr, BLOCK_S: tl.constexpr):
    release_consumer(PDL)
    b, h = batch_and_head(tl.program_id(0), n_q_heads)
    s = tl.arange(0, BLOCK_S)
    # Exactly the splits the split kernel wrote (the same [lo, hi) test), from counters read before
    # the wait as there.
    lo, hi = _split_keys(s, b, kv_start_ptr, cache_len_ptr, HAS_KV_START, SPLIT)
    written = (s < num_splits) & (lo < hi)
    wait_for_producer(PDL)
    m = tl.load(m_ptr + b * stride_mb + h * stride_mh + s, mask=written, other=float("-inf"))
    l = tl.load(l_ptr + b * stride_mb + h * stride_mh + s, mask=written, other=0.0)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    acc = tl.load(acc_ptr + b * stride_ab + h * stride_ah + s[:, None] * stride_as + offs_d[None, :],
                  mask=written[:, None] & d_ok[None, :], other=0.0)
    # Bring every split to the common max: softmax over the union of the splits.
    m_max = tl.max(m, axis=0)
    # No split written (no visible key): weights 0 and output 0 instead of NaN.
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp2(m - m_max)
    l_sum = tl.sum(w * l, axis=0)
    l_sum = tl.where(l_sum == 0.0, 1.0, l_sum)
    o = tl.sum(w[:, None] * acc, axis=0) / l_sum
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_d, round_to(o, o_ptr.dtype.element_ty), mask=d_ok)


def _decode_config(Tmax: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(split size, BLOCK_N, num_warps) of decode_attention for a cache of Tmax slots. On a GPU, from
    glm_asr_lab/tuning/sweep_attention.py (H100, docs/performance.md 2026-11-27 (c), call 2): 16-bit caches
    in 128-key steps, one split up to 256 slots, else 128-slot splits (3,840 slots: 8.0 us, 11.0 in 256 / 64).
    fp32 keeps 64-key steps: a 128 x 128 fp32 tile takes 128 registers a thread for k alone."""
    if INTERPRET:  # the interpreter pays per program and per step: one of each
        return triton.next_power_of_2(Tmax), triton.next_power_of_2(Tmax), 4
    if dtype == torch.float32:
        return 256, 64, 4
    return (256 if Tmax <= 256 else 128), 128, 4


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_len: torch.Tensor,
                     kv_start: torch.Tensor | None, scale: float, out: torch.Tensor | None = None, *,
                     precision: str, split_size: int | None = None,
                     tiles: tuple[int, int] | None = None) -> torch.Tensor:
    """Attention of one new token per row over the KV cache. Returns out (B, 1, Hq, D).

    q: (B, 1, Hq, D), last dim contiguous. k_cache / v_cache: (B, Hkv, Tmax, D).
    cache_len: int32 device tensor (1,), valid cache slots (the token just written included).
    kv_start: int32 (B,) left-padding count (slots < kv_start[b] are masked), or None.
    The launch depends only on shapes (Tmax, not cache_len), so it can be captured in a CUDA graph.
    split_size: cache slots per program of the first kernel (a multiple of 16); default _decode_config's
    (under the interpreter the whole cache). A cache of at most split_size slots (a short
    transcription's) is one split: one launch, no combine.
    precision: "tf32" or "ieee" for fp32 operands. Any head size D (padded to a power of two, masked).
    tiles: (BLOCK_N, num_warps) of the first kernel in place of the default (for
    glm_asr_lab/tuning/sweep_attention.py).
    """
    B, one, Hq, D = q.shape
    _, Hkv, Tmax, _ = k_cache.shape
    assert one == 1 and k_cache.shape == v_cache.shape == (B, Hkv, Tmax, D) and Hq % Hkv == 0
    assert q.stride(3) == k_cache.stride(3) == v_cache.stride(3) == 1
    default_split, default_n, num_warps = _decode_config(Tmax, q.dtype)
    split_size = split_size or default_split
    # BLOCK_N: a power of two (tl.arange), at most the split; keys past a split's end are masked.
    block_n, num_warps = tiles or (min(default_n, 1 << (split_size.bit_length() - 1)), num_warps)
    assert split_size % 16 == 0
    assert cache_len.dtype == torch.int32 and (kv_start is None or kv_start.dtype == torch.int32)
    group = Hq // Hkv
    if out is None:
        out = torch.empty((B, 1, Hq, D), dtype=q.dtype, device=q.device)
    assert out.shape == (B, 1, Hq, D) and out.stride(3) == 1
    num_splits = triton.cdiv(Tmax, split_size)
    direct = num_splits == 1
    part_m = torch.empty((B, Hq, 0 if direct else num_splits), dtype=torch.float32, device=q.device)
    part_l = torch.empty_like(part_m)
    part_acc = torch.empty((B, Hq, 0 if direct else num_splits, D), dtype=torch.float32, device=q.device)
    kv_start_arg = kv_start if kv_start is not None else cache_len
    pdl = pdl_options(q.device)
    decode_attention_split_kernel[(num_splits, B * Hkv)](
        q, k_cache, v_cache, cache_len, kv_start_arg, part_m, part_l, part_acc, out,
        Hkv, group, scale * LOG2E,
        q.stride(0), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        part_m.stride(0), part_m.stride(1), part_acc.stride(0), part_acc.stride(1), part_acc.stride(2),
        out.stride(0), out.stride(2),
        HAS_KV_START=kv_start is not None, HEAD_DIM=D, BLOCK_D=max(16, triton.next_power_of_2(D)),
        SPLIT=split_size, DIRECT=direct, INPUT_PRECISION=precision,
        BLOCK_N=block_n, BLOCK_G=max(16, triton.next_power_of_2(group)), num_warps=num_warps, num_stages=2, **pdl,
    )
    if not direct:
        decode_attention_combine_kernel[(B * Hq,)](
            part_m, part_l, part_acc, out, cache_len, kv_start_arg, Hq, num_splits,
            part_m.stride(0), part_m.stride(1), part_acc.stride(0), part_acc.stride(1), part_acc.stride(2),
            out.stride(0), out.stride(2),
            HAS_KV_START=kv_start is not None, HEAD_DIM=D, BLOCK_D=max(16, triton.next_power_of_2(D)), SPLIT=split_size,
            BLOCK_S=triton.next_power_of_2(num_splits), num_warps=4, **pdl,
        )
    return out


# ==================================================================================================
# Self-check: python -m glm_asr_triton_example.fast_attention  (without a GPU: the Triton interpreter)
# ==================================================================================================


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck
    from glm_asr_course.reference.torch_ops import attention as torch_attention

    check = SelfCheck("fast_attention.py", INTERPRET)
    on_gpu, dev = check.on_gpu, check.device
    torch.manual_seed(0)
    dt = torch.bfloat16
    T_enc, T_dec, T_max = (1500, 400, 1024) if on_gpu else (75, 40, 48)
    scale = 64 ** -0.5

    # Encoder: q, k, v are views into one fused (B, T, 3*H*D) projection output.
    qkv = torch.randn(1, T_enc, 3, 20, 64, device=dev, dtype=dt)
    q, k, v = qkv.unbind(2)
    out = torch.empty(1, T_enc, 20, 64, device=dev, dtype=dt)
    check.check("flash_attention[encoder]",
                lambda: flash_attention(q, k, v, scale, causal=False, precision="tf32", out=out),
                lambda: torch_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale).transpose(1, 2),
                f"{tuple(q.shape)} bf16", 2e-2)

    # Decoder prefill from the caches, GQA 16/4, head_dim 128, one left-padded row.
    B, Hq, Hkv, D = 2, 16, 4, 128
    scale = D ** -0.5
    kv_start = torch.tensor([0, 7], dtype=torch.int32, device=dev)
    q = torch.randn(B, T_dec, Hq, D, device=dev, dtype=dt)
    k_cache = torch.randn(B, Hkv, T_max, D, device=dev, dtype=dt)
    v_cache = torch.randn(B, Hkv, T_max, D, device=dev, dtype=dt)
    out = torch.empty(B, T_dec, Hq, D, device=dev, dtype=dt)
    check.check("flash_attention[prefill]",
                lambda: flash_attention(q, k_cache, v_cache, scale, causal=True, precision="tf32", kv_start=kv_start,
                                        out=out, kv_layout="bhtd"),
                lambda: torch_attention(q.transpose(1, 2), k_cache[:, :, :T_dec], v_cache[:, :, :T_dec], scale,
                                        causal=True, kv_start=kv_start).transpose(1, 2),
                f"{tuple(q.shape)} bf16", 2e-2)

    # Decode: one token against a cache holding T_dec + 1 valid slots. Decode runs inside a CUDA
    # graph, so it is timed as one (its two short kernels would otherwise time Python launches).
    q1 = torch.randn(B, 1, Hq, D, device=dev, dtype=dt)
    cache_len = torch.tensor([T_dec + 1], dtype=torch.int32, device=dev)
    out = torch.empty(B, 1, Hq, D, device=dev, dtype=dt)
    split = 64 if on_gpu else 16
    check.check("decode_attention",
                lambda: decode_attention(q1, k_cache, v_cache, cache_len, kv_start, scale, out, precision="tf32",
                                         split_size=split),
                lambda: torch_attention(q1.transpose(1, 2), k_cache[:, :, : T_dec + 1], v_cache[:, :, : T_dec + 1],
                                        scale, kv_start=kv_start).transpose(1, 2),
                f"({B}, {Hq}, {T_max}, {D}) bf16", 2e-2, graph=True)
    check.finish()


if __name__ == "__main__":
    _self_check()
