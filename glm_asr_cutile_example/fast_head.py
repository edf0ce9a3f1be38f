"""The cuTile fast path's greedy head: RMSNorm, lm_head and argmax without writing the logits to memory.

    lm_head_argmax_kernel   BLOCK_V vocabulary rows of the lm_head GEMV for one hidden state, its
                            RMSNorm in the prologue, reduced at once to the block's (max, lowest
                            index holding it), eos banned while a device flag says so
    argmax_reduce_kernel    the blocks' partials of each row to its id
    greedy_head             both, for the last hidden state of every row

Self-check: python -m glm_asr_cutile_example.fast_head  (without a GPU: the cuTile emulator)
"""

import torch

from glm_asr_course.runtimes.cutile import ct, launch
from glm_asr_course.runtimes.tile_helpers import EMULATED, NEG_INF, ZERO, as_rows, cdiv, next_power_of_2, round_as

from .fast_linear import RMSNORM, gemv_rows, stats_block

# Above any vocabulary index: loses every "lowest index" contest.
NO_INDEX = 2 ** 31 - 1


@ct.kernel
def lm_head_argmax_kernel(x, lm_head, norm_weight, banned, suppress, part_max, part_index, eps,
                          BLOCK_V: ct.Constant[int], BLOCK_K: ct.Constant[int], BLOCK_BANNED: ct.Constant[int],
                          BLOCK_STATS: ct.Constant[int]):
    """Logits of vocabulary tile j for row r, rmsnorm(x[r]) . lm_head[v], reduced to
    part_max[r, j] / part_index[r, j]: the largest logit and the lowest id holding it.

    x: (R, H) last hidden states; lm_head: (V, H); banned: int64 (nb,) ids skipped while suppress[0]
    != 0 (int32, on the device: a captured graph switches the ban without being recaptured).
    Grid (cdiv(V, BLOCK_V), R)."""
    ct.grid_dependency_control_launch_dependents()
    vocab_tile = ct.bid(0)
    row = ct.bid(1)
    logits, _ = gemv_rows(x, norm_weight, row, eps, lm_head, vocab_tile, lm_head, vocab_tile, RMSNORM, False,
                          BLOCK_V, BLOCK_K, BLOCK_STATS)
    # HF's lm_head materialises logits in the activation dtype: rounding the same way makes equal
    # logits equal here too, so ties break as they do there.
    logits = round_as(logits, x.dtype)
    cols = vocab_tile * BLOCK_V + ct.arange(BLOCK_V, dtype=ct.int32)
    slots = ct.arange(BLOCK_BANNED, dtype=ct.int32)
    banned_ids = ct.astype(ct.load(banned, (0,), (BLOCK_BANNED,), padding_mode=ZERO), ct.int32)
    # Lanes past the banned list read 0 and must not ban id 0.
    banned_ids = ct.where(slots < banned.shape[0], banned_ids, NO_INDEX)
    is_banned = ct.max(ct.astype(cols[:, None] == banned_ids[None, :], ct.int32), axis=1) > 0
    banning = ct.load(suppress, (0,), ()) != 0
    excluded = (cols >= lm_head.shape[0]) | (is_banned & banning)
    logits = ct.where(excluded[None, :], float("-inf"), logits)
    best = ct.max(logits, axis=1, keepdims=True)
    holders = ct.where((logits == best) & (cols < lm_head.shape[0])[None, :], cols[None, :], NO_INDEX)
    ct.store(part_max, (row, vocab_tile), ct.reshape(best, (1, 1)))
    ct.store(part_index, (row, vocab_tile), ct.min(holders, axis=1, keepdims=True))


