"""Provided kernels of the course path that are not course work: data movement and the few bits of
arithmetic that hold the model together. Each sits above its launcher.

    add_kernel / add                   out = a + b (the residual adds)
    mul_kernel / mul                   out = a * b (SwiGLU: silu(gate) * up)
    embed_tokens_kernel / embed_tokens token embeddings, audio placeholders replaced by audio rows
    rope_kernel / apply_rope           RoPE on q and k in place (the encoder's fused QKV output)
    rope_qkv_to_cache_kernel / rope_qkv_into_cache
                                       the decoder's fused QKV output split: rotated q to a buffer,
                                       rotated k and raw v into the KV cache
    mask_scores_kernel / mask_scores   -inf on the attention scores of keys a query must not see
                                       (left padding, cache slots past the live length)
    argmax_blocks_kernel, argmax_reduce_kernel / argmax_rows
                                       greedy decoding's argmax, eos banned while a device flag says so

The example's fast path uses several of them too. RoPE follows transformers' "rotate_half"
convention: for each head, the first ``rotary_dim`` channels split into x1 = x[d], x2 =
x[d + rotary_dim/2] and

    out1 = x1 * cos - x2 * sin          out2 = x2 * cos + x1 * sin

with the tables of rope.py (the course's compute_freqs_kernel); channels past rotary_dim pass
through. In bf16 every product and the sum are rounded where torch rounds them, and the rotation
kernels are compiled with ``enable_fp_fusion=False``: otherwise the compiler contracts
"round(x1*c) - round(x2*s)" into one fused multiply-add and skips a rounding that torch performs.

Self-check: python glm_asr_triton_example/glue.py  (without a GPU: the Triton interpreter)
"""

import time

import torch

if __name__ == "__main__":  # run as a script: python glm_asr_triton_example/glue.py
    from _script import package_of

    __package__ = package_of(__file__)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._triton_compat import (INTERPRET, MAX_BLOCK_NUMEL, as_rows, pdl_options, release_consumer,  # noqa: E402
                             round_to, rows_per_program, wait_for_producer, warps_for_row)

# Elementwise kernels: 2048 elements over 4 warps (the interpreter pays per program: far more at once).
_ELEMENTWISE_BLOCK = 1 << 16 if INTERPRET else 2048


# ---------------------------------------------------------------------------------------------
# Elementwise: residual add, product
# ---------------------------------------------------------------------------------------------


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, round_to(a + b, out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def mul_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, round_to(a * b, out_ptr.dtype.element_ty), mask=mask)


