"""Attention for GLM-ASR, in Triton.

Two families of kernels live here.

Course kernels (the textbook path, three launches, the scores materialised in fp32):
    attention_scores_kernel   S = Q K^T * scale          (causal: -inf above the diagonal)
    softmax_inplace_kernel    P = softmax(S) row by row, in place
    attention_output_kernel   O = P V
    attention_scores / softmax_inplace / attention_output: one launcher per kernel
    attention_reference_path(q, k, v, scale, causal)   the three in a row; q, k, v: (B, H, T, D)

Production kernels (fused: scores never leave the chip):
    flash_attention(q, k, v, scale, causal=..., kv_start=..., kv_layout=...)
        prefill / encoder: one program per (query block, batch x head), online softmax over key
        blocks, fp32 statistics and accumulator. GQA by head index, causal mask, left-padding mask.
    decode_attention(q, k_cache, v_cache, cache_len, kv_start, scale)
        one new token per row, flash-decoding: the cache is cut into splits processed in parallel,
        then a second kernel merges the per-split (max, sum, partial output).

Softmax runs in base 2: exp(x) == exp2(x * log2(e)), so log2(e) is folded into the score scale and
the exponentials are single exp2 instructions.
"""


import torch

if __name__ == "__main__":  # run as a script: python glm_asr_triton_example/attention.py
    from _script import package_of

    __package__ = package_of(__file__)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._triton_compat import FP32_PRECISION, INTERPRET, dot, pdl_options, release_consumer, round_to, wait_for_producer  # noqa: E402

LOG2E = 1.4426950408889634


# ==================================================================================================
# Course kernels: scores -> softmax -> output, inputs (B, H, T, D)
# ==================================================================================================


