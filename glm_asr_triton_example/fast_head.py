"""The fast path's greedy head: RMSNorm, lm_head and argmax without writing the logits to memory.

    lm_head_argmax_kernel   logits of BLOCK_V vocabulary rows for up to BLOCK_M hidden states,
                            reduced at once to per-block (max, lowest index holding it)
    greedy_head             rmsnorm_kernel, that kernel, then glue's per-row reduction

Self-check: python -m glm_asr_triton_example.fast_head  (without a GPU: the Triton interpreter)
"""

import torch
import triton
import triton.language as tl

from glm_asr_course.runtimes.triton_helpers import (INTERPRET, dot, fma_dot, pdl_options, release_consumer, round_to,
                                                    wait_for_producer)

from .glue import _banned_args, _block_argmax, _reduce_block_argmax
from .layers import rmsnorm


@triton.jit
def lm_head_argmax_kernel(
    x_ptr, w_ptr, banned_ptr, suppress_ptr, max_ptr, idx_ptr,
    B, V, H, stride_xm, stride_wv, num_banned, n_blocks,
    INPUT_PRECISION: tl.constexpr, PDL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_BANNED: tl.constexpr,
):
    """Logits of BLOCK_V vocabulary rows for BLOCK_M hidden states, reduced at once to per-row
    (max, argmax) partials: the (B, V) logits never reach memory."""
    release_consumer(PDL)
    wait_for_producer(PDL)
    block = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = block * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < B
    v_mask = cols < V
    acc = tl.zeros((BLOCK_M, BLOCK_V), dtype=tl.float32)
    for k_step in range(0, H, BLOCK_K):
        k_mask = offs_k < H - k_step
        x_tile = tl.load(x_ptr + offs_m[:, None] * stride_xm + k_step + offs_k[None, :],
                         mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        w_tile = tl.load(w_ptr + cols[:, None] * stride_wv + k_step + offs_k[None, :],
                         mask=v_mask[:, None] & k_mask[None, :], other=0.0)
        acc = dot(x_tile, tl.trans(w_tile), acc, INPUT_PRECISION)
    # HF's lm_head materialises logits in the activation dtype; rounding the same way makes equal
    # logits equal here too, so ties break as they do there.
    logits = round_to(acc, x_ptr.dtype.element_ty).to(tl.float32)
    block_max, block_idx = _block_argmax(logits, cols, V, banned_ptr, num_banned, suppress_ptr, BLOCK_BANNED)
    tl.store(max_ptr + offs_m * n_blocks + block, block_max, mask=m_mask)
    tl.store(idx_ptr + offs_m * n_blocks + block, block_idx, mask=m_mask)


def _lm_head_config(dtype: torch.dtype, precision: str) -> dict:
    """Weight-streaming tiles for the vocabulary GEMV: 64 vocabulary rows, 512-byte runs of K; 256-byte
    runs for an FMA dot (IEEE fp32), whose operand slices at 512 bytes spill 640 bytes a thread (ptxas
    on sm_90a)."""
    block_k = (256 if fma_dot(dtype, precision) else 512) // dtype.itemsize
    if INTERPRET:  # few, large programs (see _interpreter_linear_config)
        return dict(BLOCK_M=16, BLOCK_V=512, BLOCK_K=512, num_warps=4, num_stages=1)
    return dict(BLOCK_M=16, BLOCK_V=64, BLOCK_K=block_k, num_warps=4, num_stages=4)


def greedy_head(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    lm_head_weight: torch.Tensor,
    banned_ids: torch.Tensor,
    suppress: torch.Tensor,
    out_ids: torch.Tensor,
    *,
    precision: str,
) -> torch.Tensor:
    """out_ids[b] = argmax_v (rmsnorm(x[b]) @ lm_head_weight[v]), lowest index on ties.

    x: (B, H) last hidden states (a strided row view is fine). lm_head_weight: (V, H).
    banned_ids: int64 (nb,), skipped while suppress[0] != 0 (suppress: int32 (1,) on the device, so
    min_new_tokens can flip it inside a captured CUDA graph). out_ids: int64 (B,), returned.
    Three launches: rmsnorm, the fused logits + block argmax, the per-row reduction.
    """
    x_normed = rmsnorm(x, norm_weight, eps)
    B, H = x_normed.shape
    V = lm_head_weight.shape[0]
    cfg = _lm_head_config(x.dtype, precision)
    n_blocks = triton.cdiv(V, cfg["BLOCK_V"])
    partial_max = torch.empty((B, n_blocks), dtype=torch.float32, device=x.device)
    partial_idx = torch.empty((B, n_blocks), dtype=torch.int32, device=x.device)
    banned, num_banned, block_banned = _banned_args(banned_ids, out_ids)
    lm_head_argmax_kernel[(n_blocks, triton.cdiv(B, cfg["BLOCK_M"]))](
        x_normed, lm_head_weight, banned, suppress, partial_max, partial_idx,
        B, V, H, x_normed.stride(0), lm_head_weight.stride(0), num_banned, n_blocks,
        INPUT_PRECISION=precision, BLOCK_BANNED=block_banned, **pdl_options(x.device), **cfg,
    )
    return _reduce_block_argmax(partial_max, partial_idx, out_ids)


# ---------------------------------------------------------------------------------------------
# Self-check: python -m glm_asr_triton_example.fast_head  (without a GPU: the Triton interpreter)
# ---------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.greedy_head_case import chosen_logit_gap, greedy_head_case
    from glm_asr_course.kernels.self_check import SelfCheck

    check = SelfCheck("fast_head.py", INTERPRET)
    case = greedy_head_case(check.on_gpu, check.device, cpu_vocab=300)
    check.check("greedy_head", lambda: greedy_head(case.x, case.norm_weight, case.eps, case.lm_head, case.banned,
                                                   case.suppress, case.out_ids, precision="tf32"),
                case.reference_logits, case.shape, 1e-2, errors=chosen_logit_gap)
    check.finish()


if __name__ == "__main__":
    _self_check()