def _elementwise(kernel, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if a.shape != b.shape or not (a.is_contiguous() and b.is_contiguous()):
        raise ValueError(f"{kernel.__name__}: operands {tuple(a.shape)} and {tuple(b.shape)} must match and be contiguous")
    if out is None:
        out = torch.empty_like(a)
    n = a.numel()
    kernel[(triton.cdiv(n, _ELEMENTWISE_BLOCK),)](a, b, out, n, BLOCK=_ELEMENTWISE_BLOCK, num_warps=4)
    return out


def add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a + b, rounded once to out's dtype; out may be a (a residual stream updated in place)."""
    return _elementwise(add_kernel, a, b, out)


def mul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a * b, rounded once to out's dtype."""
    return _elementwise(mul_kernel, a, b, out)


# ---------------------------------------------------------------------------------------------
# Embedding gather
# ---------------------------------------------------------------------------------------------


@triton.jit
def embed_tokens_kernel(
    ids_ptr, audio_index_ptr, table_ptr, audio_ptr, out_ptr, H, stride_table, stride_audio, stride_out,
    PDL: tl.constexpr, BLOCK_H: tl.constexpr,
):
    release_consumer(PDL)
    wait_for_producer(PDL)
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < H
    out_dtype = out_ptr.dtype.element_ty
    # The whole program takes one branch, so only the source row it needs is ever read.
    audio_row = tl.load(audio_index_ptr + row)
    if audio_row >= 0:
        values = round_to(tl.load(audio_ptr + audio_row * stride_audio + cols, mask=mask).to(tl.float32), out_dtype)
    else:
        token = tl.load(ids_ptr + row)
        values = round_to(tl.load(table_ptr + token * stride_table + cols, mask=mask).to(tl.float32), out_dtype)
    tl.store(out_ptr + row * stride_out + cols, values, mask=mask)


def embed_tokens(
    input_ids: torch.Tensor,
    table: torch.Tensor,
    audio_embeds: torch.Tensor,
    audio_index: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """out[m] = audio_embeds[audio_index[m]] if audio_index[m] >= 0 else table[input_ids[m]].

    input_ids, audio_index: int64 (M,). table: (V, H). audio_embeds: (A, H), A may be 0.
    Output (M, H) in table.dtype. Indices are not bounds-checked.
    """
    M = input_ids.shape[0]
    H = table.shape[1]
    if out is None:
        out = torch.empty((M, H), dtype=table.dtype, device=table.device)
    # With no audio rows every audio_index is -1: the table stands in as a valid, never-read pointer.
    audio = audio_embeds if audio_embeds.numel() > 0 else table
    block_h = min(triton.next_power_of_2(H), 2048)
    embed_tokens_kernel[(M, triton.cdiv(H, block_h))](
        input_ids, audio_index, table, audio, out, H, table.stride(0), audio.stride(0), out.stride(0),
        BLOCK_H=block_h, num_warps=warps_for_row(block_h), **pdl_options(table.device),
    )
    return out


# ---------------------------------------------------------------------------------------------
# Attention masks on materialised scores
# ---------------------------------------------------------------------------------------------


@triton.jit
def mask_scores_kernel(s_ptr, kv_start_ptr, cache_pos_ptr, valid_len_ptr, n_rows, n_heads, Tq, Tk, stride_sb,
                       stride_sh, stride_sq, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """Rows (b, h, i) of the scores: keys j outside [kv_start[b], valid_len) become -inf, except the
    query's own slot cache_pos + i, so that a left-padding query still sees one key (itself) and its
    softmax stays finite. The counters live on the device: a captured graph reads the current ones."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    b = row // (n_heads * Tq)
    h = (row // Tq) % n_heads
    i = row % Tq
    lo = tl.load(kv_start_ptr + b, mask=row < n_rows, other=0)
    hi = tl.load(valid_len_ptr)
    own = tl.load(cache_pos_ptr) + i
    s_row = s_ptr + b * stride_sb + h * stride_sh + i * stride_sq
    for start in range(0, Tk, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)[None, :]
        hidden = (row < n_rows) & (j < Tk) & ((j < lo) | (j >= hi)) & (j != own)
        tl.store(s_row + j, tl.full((ROWS, BLOCK_N), float("-inf"), tl.float32), mask=hidden)


def mask_scores(scores: torch.Tensor, kv_start: torch.Tensor, cache_pos: torch.Tensor,
                valid_len: torch.Tensor) -> torch.Tensor:
    """-inf in place on scores (B, H, Tq, Tk) where key j is outside [kv_start[b], valid_len) and is
    not query i's own slot cache_pos + i. kv_start: int32 (B,); cache_pos, valid_len: int32 (1,)."""
    B, H, Tq, Tk = scores.shape
    if scores.stride(3) != 1 or kv_start.shape != (B,):
        raise ValueError(f"mask_scores: scores {tuple(scores.shape)} / kv_start {tuple(kv_start.shape)}")
    n_rows = B * H * Tq
    block = min(triton.next_power_of_2(Tk), 4096)
    per_program = rows_per_program(n_rows, block)
    mask_scores_kernel[(triton.cdiv(n_rows, per_program),)](
        scores, kv_start, cache_pos, valid_len, n_rows, H, Tq, Tk,
        scores.stride(0), scores.stride(1), scores.stride(2), BLOCK_N=block, ROWS=per_program)
    return scores


# ---------------------------------------------------------------------------------------------
# Rotary position embeddings: the rotation (the tables come from rope.py)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _rotate(x1, x2, cos, sin):
    """The two rotated halves, rounded at the same points as HF's ``q*cos + rotate_half(q)*sin``."""
    dtype = x1.dtype
    # transformers casts the fp32 tables to the activation dtype before multiplying.
    c = round_to(cos, dtype).to(tl.float32)
    s = round_to(sin, dtype).to(tl.float32)
    a = x1.to(tl.float32)
    b = x2.to(tl.float32)
    # Each product is its own tensor op in torch, so it is rounded to the dtype before the add
    # (rotate_half negates x2 first; negation is exact, so x1*c + (-x2)*s == x1*c - x2*s).
    ac = round_to(a * c, dtype).to(tl.float32)
    bs = round_to(b * s, dtype).to(tl.float32)
    bc = round_to(b * c, dtype).to(tl.float32)
    as_ = round_to(a * s, dtype).to(tl.float32)
    return round_to(ac - bs, dtype), round_to(bc + as_, dtype)


@triton.jit
def _rope_heads(src_rows, dst_rows, row_mask, cos, sin,
                HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, HEAD_DIM: tl.constexpr,
                BLOCK_PASS: tl.constexpr, COPY_PASS: tl.constexpr, IN_PLACE: tl.constexpr):
    """Rotate a (tokens, heads) tile of head rows from ``src_rows`` into ``dst_rows``.

    src_rows / dst_rows are (BLOCK_T, BLOCK_H, 1) pointers to the start of each head row, row_mask
    says which exist; cos / sin are the tokens' (BLOCK_T, 1, BLOCK_HALF) fp32 table rows. With
    COPY_PASS the channels past rotary_dim are copied too (needed when dst is another buffer).
    """
    d = tl.arange(0, BLOCK_HALF)[None, None, :]
    mask = row_mask & (d < HALF)
    x1 = tl.load(src_rows + d, mask=mask)
    x2 = tl.load(src_rows + HALF + d, mask=mask)
    if IN_PLACE:
        # A tile smaller than the program's threads is held by several threads at once; without this
        # barrier one of them could store its result before another has loaded the original.
        tl.debug_barrier()
    out1, out2 = _rotate(x1, x2, cos, sin)
    tl.store(dst_rows + d, out1, mask=mask)
    tl.store(dst_rows + HALF + d, out2, mask=mask)
    if COPY_PASS:
        p = 2 * HALF + tl.arange(0, BLOCK_PASS)[None, None, :]
        pass_mask = row_mask & (p < HEAD_DIM)
        tl.store(dst_rows + p, tl.load(src_rows + p, mask=pass_mask), mask=pass_mask)


def _tokens_per_program(T: int, elements_per_token: int) -> int:
    """One token per program on a GPU (plenty of programs); the interpreter pays per program, so it
    takes as many tokens as fit one block of Triton's largest size."""
    if not INTERPRET:
        return 1
    return max(1, min(triton.next_power_of_2(T), MAX_BLOCK_NUMEL // elements_per_token))


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, pos_ptr, n_heads, T,
                stride_xb, stride_xt, stride_xh, stride_pb, stride_pt, stride_table,
                HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr,
                PDL: tl.constexpr):
    # BLOCK_T tokens per program: each token's table row is loaded once and serves all of its heads.
    release_consumer(PDL)
    wait_for_producer(PDL)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)[:, None, None]
    b = tl.program_id(1)
    h = tl.arange(0, BLOCK_H)[None, :, None]
    d = tl.arange(0, BLOCK_HALF)[None, None, :]
    token_mask = t < T
    pos = tl.load(pos_ptr + b * stride_pb + t * stride_pt, mask=token_mask, other=0)
    cos = tl.load(cos_ptr + pos * stride_table + d, mask=token_mask & (d < HALF))
    sin = tl.load(sin_ptr + pos * stride_table + d, mask=token_mask & (d < HALF))
    rows = x_ptr + b * stride_xb + t * stride_xt + h * stride_xh
    _rope_heads(rows, rows, token_mask & (h < n_heads), cos, sin,
                HALF=HALF, BLOCK_HALF=BLOCK_HALF, HEAD_DIM=2 * HALF,
                BLOCK_PASS=1, COPY_PASS=False, IN_PLACE=True)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
               rotary_dim: int) -> torch.Tensor:
    """Rotate x (B, T, H, D) in place and return it.

    x may be any view whose last dim is contiguous, e.g. the q and k heads of a fused QKV output
    ``qkv[..., :2*H*D].view(B, T, 2*H, D)`` (q and k rotated by one launch). positions: integer
    (B, T) for row-dependent positions, or (T,) shared by every row. Channels >= rotary_dim untouched.
    """
    assert x.dim() == 4 and x.stride(-1) == 1, "x must be (B, T, H, D) with a contiguous last dim"
    B, T, H, D = x.shape
    half = rotary_dim // 2
    assert rotary_dim % 2 == 0 and rotary_dim <= D and cos.shape[1] == half and sin.stride() == cos.stride()
    if positions.dim() == 1:
        stride_pb, stride_pt = 0, positions.stride(0)
    else:
        stride_pb, stride_pt = positions.stride()
    block_h = triton.next_power_of_2(H)
    block_t = _tokens_per_program(T, block_h * triton.next_power_of_2(half))
    rope_kernel[(triton.cdiv(T, block_t), B)](
        x, cos, sin, positions, H, T,
        x.stride(0), x.stride(1), x.stride(2), stride_pb, stride_pt, cos.stride(0),
        HALF=half, BLOCK_HALF=triton.next_power_of_2(half), BLOCK_H=block_h, BLOCK_T=block_t,
        num_warps=4 if block_h * rotary_dim >= 2048 else 2, enable_fp_fusion=False, **pdl_options(x.device),
    )
    return x


# --------------------------------------------------------------------------------------------------
# Decoder: fused QKV output -> rotated q, rotated k and v written into the KV cache
# --------------------------------------------------------------------------------------------------


@triton.jit
def rope_qkv_to_cache_kernel(qkv_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr, cos_ptr, sin_ptr,
                             cache_pos_ptr, kv_start_ptr, n_q_heads, n_kv_heads, cache_len_max, T,
                             stride_qkv_b, stride_qkv_t,
                             stride_qo_b, stride_qo_t, stride_qo_h,
                             stride_kc_b, stride_kc_h, stride_kc_t,
                             stride_vc_b, stride_vc_h, stride_vc_t, stride_table,
                             HEAD_DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                             BLOCK_PASS: tl.constexpr, COPY_PASS: tl.constexpr,
                             BLOCK_HQ: tl.constexpr, BLOCK_HKV: tl.constexpr, BLOCK_D: tl.constexpr,
                             BLOCK_T: tl.constexpr, PDL: tl.constexpr):
    release_consumer(PDL)
    wait_for_producer(PDL)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)[:, None, None]
    b = tl.program_id(1)
    token_mask = t < T
    # cache_pos lives on the device so a captured CUDA graph can be replayed at every decode step.
    slot = tl.load(cache_pos_ptr) + t
    # transformers numbers the real tokens of a left-padded row from 0; pad tokens (negative) are
    # clamped to 0, their keys are masked out anyway.
    pos = tl.maximum(slot - tl.load(kv_start_ptr + b), 0)
    d = tl.arange(0, BLOCK_HALF)[None, None, :]
    cos = tl.load(cos_ptr + pos * stride_table + d, mask=token_mask & (d < HALF))
    sin = tl.load(sin_ptr + pos * stride_table + d, mask=token_mask & (d < HALF))

    row = qkv_ptr + b * stride_qkv_b + t * stride_qkv_t
    # q heads: rows 0 .. Hq-1 of the fused output, rotated into q_out.
    hq = tl.arange(0, BLOCK_HQ)[None, :, None]
    _rope_heads(row + hq * HEAD_DIM, q_out_ptr + b * stride_qo_b + t * stride_qo_t + hq * stride_qo_h,
                token_mask & (hq < n_q_heads), cos, sin, HALF=HALF, BLOCK_HALF=BLOCK_HALF, HEAD_DIM=HEAD_DIM,
                BLOCK_PASS=BLOCK_PASS, COPY_PASS=COPY_PASS, IN_PLACE=False)
    # A slot past the cache end would write out of bounds: drop it (the caller sized the cache).
    in_cache = token_mask & (slot < cache_len_max)
    # k heads: the next Hkv rows, rotated into the cache at this slot.
    hk = tl.arange(0, BLOCK_HKV)[None, :, None]
    _rope_heads(row + (n_q_heads + hk) * HEAD_DIM,
                k_cache_ptr + b * stride_kc_b + slot * stride_kc_t + hk * stride_kc_h,
                in_cache & (hk < n_kv_heads), cos, sin, HALF=HALF, BLOCK_HALF=BLOCK_HALF, HEAD_DIM=HEAD_DIM,
                BLOCK_PASS=BLOCK_PASS, COPY_PASS=COPY_PASS, IN_PLACE=False)
    # v heads: the last Hkv rows, copied unrotated.
    e = tl.arange(0, BLOCK_D)[None, None, :]
    v_mask = (hk < n_kv_heads) & (e < HEAD_DIM) & in_cache
    v = tl.load(row + (n_q_heads + n_kv_heads + hk) * HEAD_DIM + e, mask=v_mask)
    tl.store(v_cache_ptr + b * stride_vc_b + hk * stride_vc_h + slot * stride_vc_t + e, v, mask=v_mask)


def rope_qkv_into_cache(qkv: torch.Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int,
                        cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
                        q_out: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        cache_pos: torch.Tensor, kv_start: torch.Tensor) -> None:
    """Split the fused projection qkv (B, T, (Hq + 2*Hkv) * D) [q heads, k heads, v heads].

    Writes rotated q to q_out (B, T, Hq, D) and rotated k / raw v to k_cache / v_cache
    (B, Hkv, Tmax, D) at slot cache_pos + t. cache_pos: int32 device tensor (1,). kv_start: int32 (B,)
    left-padding count per row; token t of row b is rotated by position cache_pos + t - kv_start[b].
    Nothing is read back to the host, so the launch can be captured in a CUDA graph.
    """
    B, T, width = qkv.shape
    assert width == (num_q_heads + 2 * num_kv_heads) * head_dim and qkv.stride(2) == 1
    assert q_out.shape == (B, T, num_q_heads, head_dim) and q_out.stride(3) == 1
    assert k_cache.shape[:2] == (B, num_kv_heads) and k_cache.shape[3] == head_dim and k_cache.stride(3) == 1
    assert v_cache.shape == k_cache.shape and v_cache.stride(3) == 1
    assert cache_pos.dtype == torch.int32 and kv_start.dtype == torch.int32 and kv_start.shape == (B,)
    half = rotary_dim // 2
    assert rotary_dim % 2 == 0 and rotary_dim <= head_dim and cos.shape[1] == half and sin.stride() == cos.stride()
    block_t = _tokens_per_program(T, (triton.next_power_of_2(num_q_heads) + triton.next_power_of_2(num_kv_heads))
                                   * triton.next_power_of_2(head_dim))
    rope_qkv_to_cache_kernel[(triton.cdiv(T, block_t), B)](
        qkv, q_out, k_cache, v_cache, cos, sin, cache_pos, kv_start,
        num_q_heads, num_kv_heads, k_cache.shape[2], T,
        qkv.stride(0), qkv.stride(1),
        q_out.stride(0), q_out.stride(1), q_out.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), cos.stride(0),
        HEAD_DIM=head_dim, HALF=half, BLOCK_HALF=triton.next_power_of_2(half),
        BLOCK_PASS=triton.next_power_of_2(max(head_dim - rotary_dim, 1)), COPY_PASS=rotary_dim < head_dim,
        BLOCK_HQ=triton.next_power_of_2(num_q_heads), BLOCK_HKV=triton.next_power_of_2(num_kv_heads),
        BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_T=block_t, num_warps=4, enable_fp_fusion=False,
        **pdl_options(qkv.device),
    )