# >>> STUDENT KERNEL attention_scores_kernel
@triton.jit
def attention_scores_kernel(q_ptr, k_ptr, s_ptr, n_heads, Tq, Tk, scale,
                            stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                            stride_sb, stride_sh, stride_sq,
                            CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """S = Q K^T * scale for one (batch, head) and BLOCK_M query rows, fp32 scores.

    q: (B, H, Tq, HEAD_DIM), k: (B, H, Tk, HEAD_DIM), given by their b / h / t strides (last dim
    contiguous); s: (B, H, Tq, Tk) fp32, strides stride_sb / stride_sh / stride_sq.
    Grid: (cdiv(Tq, BLOCK_M), B * H); program (i, bh) with b = bh // n_heads, h = bh % n_heads keeps
    its BLOCK_M query rows in registers and sweeps the keys in BLOCK_N blocks, storing each
    (BLOCK_M, BLOCK_N) tile of S.
    CAUSAL: query m sees keys n <= m; store -inf above the diagonal (softmax turns it into 0).
    Masking: query rows >= Tq and key rows >= Tk load 0.0 and are not stored.
    Hint: tl.dot(q, tl.trans(k)) accumulating in fp32 (this file's dot() helper also handles bf16 under
    the interpreter); multiply by scale after the dot.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # This program's query rows stay in registers while it sweeps every key block.
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :],
                mask=offs_m[:, None] < Tq, other=0.0)
    s_rows = s_ptr + b * stride_sb + h * stride_sh + offs_m[:, None] * stride_sq
    for start_n in range(0, Tk, BLOCK_N):
        n = start_n + offs_n
        k = tl.load(k_ptr + b * stride_kb + h * stride_kh + n[:, None] * stride_kt + offs_d[None, :],
                    mask=n[:, None] < Tk, other=0.0)
        s = dot(q, tl.trans(k), None) * scale  # acc None: a fresh fp32 accumulator
        if CAUSAL:
            # exp(-inf) = 0: a query never sees a later key.
            s = tl.where(n[None, :] <= offs_m[:, None], s, float("-inf"))
        tl.store(s_rows + n[None, :], s, mask=(offs_m[:, None] < Tq) & (n[None, :] < Tk))
# <<< STUDENT KERNEL


# >>> STUDENT KERNEL softmax_inplace_kernel
@triton.jit
def softmax_inplace_kernel(s_ptr, n_cols, stride_row, BLOCK_N: tl.constexpr):
    """Softmax of the fp32 scores, in place, one row of n_cols keys per program.

    s_ptr: rows of n_cols fp32 values, stride_row elements apart (the (B, H, Tq, Tk) scores seen as
    (B * H * Tq) rows of Tk).
    Grid: (B * H * Tq,); program r reads row r whole (BLOCK_N = next_power_of_2(n_cols) >= n_cols),
    normalises it and writes it back over itself.
    Masking: lanes >= n_cols load -inf and are not stored; causal -inf entries inside the row come
    out as exactly 0.
    Hint: as softmax_kernel: subtract the row max, exponentiate, divide by the sum. A causal row always
    keeps its diagonal key, so its max is finite.
    """
    # One program per row; the whole row fits in one block (BLOCK_N >= n_cols).
    row = s_ptr + tl.program_id(0) * stride_row
    cols = tl.arange(0, BLOCK_N)
    # Lanes past the ragged end read -inf and so contribute exp(-inf) = 0 to the sum.
    x = tl.load(row + cols, mask=cols < n_cols, other=float("-inf"))
    # Subtracting the row max keeps exp() <= 1: no overflow, whatever the scores.
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(row + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)
# <<< STUDENT KERNEL


# >>> STUDENT KERNEL attention_output_kernel
@triton.jit
def attention_output_kernel(p_ptr, v_ptr, o_ptr, n_heads, Tq, Tk,
                            stride_pb, stride_ph, stride_pq, stride_vb, stride_vh, stride_vt,
                            stride_ob, stride_oh, stride_ot,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """O = P V for one (batch, head) and BLOCK_M query rows.

    p: (B, H, Tq, Tk) fp32 probabilities; v: (B, H, Tk, HEAD_DIM) in the activation dtype;
    o: (B, H, Tq, HEAD_DIM) in o's dtype. All given by their b / h / t strides, last dims contiguous.
    Grid: (cdiv(Tq, BLOCK_M), B * H), as attention_scores_kernel: walk the keys in BLOCK_N blocks,
    acc (BLOCK_M, HEAD_DIM, fp32) += p_tile (BLOCK_M, BLOCK_N) @ v_tile (BLOCK_N, HEAD_DIM).
    Masking: p loads 0.0 outside (Tq, Tk), v rows >= Tk load 0.0; only rows < Tq are stored.
    Hint: transformers casts the probabilities to v's dtype before the product: round_to(p, v.dtype)
    does the same in bf16 (a no-op in fp32). Round the result once, at the store.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    p_rows = p_ptr + b * stride_pb + h * stride_ph + offs_m[:, None] * stride_pq
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start_n in range(0, Tk, BLOCK_N):
        n = start_n + offs_n
        p = tl.load(p_rows + n[None, :], mask=(offs_m[:, None] < Tq) & (n[None, :] < Tk), other=0.0)
        v = tl.load(v_ptr + b * stride_vb + h * stride_vh + n[:, None] * stride_vt + offs_d[None, :],
                    mask=n[:, None] < Tk, other=0.0)
        # Like transformers: probabilities cast to the activation dtype, products summed in fp32.
        acc = dot(round_to(p, v.dtype), v, acc)
    o = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :]
    tl.store(o, round_to(acc, o_ptr.dtype.element_ty), mask=offs_m[:, None] < Tq)
# <<< STUDENT KERNEL


