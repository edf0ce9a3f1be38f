"""Provided cuTile kernels of the course path that are not course work: data movement and the few bits
of arithmetic that hold the model together. Each sits above its launcher.

    residual_add_kernel / residual_add   x += y in place (the residual stream)
    mul_kernel / mul                     out = a * b (SwiGLU: silu(gate) * up)
    embed_tokens_kernel / embed_tokens   token embeddings, audio placeholders replaced by audio rows
    token_positions_kernel / token_positions
                                         RoPE positions of new tokens: cache slot minus left padding
    kv_cache_write_kernel / write_kv_cache
                                         k and v heads of a fused QKV output into the KV cache
    mask_scores_kernel / mask_scores     -inf on the attention scores of keys a query must not see
                                         (left padding, cache slots past the live length)
    ban_ids_kernel, argmax_kernel / argmax_rows
                                         greedy decoding's argmax, eos banned while a device flag says so

The counters a decode step reads (the first new token's cache slot, the live cache length, the eos
ban) stay on the device and are read by the kernels, so one captured CUDA graph serves every step.
Like the course kernels, each computes in fp32 and rounds once where torch rounds.

Self-check: python glm_asr_cutile_example/glue.py  (without a GPU: the cuTile emulator)
"""


import torch

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.cutile import ct, launch
from glm_asr_course.runtimes.tile_helpers import (ELEMENTWISE_BLOCK, NEG_INF, TILE_ELEMENTS, ZERO, cdiv,
                                                  next_power_of_2, rows_per_block)

# Above any vocabulary index: loses every "lowest index" contest of the argmax.
NO_INDEX = 2 ** 31 - 1


# ---------------------------------------------------------------------------------------------
# Elementwise: residual add, product
# ---------------------------------------------------------------------------------------------


@ct.kernel
def residual_add_kernel(x, y, BLOCK: ct.Constant[int]):
    """x += y over flat arrays: one array is both read and written, so nothing aliases."""
    block = ct.bid(0)
    a = ct.astype(ct.load(x, (block,), (BLOCK,), padding_mode=ZERO), ct.float32)
    b = ct.astype(ct.load(y, (block,), (BLOCK,), padding_mode=ZERO), ct.float32)
    ct.store(x, (block,), ct.astype(a + b, x.dtype))


@ct.kernel
def mul_kernel(a, b, out, BLOCK: ct.Constant[int]):
    block = ct.bid(0)
    x = ct.astype(ct.load(a, (block,), (BLOCK,), padding_mode=ZERO), ct.float32)
    y = ct.astype(ct.load(b, (block,), (BLOCK,), padding_mode=ZERO), ct.float32)
    ct.store(out, (block,), ct.astype(x * y, out.dtype))