# ---------------------------------------------------------------------------------------------
# Greedy decoding: argmax over the vocabulary with optional banned ids
# ---------------------------------------------------------------------------------------------

_NO_INDEX = tl.constexpr(2**31 - 1)  # above any vocabulary index: loses every "lowest index" contest


@triton.jit
def _block_argmax(logits, cols, V, banned_ptr, num_banned, suppress_ptr, BLOCK_BANNED: tl.constexpr):
    """Per row of a (rows, cols) logits tile: (max, lowest column holding it).

    Columns >= V are skipped; so are the banned ids while suppress[0] != 0 (a device flag, so that a
    captured CUDA graph can switch suppression on and off without being recaptured).
    """
    slots = tl.arange(0, BLOCK_BANNED)
    banned = tl.load(banned_ptr + slots, mask=slots < num_banned, other=-1)
    is_banned = tl.max((cols[:, None] == banned[None, :]).to(tl.int32), axis=1) > 0
    excluded = (cols >= V) | (is_banned & (tl.load(suppress_ptr) != 0))
    logits = tl.where(excluded[None, :], float("-inf"), logits)
    row_max = tl.max(logits, axis=1)
    holders = tl.where((logits == row_max[:, None]) & (cols < V)[None, :], cols[None, :], _NO_INDEX)
    return row_max, tl.min(holders, axis=1)


