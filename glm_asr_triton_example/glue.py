"""Provided kernels of the course path that are not course work: data movement and the few bits of
arithmetic that hold the model together. Each sits above its launcher.

    residual_add_kernel / residual_add     x += y (the residual stream, in place)
    mul_kernel / mul                       out = a * b (SwiGLU: silu(gate) * up)
    embed_tokens_kernel / embed_tokens     token embeddings, audio placeholders replaced by audio rows
    token_positions_kernel / token_positions
                                           RoPE positions of new tokens (left padding counted out)
    kv_cache_write_kernel / write_kv_cache k and v heads of the fused QKV output into the KV cache
    mask_scores_kernel / mask_scores       -inf on the attention scores of keys a query must not see
                                           (left padding, cache slots past the live length)
    argmax_blocks_kernel, argmax_reduce_kernel / argmax_rows
                                           greedy decoding's argmax, eos banned while a device flag says so

The example's fast path uses several of them too.

Self-check: python glm_asr_triton_example/glue.py  (without a GPU: the Triton interpreter)
"""


import torch
import triton
import triton.language as tl

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.triton_helpers import (INTERPRET, as_rows, pdl_options, release_consumer, round_to,
                                                    rows_per_program, wait_for_producer, warps_for_row)

# Elementwise kernels: 2048 elements over 4 warps (the interpreter pays per program: far more at once).
_ELEMENTWISE_BLOCK = 1 << 16 if INTERPRET else 2048


# ---------------------------------------------------------------------------------------------
# Elementwise: residual add, product
# ---------------------------------------------------------------------------------------------


@triton.jit
def _load_operands(a_ptr, b_ptr, n_elements, BLOCK: tl.constexpr):
    """This program's BLOCK elements of a and b in fp32, with their offsets and the ragged end's mask."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    return a, b, offsets, mask


@triton.jit
def residual_add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    a, b, offsets, mask = _load_operands(a_ptr, b_ptr, n_elements, BLOCK)
    tl.store(out_ptr + offsets, round_to(a + b, out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def mul_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    a, b, offsets, mask = _load_operands(a_ptr, b_ptr, n_elements, BLOCK)
    tl.store(out_ptr + offsets, round_to(a * b, out_ptr.dtype.element_ty), mask=mask)


def _elementwise(kernel, operation: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    launch_contracts.same_shape(operation, a, b)
    if out is None:
        out = torch.empty_like(a)
    n = a.numel()
    kernel[(triton.cdiv(n, _ELEMENTWISE_BLOCK),)](a, b, out, n, BLOCK=_ELEMENTWISE_BLOCK, num_warps=4)
    return out


def residual_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x += y in place (the residual stream), rounded once to x's dtype; returns x."""
    return _elementwise(residual_add_kernel, "residual_add", x, y, x)


def mul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a * b, rounded once to out's dtype."""
    return _elementwise(mul_kernel, "mul", a, b, out)


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
# Positions and the KV cache
# ---------------------------------------------------------------------------------------------


@triton.jit
def token_positions_kernel(first_slot_ptr, row_start_ptr, positions_ptr, T, BLOCK_T: tl.constexpr):
    """positions[b, t] = max(first_slot + t - row_start[b], 0): transformers numbers the real tokens of
    a left-padded row from 0; the padding tokens' (negative) positions are clamped, their keys are
    masked anyway."""
    b = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    position = tl.maximum(tl.load(first_slot_ptr) + t - tl.load(row_start_ptr + b), 0)
    tl.store(positions_ptr + b * T + t, position, mask=t < T)


def token_positions(first_slot: torch.Tensor, row_start: torch.Tensor, tokens: int) -> torch.Tensor:
    """(B, tokens) int32 positions of tokens at cache slots first_slot + t of each row b, whose real
    tokens start at slot row_start[b]. first_slot: int32 (1,), row_start: int32 (B,), both on the
    device (a captured graph reads the current values)."""
    batch = row_start.shape[0]
    positions = torch.empty((batch, tokens), dtype=torch.int32, device=row_start.device)
    block_t = min(triton.next_power_of_2(tokens), 1024)
    token_positions_kernel[(triton.cdiv(tokens, block_t), batch)](first_slot, row_start, positions, tokens,
                                                                 BLOCK_T=block_t)
    return positions