@ct.kernel
def argmax_reduce_kernel(part_max, part_index, out_ids, BLOCK: ct.Constant[int]):
    """out_ids[r] = the lowest id among the blocks of row r that reach the row's maximum: each block
    reported its lowest maximising id, so that is torch.argmax's answer. Grid (R,)."""
    ct.grid_dependency_control_launch_dependents()
    ct.grid_dependency_control_wait()
    row = ct.bid(0)
    values = ct.load(part_max, (row, 0), (1, BLOCK), padding_mode=NEG_INF)
    indices = ct.load(part_index, (row, 0), (1, BLOCK), padding_mode=ZERO)
    lanes = ct.arange(BLOCK, dtype=ct.int32)[None, :]
    best = ct.max(values, axis=1, keepdims=True)
    winners = ct.where((values == best) & (lanes < part_max.shape[1]), indices, NO_INDEX)
    ct.store(out_ids, (row,), ct.astype(ct.reshape(ct.min(winners, axis=1), (1,)), ct.int64))


def _head_tiles(dtype: torch.dtype) -> tuple[int, int]:
    """(BLOCK_V, BLOCK_K): 64 vocabulary rows x 512 bytes per step on a GPU (the sweep's best on an
    H100, docs/performance.md). The emulator pays per block,
    not per element, so it takes larger tiles, though no larger than the compile check (which
    compiles the emulated launches for the GPU) handles in seconds."""
    if EMULATED:
        return 128, 128
    return 64, 512 // dtype.itemsize


def greedy_head(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, lm_head_weight: torch.Tensor,
                banned_ids: torch.Tensor, suppress: torch.Tensor, out_ids: torch.Tensor, *, tiles=None) -> torch.Tensor:
    """out_ids[r] = argmax_v(rmsnorm(x[r]) . lm_head_weight[v]), lowest id on ties, banned_ids
    skipped while suppress[0] != 0.

    x: (R, H) rows (a strided row view such as hidden[:, -1] is fine); lm_head_weight: (V, H);
    banned_ids: int64 (nb,), nb >= 1; suppress: int32 (1,) on the device; out_ids: int64 (R,).
    Two launches; the logits never reach memory. Returns out_ids.
    """
    rows = as_rows(x)
    R, H = rows.shape
    V = lm_head_weight.shape[0]
    if lm_head_weight.shape[1] != H or rows.stride(1) != 1 or banned_ids.numel() == 0 or out_ids.shape != (R,):
        raise ValueError(f"greedy_head: x {tuple(x.shape)}, lm_head {tuple(lm_head_weight.shape)}, "
                         f"{banned_ids.numel()} banned ids, out_ids {tuple(out_ids.shape)}")
    block_v, block_k = tiles or _head_tiles(x.dtype)
    n_blocks = cdiv(V, block_v)
    part_max = torch.empty((R, n_blocks), dtype=torch.float32, device=x.device)
    part_index = torch.empty((R, n_blocks), dtype=torch.int32, device=x.device)
    launch((n_blocks, R), lm_head_argmax_kernel, rows, lm_head_weight, norm_weight, banned_ids, suppress, part_max,
           part_index, float(eps), block_v, block_k, next_power_of_2(banned_ids.numel()), stats_block(H), pdl=True)
    launch((R,), argmax_reduce_kernel, part_max, part_index, out_ids, next_power_of_2(n_blocks), pdl=True)
    return out_ids


# ---------------------------------------------------------------------------------------------
# Self-check: python -m glm_asr_cutile_example.fast_head  (without a GPU: the cuTile emulator)
# ---------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.greedy_head_case import chosen_logit_gap, greedy_head_case
    from glm_asr_course.kernels.self_check import SelfCheck

    check = SelfCheck("fast_head.py", EMULATED, cpu_runner="cuTile emulator", decorator="@ct.kernel")
    case = greedy_head_case(check.on_gpu, check.device, cpu_vocab=1300)
    check.check("greedy_head", lambda: greedy_head(case.x, case.norm_weight, case.eps, case.lm_head, case.banned,
                                                   case.suppress, case.out_ids),
                case.reference_logits, case.shape, 1e-2, errors=chosen_logit_gap, graph=check.on_gpu)
    check.finish()


if __name__ == "__main__":
    _self_check()