@triton.jit
def argmax_reduce_kernel(max_ptr, idx_ptr, out_ptr, n_blocks, PDL: tl.constexpr, BLOCK: tl.constexpr):
    release_consumer(PDL)
    wait_for_producer(PDL)
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_blocks
    values = tl.load(max_ptr + row * n_blocks + offs, mask=mask, other=float("-inf"))
    indices = tl.load(idx_ptr + row * n_blocks + offs, mask=mask, other=_NO_INDEX)
    best = tl.max(values, axis=0)
    # Every block reports its lowest maximising index, so the lowest index over the blocks that
    # reach the row maximum is torch.argmax's answer.
    winner = tl.min(tl.where(mask & (values == best), indices, _NO_INDEX), axis=0)
    tl.store(out_ptr + row, winner.to(tl.int64))


def _reduce_block_argmax(partial_max, partial_idx, out_ids):
    n_rows, n_blocks = partial_max.shape
    block = triton.next_power_of_2(n_blocks)
    argmax_reduce_kernel[(n_rows,)](partial_max, partial_idx, out_ids, n_blocks, BLOCK=block,
                                   num_warps=warps_for_row(block), **pdl_options(out_ids.device))
    return out_ids


def _banned_args(banned_ids, out_ids):
    """(pointer, count, padded block) for the banned ids; an empty list borrows a valid pointer."""
    count = banned_ids.numel()
    return (banned_ids if count else out_ids), count, triton.next_power_of_2(max(count, 1))