# The course launchers' tiles: 64 query rows x 64 keys (the scores and output kernels).
_COURSE_BLOCK_M, _COURSE_BLOCK_N = 64, 64


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool = False) -> torch.Tensor:
    """S = q k^T * scale as a new fp32 (B, H, Tq, Tk) tensor; causal: -inf where key > query.

    q (B, H, Tq, D), k (B, H, Tk, D), last dims contiguous; D a power of two >= 16.
    """
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    assert k.shape == (B, H, Tk, D) and not (causal and Tq != Tk)
    assert q.stride(3) == k.stride(3) == 1 and D >= 16 and D == triton.next_power_of_2(D)
    scores = torch.empty((B, H, Tq, Tk), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(Tq, _COURSE_BLOCK_M), B * H)
    attention_scores_kernel[grid](
        q, k, scores, H, Tq, Tk, scale,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        scores.stride(0), scores.stride(1), scores.stride(2),
        CAUSAL=causal, HEAD_DIM=D, BLOCK_M=_COURSE_BLOCK_M, BLOCK_N=_COURSE_BLOCK_N,
    )
    return scores


def softmax_inplace(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a contiguous fp32 tensor, in place (one program per row)."""
    assert scores.dtype == torch.float32 and scores.is_contiguous()
    n_cols = scores.shape[-1]
    softmax_inplace_kernel[(scores.numel() // n_cols,)](scores, n_cols, n_cols,
                                                        BLOCK_N=triton.next_power_of_2(n_cols))
    return scores


def attention_output(p: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """O = p v: p (B, H, Tq, Tk) fp32 probabilities, v (B, H, Tk, D) -> (B, H, Tq, D) in v.dtype."""
    B, H, Tq, Tk = p.shape
    D = v.shape[3]
    assert v.shape == (B, H, Tk, D) and p.stride(3) == v.stride(3) == 1
    assert D >= 16 and D == triton.next_power_of_2(D)
    out = torch.empty((B, H, Tq, D), dtype=v.dtype, device=v.device)
    grid = (triton.cdiv(Tq, _COURSE_BLOCK_M), B * H)
    attention_output_kernel[grid](
        p, v, out, H, Tq, Tk,
        p.stride(0), p.stride(1), p.stride(2), v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        HEAD_DIM=D, BLOCK_M=_COURSE_BLOCK_M, BLOCK_N=_COURSE_BLOCK_N,
    )
    return out


def attention_reference_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                             causal: bool = False) -> torch.Tensor:
    """softmax(q k^T * scale) v in three launches. q (B, H, Tq, D), k / v (B, H, Tk, D) -> (B, H, Tq, D).

    causal: query i sees keys j <= i (needs Tq == Tk). Materialises a (B, H, Tq, Tk) fp32 buffer.
    """
    assert k.shape == v.shape and v.dtype == q.dtype
    return attention_output(softmax_inplace(attention_scores(q, k, scale, causal)), v)


# ==================================================================================================
# Production: fused flash attention (prefill, encoder)
# ==================================================================================================


@triton.jit
def _flash_block(acc, m_i, l_i, q, k_rows, v_rows, start_n, offs_m, offs_n, offs_d, kv_lo, Tk,
                 qk_scale, stride_kt, stride_vt, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold keys [start_n, start_n + BLOCK_N) into the running (acc, max m_i, sum l_i) of each row.

    MASKED blocks straddle the causal diagonal, the left-padding edge or the end of the keys; all
    other blocks skip the mask arithmetic entirely.
    """
    n = start_n + offs_n
    k_ptrs = k_rows + n[:, None] * stride_kt + offs_d[None, :]
    v_ptrs = v_rows + n[:, None] * stride_vt + offs_d[None, :]
    if MASKED:
        # Keys outside [kv_lo, Tk) read as zeros, so stray memory (even NaN) never reaches P @ V.
        key_ok = (n >= kv_lo) & (n < Tk)
        k = tl.load(k_ptrs, mask=key_ok[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    s = dot(q, tl.trans(k), None) * qk_scale  # acc None: a fresh fp32 accumulator
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
    acc = dot(round_to(p, v.dtype), v, acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, kv_start_ptr,
                           Tq, Tk, n_q_heads, group, qk_scale,
                           stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                           stride_vb, stride_vt, stride_vh, stride_ob, stride_ot, stride_oh,
                           CAUSAL: tl.constexpr, HAS_KV_START: tl.constexpr, HEAD_DIM: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr):
    release_consumer(PDL)
    wait_for_producer(PDL)
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_q_heads
    h = pid_bh % n_q_heads
    # GQA: `group` consecutive query heads read the same kv head.
    hk = h // group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :],
                mask=offs_m[:, None] < Tq, other=0.0)
    k_rows = k_ptr + b * stride_kb + hk * stride_kh
    v_rows = v_ptr + b * stride_vb + hk * stride_vh

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)

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
                                     kv_lo, Tk, qk_scale, stride_kt, stride_vt, MASKED=True, CAUSAL=CAUSAL)
    # ... the bulk of the keys, unmasked ...
    for start_n in range(full_lo, full_hi, BLOCK_N):
        acc, m_i, l_i = _flash_block(acc, m_i, l_i, q, k_rows, v_rows, start_n, offs_m, offs_n, offs_d,
                                     kv_lo, Tk, qk_scale, stride_kt, stride_vt, MASKED=False, CAUSAL=CAUSAL)
    # ... and the diagonal blocks plus the ragged end of the keys.
    for start_n in range(full_hi, kv_hi, BLOCK_N):
        acc, m_i, l_i = _flash_block(acc, m_i, l_i, q, k_rows, v_rows, start_n, offs_m, offs_n, offs_d,
                                     kv_lo, Tk, qk_scale, stride_kt, stride_vt, MASKED=True, CAUSAL=CAUSAL)

    # A query row with no visible key (a left-padding query) has l = 0: write zeros, not 0/0.
    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_i[:, None]
    o_ptrs = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :]
    tl.store(o_ptrs, round_to(o, o_ptr.dtype.element_ty), mask=offs_m[:, None] < Tq)