@triton.jit
def kv_cache_write_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, first_slot_ptr, n_heads, T, cache_len,
                          stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
                          stride_cb, stride_ch, stride_ct, HEAD_DIM: tl.constexpr,
                          BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    """k_cache[b, h, first_slot + t] = k[b, t, h] and the same for v: token-major heads of the fused
    QKV output into the head-major cache; slots past the cache's end are dropped (the caller sizes
    the cache). k_cache and v_cache share their strides."""
    b = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)[:, None, None]
    h = tl.arange(0, BLOCK_H)[None, :, None]
    d = tl.arange(0, BLOCK_D)[None, None, :]
    slot = tl.load(first_slot_ptr) + t
    mask = (t < T) & (h < n_heads) & (d < HEAD_DIM) & (slot < cache_len)
    cache = b * stride_cb + h * stride_ch + slot * stride_ct + d
    tl.store(k_cache_ptr + cache, tl.load(k_ptr + b * stride_kb + t * stride_kt + h * stride_kh + d, mask=mask),
             mask=mask)
    tl.store(v_cache_ptr + cache, tl.load(v_ptr + b * stride_vb + t * stride_vt + h * stride_vh + d, mask=mask),
             mask=mask)


def write_kv_cache(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   first_slot: torch.Tensor) -> None:
    """Copy k, v (B, T, Hkv, D) (views into the fused QKV output) to k_cache, v_cache (B, Hkv, Tmax, D)
    at slots first_slot .. first_slot + T - 1. first_slot: int32 (1,) on the device; the caller sizes
    the cache (first_slot + T <= Tmax)."""
    B, T, H, D = launch_contracts.write_kv_cache(k, v, k_cache, v_cache)
    block_h, block_d = triton.next_power_of_2(H), triton.next_power_of_2(D)
    block_t = rows_per_program(T, block_h * block_d)
    kv_cache_write_kernel[(triton.cdiv(T, block_t), B)](
        k, v, k_cache, v_cache, first_slot, H, T, k_cache.shape[2], k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        HEAD_DIM=D, BLOCK_T=block_t, BLOCK_H=block_h, BLOCK_D=block_d)


# ---------------------------------------------------------------------------------------------
# Attention masks on materialised scores
# ---------------------------------------------------------------------------------------------


@triton.jit
def mask_scores_kernel(s_ptr, row_start_ptr, first_slot_ptr, valid_len_ptr, n_rows, queries, Tk, stride_row,
                       BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """Rows r of one batch row's scores, query i = r % queries: keys j outside [row_start, valid_len)
    become -inf, except the query's own slot first_slot + i, so that a left-padding query still sees
    one key (itself) and its softmax stays finite. The counters live on the device: a captured graph
    reads the current ones."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    lo = tl.load(row_start_ptr)
    hi = tl.load(valid_len_ptr)
    own = tl.load(first_slot_ptr) + row % queries
    for start in range(0, Tk, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)[None, :]
        hidden = (row < n_rows) & (j < Tk) & ((j < lo) | (j >= hi)) & (j != own)
        tl.store(s_ptr + row * stride_row + j, tl.full((ROWS, BLOCK_N), float("-inf"), tl.float32), mask=hidden)


def mask_scores(scores: torch.Tensor, row_start: torch.Tensor, first_slot: torch.Tensor,
                valid_len: torch.Tensor) -> torch.Tensor:
    """Hide what query i of one batch row must not see: -inf in place on its fp32 scores (..., Tq, Tk)
    for keys outside [row_start, valid_len) other than its own slot first_slot + i. The three
    counters are int32 (1,) device tensors, read when the kernel runs (inside a replayed graph too)."""
    rows = launch_contracts.fp32_rows(scores, "mask_scores")
    queries, keys = scores.shape[-2:]
    block = min(triton.next_power_of_2(keys), 4096)
    per_program = rows_per_program(rows.shape[0], block)
    mask_scores_kernel[(triton.cdiv(rows.shape[0], per_program),)](
        rows, row_start, first_slot, valid_len, rows.shape[0], queries, keys, rows.stride(0),
        BLOCK_N=block, ROWS=per_program)
    return scores


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


if __name__ == "__main__":  # the self-check: the glue's cases of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))