@triton.jit
def argmax_blocks_kernel(
    logits_ptr, banned_ptr, suppress_ptr, max_ptr, idx_ptr, V, row_stride, num_banned, n_blocks,
    BLOCK_V: tl.constexpr, BLOCK_BANNED: tl.constexpr,
):
    rows = tl.program_id(0) + tl.arange(0, 1)
    block = tl.program_id(1)
    cols = block * BLOCK_V + tl.arange(0, BLOCK_V)
    logits = tl.load(logits_ptr + rows[:, None] * row_stride + cols[None, :], mask=(cols < V)[None, :],
                     other=float("-inf")).to(tl.float32)
    block_max, block_idx = _block_argmax(logits, cols, V, banned_ptr, num_banned, suppress_ptr, BLOCK_BANNED)
    tl.store(max_ptr + rows * n_blocks + block, block_max)
    tl.store(idx_ptr + rows * n_blocks + block, block_idx)


def argmax_rows(logits: torch.Tensor, banned_ids: torch.Tensor, suppress: torch.Tensor, out_ids: torch.Tensor):
    """out_ids[b] = argmax(logits[b]) (lowest index on ties), skipping banned_ids when suppress[0] != 0.

    logits: (B, V), rows contiguous. banned_ids: int64 (nb,). suppress: int32 (1,) on the device.
    out_ids: int64 (B,). Two launches: per-block maxima, then one reduction per row.
    """
    rows = as_rows(logits)
    n_rows, V = rows.shape
    block_v = min(triton.next_power_of_2(V), 4096)
    n_blocks = triton.cdiv(V, block_v)
    partial_max = torch.empty((n_rows, n_blocks), dtype=torch.float32, device=logits.device)
    partial_idx = torch.empty((n_rows, n_blocks), dtype=torch.int32, device=logits.device)
    banned, num_banned, block_banned = _banned_args(banned_ids, out_ids)
    argmax_blocks_kernel[(n_rows, n_blocks)](
        rows, banned, suppress, partial_max, partial_idx, V, rows.stride(0), num_banned, n_blocks,
        BLOCK_V=block_v, BLOCK_BANNED=block_banned, num_warps=warps_for_row(block_v),
    )
    return _reduce_block_argmax(partial_max, partial_idx, out_ids)