def _flat_pair(name: str, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    launch_contracts.same_shape(name, a, b)
    return a.view(-1), b.view(-1)


def residual_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x += y (rounded once to x's dtype), in place; returns x."""
    flat_x, flat_y = _flat_pair("residual_add", x, y)
    launch((cdiv(flat_x.numel(), ELEMENTWISE_BLOCK),), residual_add_kernel, flat_x, flat_y, ELEMENTWISE_BLOCK)
    return x


def mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a * b, rounded once to the operands' dtype, as a new tensor."""
    flat_a, flat_b = _flat_pair("mul", a, b)
    out = torch.empty_like(a)
    launch((cdiv(flat_a.numel(), ELEMENTWISE_BLOCK),), mul_kernel, flat_a, flat_b, out.view(-1), ELEMENTWISE_BLOCK)
    return out


# ---------------------------------------------------------------------------------------------
# Embedding gather
# ---------------------------------------------------------------------------------------------


@ct.kernel
def embed_tokens_kernel(ids, audio_index, table, audio, out, ROWS: ct.Constant[int], BLOCK_H: ct.Constant[int]):
    """out[m] = audio[audio_index[m]] where audio_index[m] >= 0, else table[ids[m]]; ROWS rows by
    BLOCK_H columns per block. Rows and columns are data, so the reads are gathers; each row reads
    only the source it needs (the other gather is masked off)."""
    block, block_h = ct.bid(0), ct.bid(1)
    token = ct.astype(ct.load(ids, (block,), (ROWS,), padding_mode=ZERO), ct.int32)[:, None]
    audio_row = ct.astype(ct.load(audio_index, (block,), (ROWS,), padding_mode=ZERO), ct.int32)[:, None]
    cols = (block_h * BLOCK_H + ct.arange(BLOCK_H, dtype=ct.int32))[None, :]
    from_audio = ct.broadcast_to(audio_row >= 0, (ROWS, BLOCK_H))
    text_values = ct.gather(table, (token, cols), mask=ct.broadcast_to(audio_row < 0, (ROWS, BLOCK_H)))
    audio_values = ct.gather(audio, (audio_row, cols), mask=from_audio)
    ct.store(out, (block, block_h), ct.astype(ct.where(from_audio, audio_values, text_values), out.dtype))


def embed_tokens(input_ids: torch.Tensor, table: torch.Tensor, audio_embeds: torch.Tensor,
                 audio_index: torch.Tensor) -> torch.Tensor:
    """out[m] = audio_embeds[audio_index[m]] if audio_index[m] >= 0 else table[input_ids[m]].

    input_ids, audio_index: int64 (M,). table: (V, H). audio_embeds: (A, H), A may be 0.
    Returns (M, H) in table.dtype. Indices are not bounds-checked.
    """
    M = input_ids.shape[0]
    H = table.shape[1]
    out = torch.empty((M, H), dtype=table.dtype, device=table.device)
    # With no audio rows every audio_index is -1: the table stands in as a valid, never-read array.
    audio = audio_embeds if audio_embeds.numel() > 0 else table
    block_h = min(next_power_of_2(H), 1024)
    rows = rows_per_block(M, block_h)
    launch((cdiv(M, rows), cdiv(H, block_h)), embed_tokens_kernel, input_ids, audio_index, table, audio, out,
           rows, block_h)
    return out


# ---------------------------------------------------------------------------------------------
# Positions and the KV cache
# ---------------------------------------------------------------------------------------------


@ct.kernel
def token_positions_kernel(first_slot, row_start, positions, BLOCK_T: ct.Constant[int]):
    """positions[b, t] = max(first_slot + t - row_start[b], 0): transformers numbers the real tokens of
    a left-padded row from 0; the padding tokens' (negative) positions are clamped, their keys are
    masked anyway."""
    block_t, b = ct.bid(0), ct.bid(1)
    t = block_t * BLOCK_T + ct.arange(BLOCK_T, dtype=ct.int32)
    first = ct.load(first_slot, (0,), (1,))
    start = ct.load(row_start, (b,), (1,))
    ct.store(positions, (b, block_t), ct.reshape(ct.maximum(first + t - start, 0), (1, BLOCK_T)))


def token_positions(first_slot: torch.Tensor, row_start: torch.Tensor, tokens: int) -> torch.Tensor:
    """(B, tokens) int32 positions of tokens at cache slots first_slot + t of each row b, whose real
    tokens start at slot row_start[b]. first_slot: int32 (1,), row_start: int32 (B,), both on the
    device (a captured graph reads the current values)."""
    batch = row_start.shape[0]
    positions = torch.empty((batch, tokens), dtype=torch.int32, device=row_start.device)
    block_t = min(next_power_of_2(tokens), TILE_ELEMENTS)
    launch((cdiv(tokens, block_t), batch), token_positions_kernel, first_slot, row_start, positions, block_t)
    return positions


@ct.kernel
def kv_cache_write_kernel(k, v, k_cache, v_cache, first_slot, BLOCK_T: ct.Constant[int],
                          BLOCK_H: ct.Constant[int], BLOCK_D: ct.Constant[int]):
    """k_cache[b, h, first_slot + t] = k[b, t, h] and the same for v: token-major heads of the fused
    QKV output into the head-major cache. The cache seen through a slice that starts at first_slot
    and is as long as the new tokens, so the stores' edge drops the padding tokens of the tile."""
    block_t, b = ct.bid(0), ct.bid(1)
    first = ct.load(first_slot, (0,), ())
    tile = (1, BLOCK_T, BLOCK_H, BLOCK_D)
    _heads_into_cache(k, k_cache, b, block_t, first, tile)
    _heads_into_cache(v, v_cache, b, block_t, first, tile)


def _heads_into_cache(source, cache, b, block_t, first, tile):
    """One (1, BLOCK_T, BLOCK_H, BLOCK_D) tile of token-major heads, stored head-major (tile code)."""
    heads = ct.permute(ct.load(source, (b, block_t, 0, 0), tile, padding_mode=ZERO), (0, 2, 1, 3))
    ct.store(cache.slice(2, first, first + source.shape[1]), (b, 0, block_t, 0), heads)


def write_kv_cache(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   first_slot: torch.Tensor) -> None:
    """Copy k, v (B, T, Hkv, D) (views into the fused QKV output) to k_cache, v_cache (B, Hkv, Tmax, D)
    at slots first_slot .. first_slot + T - 1. first_slot: int32 (1,) on the device; the caller sizes
    the cache (first_slot + T <= Tmax)."""
    B, T, H, D = launch_contracts.write_kv_cache(k, v, k_cache, v_cache)
    block_h, block_d = next_power_of_2(H), next_power_of_2(D)
    block_t = rows_per_block(T, block_h * block_d)
    launch((cdiv(T, block_t), B), kv_cache_write_kernel, k, v, k_cache, v_cache, first_slot,
           block_t, block_h, block_d)


# ---------------------------------------------------------------------------------------------
# Attention masks on materialised scores
# ---------------------------------------------------------------------------------------------


@ct.kernel
def mask_scores_kernel(s, row_start, first_slot, valid_len, queries, ROWS: ct.Constant[int],
                       BLOCK_N: ct.Constant[int]):
    """Rows r of the scores s (n_rows, Tk), query i = r % queries: keys j outside [row_start,
    valid_len) become -inf, except the query's own slot first_slot + i, so that a left-padding query
    still sees one key (itself) and its softmax stays finite."""
    block = ct.bid(0)
    rows = block * ROWS + ct.arange(ROWS, dtype=ct.int32)
    own = (ct.load(first_slot, (0,), (1,)) + rows % queries)[:, None]
    lo = ct.load(row_start, (0,), (1,))[:, None]
    hi = ct.load(valid_len, (0,), (1,))[:, None]
    for j in range(ct.num_tiles(s, 1, (ROWS, BLOCK_N))):
        keys = (j * BLOCK_N + ct.arange(BLOCK_N, dtype=ct.int32))[None, :]
        hidden = ((keys < lo) | (keys >= hi)) & (keys != own)
        scores = ct.load(s, (block, j), (ROWS, BLOCK_N), padding_mode=ZERO)
        ct.store(s, (block, j), ct.where(hidden, float("-inf"), scores))


def mask_scores(scores: torch.Tensor, row_start: torch.Tensor, first_slot: torch.Tensor,
                valid_len: torch.Tensor) -> torch.Tensor:
    """-inf in place on one batch row's fp32 scores (..., Tq, Tk) where key j is outside [row_start,
    valid_len) and is not query i's own slot first_slot + i (int32 (1,) device tensors, so that a
    captured graph reads the current ones)."""
    rows = launch_contracts.fp32_rows(scores, "mask_scores")
    queries, keys = scores.shape[-2:]
    block = min(next_power_of_2(keys), 1024)
    per_block = rows_per_block(rows.shape[0], block)
    launch((cdiv(rows.shape[0], per_block),), mask_scores_kernel, rows, row_start, first_slot, valid_len,
           queries, per_block, block)
    return scores


# ---------------------------------------------------------------------------------------------
# Greedy decoding: argmax over the vocabulary with optional banned ids
# ---------------------------------------------------------------------------------------------


@ct.kernel
def ban_ids_kernel(logits, banned, suppress, BLOCK_BANNED: ct.Constant[int]):
    """logits[row, banned[i]] = -inf for every banned id while suppress[0] != 0 (a device flag: a
    captured graph switches the ban without being recaptured). One block per row scatters into
    those few entries. (Comparing every vocabulary lane with every banned id inside the argmax
    instead made the real compiler run for minutes on the model's 4096-lane tiles.)"""
    row = ct.bid(0)
    slots = ct.arange(BLOCK_BANNED, dtype=ct.int32)
    ids = ct.astype(ct.load(banned, (0,), (BLOCK_BANNED,), padding_mode=ZERO), ct.int32)
    banning = ct.load(suppress, (0,), (1,)) != 0
    ct.scatter(logits, (row, ids), float("-inf"), mask=(slots < banned.shape[0]) & banning)


@ct.kernel
def argmax_kernel(logits, out_ids, BLOCK_V: ct.Constant[int]):
    """out_ids[b] = the lowest index of the largest logit of row b. One block per row sweeps the
    vocabulary in BLOCK_V tiles, keeping the best value and its index."""
    row = ct.bid(0)
    best = ct.full((1, 1), float("-inf"), ct.float32)
    best_index = ct.full((1, 1), NO_INDEX, ct.int32)
    for j in range(ct.num_tiles(logits, 1, (1, BLOCK_V))):
        # Lanes past the vocabulary read -inf: they never hold a finite maximum.
        values = ct.astype(ct.load(logits, (row, j), (1, BLOCK_V), padding_mode=NEG_INF), ct.float32)
        cols = (j * BLOCK_V + ct.arange(BLOCK_V, dtype=ct.int32))[None, :]
        tile_best = ct.max(values, axis=1, keepdims=True)
        tile_index = ct.min(ct.where(values == tile_best, cols, NO_INDEX), axis=1, keepdims=True)
        # Strictly greater: on a tie the earlier tile, i.e. the lower index, keeps the row.
        better = tile_best > best
        best = ct.where(better, tile_best, best)
        best_index = ct.where(better, tile_index, best_index)
    ct.store(out_ids, (row,), ct.astype(ct.reshape(best_index, (1,)), ct.int64))


def argmax_rows(logits: torch.Tensor, banned_ids: torch.Tensor, suppress: torch.Tensor,
                out_ids: torch.Tensor) -> torch.Tensor:
    """out_ids[b] = argmax(logits[b]) (lowest index on ties), skipping banned_ids while suppress[0] != 0.

    logits: (B, V), last dim contiguous; while suppress[0] != 0 its banned entries are overwritten
    with -inf. banned_ids: int64 (nb,), nb >= 1. suppress: int32 (1,) on the device. out_ids: int64
    (B,). Returns out_ids.
    """
    n_rows, vocab = logits.shape
    if banned_ids.numel() == 0 or logits.stride(1) != 1 or out_ids.shape != (n_rows,):
        raise ValueError(f"argmax_rows: logits {tuple(logits.shape)}, {banned_ids.numel()} banned ids, "
                         f"out_ids {tuple(out_ids.shape)}")
    launch((n_rows,), ban_ids_kernel, logits, banned_ids, suppress, next_power_of_2(banned_ids.numel()))
    launch((n_rows,), argmax_kernel, logits, out_ids, min(next_power_of_2(vocab), 4096))
    return out_ids


if __name__ == "__main__":  # the self-check: the glue's cases of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))