def _flash_config(head_dim: int, dtype: torch.dtype) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages), the fastest of a sweep on an H200 (Triton 3.6)."""
    if dtype == torch.float32 and FP32_PRECISION == "ieee":
        # IEEE fp32 dots run on the CUDA cores, not the tensor cores: small tiles, low register use.
        return 32, 32, 4, 2
    if dtype == torch.float32:
        # tf32 on the tensor cores; fp32 tiles take twice the shared memory of bf16 ones.
        return (64, 64, 4, 3) if head_dim <= 64 else (64, 32, 4, 2)
    if head_dim <= 64:
        # Encoder, 1500 x 1500, 20 heads: 39.5 us, on par with torch's SDPA flash backend.
        return 128, 64, 8, 3
    # Decoder prefill, head_dim 128: 64-row query blocks give short prompts enough programs.
    return 64, 64, 4, 3


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, *, causal: bool,
                    kv_start: torch.Tensor | None = None, out: torch.Tensor | None = None,
                    kv_layout: str = "bthd") -> torch.Tensor:
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
    assert D >= 16 and D == triton.next_power_of_2(D), "head_dim must be a power of two >= 16"
    assert not causal or Tq == Tk
    if kv_start is not None:
        assert kv_start.dtype == torch.int32 and kv_start.shape == (B,)
    if out is None:
        out = torch.empty((B, Tq, Hq, D), dtype=q.dtype, device=q.device)
    assert out.shape == (B, Tq, Hq, D) and out.is_contiguous()
    block_m, block_n, num_warps, num_stages = _flash_config(D, q.dtype)
    if INTERPRET:
        # The interpreter pays per program and per block step, not per element: take big tiles.
        block_m, block_n = min(512, triton.next_power_of_2(Tq)), min(512, triton.next_power_of_2(Tk))
    grid = (triton.cdiv(Tq, block_m), B * Hq)
    flash_attention_kernel[grid](
        q, k, v, out, kv_start if kv_start is not None else out,
        Tq, Tk, Hq, Hq // Hkv, scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2), *k_strides, *v_strides,
        out.stride(0), out.stride(1), out.stride(2),
        CAUSAL=causal, HAS_KV_START=kv_start is not None, HEAD_DIM=D,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages, **pdl_options(q.device),
    )
    return out


# ==================================================================================================
# Production: split-K decode attention (flash-decoding)
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
                                  HAS_KV_START: tl.constexpr, HEAD_DIM: tl.constexpr, SPLIT: tl.constexpr,
                                  DIRECT: tl.constexpr, PDL: tl.constexpr, BLOCK_N: tl.constexpr,
                                  BLOCK_G: tl.constexpr):
    """One split of the cache for the `group` query heads of one kv head. DIRECT (a single split):
    the normalised output goes straight to o_ptr and no combine kernel runs."""
    release_consumer(PDL)
    wait_for_producer(PDL)
    split = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_kv_heads
    hk = pid_bh % n_kv_heads
    # The grid covers the whole cache (fixed when a CUDA graph is captured); the live length is read
    # on the device. Keys this split owns: [lo, hi).
    lo, hi = _split_keys(split, b, kv_start_ptr, cache_len_ptr, HAS_KV_START, SPLIT)
    # A split wholly past the live cache (or inside the left padding) runs no block and leaves
    # (max, sum, acc) = (-inf, 0, 0); the combine kernel applies the same test and skips it.
    first = (lo // BLOCK_N) * BLOCK_N
    end = tl.where(lo < hi, hi, first)
    # All `group` query heads sharing kv head hk are rows of one tile, so each K/V tile is read
    # from memory once for the whole group (decode is bound by reading the cache). BLOCK_G pads
    # the group to the 16 rows a tensor-core dot needs.
    g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, HEAD_DIM)
    heads = hk * group + g
    rows = g < group
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=rows[:, None], other=0.0)
    k_rows = k_ptr + b * stride_kb + hk * stride_kh
    v_rows = v_ptr + b * stride_vb + hk * stride_vh
    m_i = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, HEAD_DIM), dtype=tl.float32)
    # Every block below holds at least one visible key (its first block contains lo), so the
    # row max is finite from the first block on.
    for start_n in range(first, end, BLOCK_N):
        n = start_n + tl.arange(0, BLOCK_N)
        key_ok = (n >= lo) & (n < hi)
        # Masked keys read as zeros: cache slots past cache_len may hold anything.
        k = tl.load(k_rows + n[:, None] * stride_kt + offs_d[None, :], mask=key_ok[:, None], other=0.0)
        v = tl.load(v_rows + n[:, None] * stride_vt + offs_d[None, :], mask=key_ok[:, None], other=0.0)
        s = dot(q, tl.trans(k), None) * qk_scale
        s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = dot(round_to(p, v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    if DIRECT:
        # No visible key at all: output 0 instead of NaN, as the combine kernel does.
        o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
                 round_to(o, o_ptr.dtype.element_ty), mask=rows[:, None])
    else:
        # Partials stay unnormalised in fp32: (max, sum, sum of p*v) per query head and split.
        tl.store(m_ptr + b * stride_mb + heads * stride_mh + split, m_i, mask=rows)
        tl.store(l_ptr + b * stride_mb + heads * stride_mh + split, l_i, mask=rows)
        a_ptrs = acc_ptr + b * stride_ab + heads[:, None] * stride_ah + split * stride_as + offs_d[None, :]
        tl.store(a_ptrs, acc, mask=rows[:, None])


@triton.jit
def decode_attention_combine_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, cache_len_ptr, kv_start_ptr,
                                    n_q_heads, num_splits,
                                    stride_mb, stride_mh, stride_ab, stride_ah, stride_as,
                                    stride_ob, stride_oh,
                                    HAS_KV_START: tl.constexpr, HEAD_DIM: tl.constexpr, SPLIT: tl.constexpr,
                                    PDL: tl.constexpr, BLOCK_S: tl.constexpr):
    release_consumer(PDL)
    wait_for_producer(PDL)
    pid = tl.program_id(0)
    b = pid // n_q_heads
    h = pid % n_q_heads
    s = tl.arange(0, BLOCK_S)
    # Exactly the splits the split kernel wrote (the same [lo, hi) test).
    lo, hi = _split_keys(s, b, kv_start_ptr, cache_len_ptr, HAS_KV_START, SPLIT)
    written = (s < num_splits) & (lo < hi)
    m = tl.load(m_ptr + b * stride_mb + h * stride_mh + s, mask=written, other=float("-inf"))
    l = tl.load(l_ptr + b * stride_mb + h * stride_mh + s, mask=written, other=0.0)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.load(acc_ptr + b * stride_ab + h * stride_ah + s[:, None] * stride_as + offs_d[None, :],
                  mask=written[:, None], other=0.0)
    # Bring every split to the common max: softmax over the union of the splits.
    m_max = tl.max(m, axis=0)
    # No split written (no visible key): weights 0 and output 0 instead of NaN.
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp2(m - m_max)
    l_sum = tl.sum(w * l, axis=0)
    l_sum = tl.where(l_sum == 0.0, 1.0, l_sum)
    o = tl.sum(w[:, None] * acc, axis=0) / l_sum
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_d, round_to(o, o_ptr.dtype.element_ty))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_len: torch.Tensor,
                     kv_start: torch.Tensor | None, scale: float, out: torch.Tensor | None = None, *,
                     split_size: int | None = None) -> torch.Tensor:
    """Attention of one new token per row over the KV cache. Returns out (B, 1, Hq, D).

    q: (B, 1, Hq, D), last dim contiguous. k_cache / v_cache: (B, Hkv, Tmax, D).
    cache_len: int32 device tensor (1,), valid cache slots (the token just written included).
    kv_start: int32 (B,) left-padding count (slots < kv_start[b] are masked), or None.
    The launch depends only on shapes (Tmax, not cache_len), so it can be captured in a CUDA graph.
    split_size: cache slots per program of the first kernel (a multiple of 16); default 256 on a GPU,
    the whole cache under the interpreter (fewer, larger programs). A cache of at most split_size
    slots (a short transcription's) is one split: one launch, no combine.
    """
    B, one, Hq, D = q.shape
    _, Hkv, Tmax, _ = k_cache.shape
    assert one == 1 and k_cache.shape == v_cache.shape == (B, Hkv, Tmax, D) and Hq % Hkv == 0
    assert q.stride(3) == k_cache.stride(3) == v_cache.stride(3) == 1
    if split_size is None:
        split_size = triton.next_power_of_2(Tmax) if INTERPRET else 256
    assert D >= 16 and D == triton.next_power_of_2(D) and split_size % 16 == 0
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
        HAS_KV_START=kv_start is not None, HEAD_DIM=D, SPLIT=split_size, DIRECT=direct,
        BLOCK_N=min(split_size if INTERPRET else 64, split_size),
        BLOCK_G=max(16, triton.next_power_of_2(group)), num_warps=4, num_stages=2, **pdl,
    )
    if not direct:
        decode_attention_combine_kernel[(B * Hq,)](
            part_m, part_l, part_acc, out, cache_len, kv_start_arg, Hq, num_splits,
            part_m.stride(0), part_m.stride(1), part_acc.stride(0), part_acc.stride(1), part_acc.stride(2),
            out.stride(0), out.stride(2),
            HAS_KV_START=kv_start is not None, HEAD_DIM=D, SPLIT=split_size,
            BLOCK_S=triton.next_power_of_2(num_splits), num_warps=4, **pdl,
        )
    return out


# ==================================================================================================
# Self-check: python glm_asr_triton_example/attention.py  (without a GPU: the Triton interpreter)
# ==================================================================================================


def _torch_attention(q, k, v, scale, causal=False, kv_start=None, q_offset=0):
    """float64 reference on (B, H, Tq, D) / (B, Hkv, Tk, D), GQA by repeat_interleave."""
    q, k, v = q.double(), k.double(), v.double()
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    s = q @ k.transpose(-1, -2) * scale
    Tq, Tk = q.shape[2], k.shape[2]
    keys = torch.arange(Tk, device=q.device)
    visible = torch.ones(q.shape[0], 1, Tq, Tk, dtype=torch.bool, device=q.device)
    if causal:
        visible &= keys[None, None, None, :] <= (q_offset + torch.arange(Tq, device=q.device))[None, None, :, None]
    if kv_start is not None:
        visible &= keys[None, None, None, :] >= kv_start.long()[:, None, None, None]
    p = torch.softmax(s.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0)
    return p @ v


def _self_check():
    from glm_asr_common.teaching import SelfCheck

    check = SelfCheck("attention.py", INTERPRET)
    on_gpu, dev = check.on_gpu, check.device
    torch.manual_seed(0)
    dt = torch.bfloat16

    # Real model sizes on a GPU, small stand-ins in the interpreter.
    T_enc, T_dec, T_max, T_ref = (1500, 400, 1024, 1500) if on_gpu else (75, 40, 48, 40)

    # Course kernels, one launcher each, then the three together: the encoder's 20 heads of 64.
    q, k, v = (torch.randn(1, 20, T_ref, 64, device=dev, dtype=dt) for _ in range(3))
    scale = 64 ** -0.5
    shape = f"{tuple(q.shape)} bf16"
    causal = torch.ones(T_ref, T_ref, dtype=torch.bool, device=dev).tril()
    ref_scores = (q.double() @ k.double().transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
    check.check("attention_scores_kernel", lambda: attention_scores(q, k, scale, causal=True), lambda: ref_scores,
                shape + " causal", 1e-4)
    logits = ref_scores.float()
    work = torch.empty_like(logits)
    check.check("softmax_inplace_kernel", lambda: softmax_inplace(work.copy_(logits)),
                lambda: torch.softmax(ref_scores, -1), f"{tuple(logits.shape)} fp32", 1e-5)
    probs = torch.softmax(torch.randn(1, 20, T_ref, T_ref, device=dev) * 3, -1)
    check.check("attention_output_kernel", lambda: attention_output(probs, v),
                lambda: probs.to(dt).double() @ v.double(), shape, 1e-2)
    check.check("attention_reference_path", lambda: attention_reference_path(q, k, v, scale),
                lambda: _torch_attention(q, k, v, scale), shape, 2e-2)

    # Encoder: q, k, v are views into one fused (B, T, 3*H*D) projection output.
    qkv = torch.randn(1, T_enc, 3, 20, 64, device=dev, dtype=dt)
    q, k, v = qkv.unbind(2)
    out = torch.empty(1, T_enc, 20, 64, device=dev, dtype=dt)
    check.check("flash_attention[encoder]", lambda: flash_attention(q, k, v, scale, causal=False, out=out),
                lambda: _torch_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale).transpose(1, 2),
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
                lambda: flash_attention(q, k_cache, v_cache, scale, causal=True, kv_start=kv_start, out=out,
                                        kv_layout="bhtd"),
                lambda: _torch_attention(q.transpose(1, 2), k_cache[:, :, :T_dec], v_cache[:, :, :T_dec], scale,
                                         causal=True, kv_start=kv_start).transpose(1, 2),
                f"{tuple(q.shape)} bf16", 2e-2)

    # Decode: one token against a cache holding T_dec + 1 valid slots. Decode runs inside a CUDA
    # graph, so it is timed as one (its two short kernels would otherwise time Python launches).
    q1 = torch.randn(B, 1, Hq, D, device=dev, dtype=dt)
    cache_len = torch.tensor([T_dec + 1], dtype=torch.int32, device=dev)
    out = torch.empty(B, 1, Hq, D, device=dev, dtype=dt)
    split = 64 if on_gpu else 16
    check.check("decode_attention",
                lambda: decode_attention(q1, k_cache, v_cache, cache_len, kv_start, scale, out, split_size=split),
                lambda: _torch_attention(q1.transpose(1, 2), k_cache[:, :, : T_dec + 1], v_cache[:, :, : T_dec + 1],
                                         scale, kv_start=kv_start).transpose(1, 2),
                f"({B}, {Hq}, {T_max}, {D}) bf16", 2e-2, graph=True)
    check.finish()


if __name__ == "__main__":
    _self_check()