# ---------------------------------------------------------------------------------------------
# Self-check: each launcher against plain torch on fresh random inputs
# ---------------------------------------------------------------------------------------------






def _self_check():
    from glm_asr_common.course.self_check import SelfCheck
    from glm_asr_common.reference.torch_ops import rope as torch_rope, rope_tables as torch_rope_tables

    check = SelfCheck("glue.py", INTERPRET)
    on_gpu, dev = check.on_gpu, check.device
    gen = torch.Generator().manual_seed(int(time.time()))
    bf16, fp32 = torch.bfloat16, torch.float32

    def rand(*shape, dtype=bf16, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=dev, dtype=dtype)

    rows, H, V, T = (512, 2048, 59264, 1500) if on_gpu else (17, 96, 300, 24)
    a, b = rand(rows, H), rand(rows, H)
    check.check("add_kernel", lambda: add(a, b), lambda: (a + b).float(), f"{rows}x{H} bf16", 0.0)
    check.check("mul_kernel", lambda: mul(a, b), lambda: (a * b).float(), f"{rows}x{H} bf16", 0.0)

    table, audio = rand(V, H), rand(rows // 2, H)
    ids = torch.randint(0, V, (rows,), generator=gen).to(dev)
    audio_index = torch.full((rows,), -1, dtype=torch.int64)
    audio_index[3:3 + rows // 2] = torch.arange(rows // 2)
    audio_index = audio_index.to(dev)
    check.check("embed_tokens_kernel", lambda: embed_tokens(ids, table, audio, audio_index),
                lambda: torch.where(audio_index[:, None] >= 0, audio[audio_index.clamp(min=0)], table[ids]),
                f"{rows}x{H} bf16", 0.0)

    ecos, esin = torch_rope_tables(torch.arange(T, device=dev), 32, 10000.0)
    qkv = rand(1, T, 3 * 20 * 64)
    qk = qkv[..., : 2 * 20 * 64].view(1, T, 40, 64)
    check.check("rope_kernel[encoder q+k]", lambda: apply_rope(qk.clone(), ecos, esin, torch.arange(T, device=dev), 32),
                lambda: torch_rope(qk, ecos[None], esin[None], 32), f"{tuple(qk.shape)} bf16", 1e-2)

    Hq, Hkv, D, Tmax, Tp = 16, 4, 128, (1024 if on_gpu else 32), (400 if on_gpu else 12)
    cos, sin = torch_rope_tables(torch.arange(Tmax, device=dev), 128, 10000.0)
    qkv = rand(1, Tp, (Hq + 2 * Hkv) * D)
    q_out = torch.empty(1, Tp, Hq, D, device=dev, dtype=bf16)
    k_cache, v_cache = (torch.zeros(1, Hkv, Tmax, D, device=dev, dtype=bf16) for _ in range(2))
    zero = torch.zeros(1, dtype=torch.int32, device=dev)

    def to_cache():
        rope_qkv_into_cache(qkv, Hq, Hkv, D, cos, sin, 128, q_out, k_cache, v_cache, zero, zero)
        return q_out

    check.check("rope_qkv_to_cache_kernel", to_cache,
                lambda: torch_rope(qkv[..., : Hq * D].view(1, Tp, Hq, D), cos[None, :Tp], sin[None, :Tp], 128),
                f"{tuple(qkv.shape)} bf16", 1e-2)

    scores = rand(2, Hq, 3, Tmax, dtype=fp32)
    kv_start = torch.tensor([0, 5], dtype=torch.int32, device=dev)
    counters = torch.tensor([9, 12], dtype=torch.int32, device=dev)

    def masked_reference():
        j = torch.arange(Tmax, device=dev)
        own = (9 + torch.arange(3, device=dev))[:, None]
        hidden = ((j < kv_start[:, None, None, None]) | (j >= 12)) & (j != own)
        return scores.masked_fill(hidden, float("-inf"))

    check.check("mask_scores_kernel", lambda: mask_scores(scores.clone(), kv_start, counters[:1], counters[1:]),
                masked_reference, f"{tuple(scores.shape)} fp32", 0.0)

    logits = rand(4, V, dtype=fp32)
    banned = torch.tensor([V - 2, V - 1], device=dev)
    suppress = torch.ones(1, dtype=torch.int32, device=dev)
    chosen = torch.empty(4, dtype=torch.int64, device=dev)

    def banned_argmax():
        return logits.masked_fill(torch.isin(torch.arange(V, device=dev), banned), float("-inf")).argmax(-1).float()

    check.check("argmax_rows", lambda: argmax_rows(logits, banned, suppress, chosen).float(), banned_argmax,
                f"4x{V} fp32", 0.0)
    check.finish()


if __name__ == "__main__":
    _self_check()
