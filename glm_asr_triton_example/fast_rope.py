"""The fast path's decoder attention inputs for one new token: RMSNorm, the q|k|v GEMV, RoPE and the
KV-cache write in one launch (qkv_rope_gemv_kernel), where the course path runs rmsnorm_kernel,
linear_kernel_tf32 and glue.rope_qkv_to_cache_kernel.

Self-check: python glm_asr_triton_example/fast_rope.py  (without a GPU: the Triton interpreter)
"""


import torch

if __name__ == "__main__":  # run as a script: python glm_asr_triton_example/fast_rope.py
    from _script import package_of

    __package__ = package_of(__file__)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._triton_compat import INTERPRET, pdl_options, release_consumer, round_to  # noqa: E402
from .fast_linear import gemv_rows, linear, one_row_gemv_config  # noqa: E402
from .glue import _rotate, rope_qkv_into_cache  # noqa: E402


@triton.jit
def qkv_rope_gemv_kernel(x_ptr, w_ptr, norm_weight_ptr, eps, cos_ptr, sin_ptr, cache_pos_ptr, kv_start_ptr,
                         q_out_ptr, k_cache_ptr, v_cache_ptr, K, stride_wn, stride_table,
                         stride_kc_h, stride_kc_t, stride_vc_h, stride_vc_t, cache_len_max,
                         N_Q_HEADS: tl.constexpr, N_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """BLOCK_P rotation pairs (d, d + HEAD_DIM/2) of one head: their 2 * BLOCK_P weight rows go
    through the GEMV together, so the epilogue holds both halves of every pair it rotates.

    Grid: ((N_Q_HEADS + 2 * N_KV_HEADS) * HEAD_DIM / 2 / BLOCK_P,). Heads are q, then k, then v (the
    fused weight's row order); q goes to q_out (Hq, D), k and v to the cache slot cache_pos[0].
    """
    release_consumer(PDL)
    HALF: tl.constexpr = HEAD_DIM // 2
    pid = tl.program_id(0)
    head = pid // (HALF // BLOCK_P)
    first_pair = (pid % (HALF // BLOCK_P)) * BLOCK_P
    d = first_pair + tl.arange(0, BLOCK_P)
    # Rows [x1 rows | x2 rows]: pair i sits at i and BLOCK_P + i.
    r = tl.arange(0, 2 * BLOCK_P)
    rows = head * HEAD_DIM + first_pair + r % BLOCK_P + (r // BLOCK_P) * HALF
    dtype = q_out_ptr.dtype.element_ty
    total = gemv_rows(x_ptr, w_ptr, norm_weight_ptr, rows, rows >= 0, 0, K, K, stride_wn, eps,
                      "rmsnorm", PDL, BLOCK_K, dtype)
    # The Linear's output is rounded to the activation dtype before RoPE sees it, as in transformers.
    x1, x2 = tl.split(tl.permute(tl.reshape(round_to(total, dtype), (2, BLOCK_P)), (1, 0)))
    slot = tl.load(cache_pos_ptr)
    if head < N_Q_HEADS + N_KV_HEADS:
        pos = tl.maximum(slot - tl.load(kv_start_ptr), 0)
        cos = tl.load(cos_ptr + pos * stride_table + d)
        sin = tl.load(sin_ptr + pos * stride_table + d)
        out1, out2 = _rotate(x1, x2, cos, sin)
        if head < N_Q_HEADS:
            dst = q_out_ptr + head * HEAD_DIM + d
            tl.store(dst, out1)
            tl.store(dst + HALF, out2)
        elif slot < cache_len_max:
            dst = k_cache_ptr + (head - N_Q_HEADS) * stride_kc_h + slot * stride_kc_t + d
            tl.store(dst, out1)
            tl.store(dst + HALF, out2)
    elif slot < cache_len_max:
        dst = v_cache_ptr + (head - N_Q_HEADS - N_KV_HEADS) * stride_vc_h + slot * stride_vc_t + d
        tl.store(dst, x1)
        tl.store(dst + HALF, x2)


def project_qkv_into_cache(x: torch.Tensor, qkv_weight: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                           num_q_heads: int, num_kv_heads: int, head_dim: int,
                           cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
                           q_out: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           cache_pos: torch.Tensor, kv_start: torch.Tensor, *, precision: str) -> None:
    """The decoder layer's attention inputs: h = rmsnorm(x); q|k|v = h @ qkv_weight^T; rotated q into
    q_out (B, T, Hq, D), rotated k and raw v into the caches at slot cache_pos + t.

    x: (B*T, H) rows. One token of one row with the whole head rotated (decode at batch 1) is one
    launch, qkv_rope_gemv_kernel (a power-of-two head); otherwise the RMSNorm-prologue linear() and
    glue.rope_qkv_into_cache. precision: "tf32" or "ieee" for fp32 operands.
    """
    B, T = q_out.shape[:2]
    if B * T != 1 or rotary_dim != head_dim or head_dim != triton.next_power_of_2(head_dim):
        qkv = linear(x, qkv_weight, rms_norm=(norm_weight, eps), input_precision=precision).view(B, T, -1)
        rope_qkv_into_cache(qkv, num_q_heads, num_kv_heads, head_dim, cos, sin, rotary_dim, q_out, k_cache,
                            v_cache, cache_pos, kv_start)
        return
    K = x.shape[-1]
    half = head_dim // 2
    assert qkv_weight.shape == ((num_q_heads + 2 * num_kv_heads) * head_dim, K) and qkv_weight.stride(1) == 1
    assert x.is_contiguous() and q_out.is_contiguous() and k_cache.stride(3) == v_cache.stride(3) == 1
    assert cos.shape[1] == half and sin.stride() == cos.stride()
    # The one-row GEMV's tile from the linear table (its BLOCK_N rows as BLOCK_N / 2 pairs, at most a
    # head's worth); the whole K in one program, so no split.
    tile = one_row_gemv_config(qkv_weight.shape[0], K, x.dtype, x.device)
    block_p = min(tile["BLOCK_N"] // 2, half)
    launch = {key: tile[key] for key in ("num_warps", "num_stages") if key in tile}
    qkv_rope_gemv_kernel[((num_q_heads + 2 * num_kv_heads) * half // block_p,)](
        x, qkv_weight, norm_weight, eps, cos, sin, cache_pos, kv_start, q_out, k_cache, v_cache,
        K, qkv_weight.stride(0), cos.stride(0),
        k_cache.stride(1), k_cache.stride(2), v_cache.stride(1), v_cache.stride(2), k_cache.shape[2],
        N_Q_HEADS=num_q_heads, N_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_P=block_p, BLOCK_K=tile["BLOCK_K"],
        enable_fp_fusion=False, **pdl_options(x.device), **launch,
    )


# --------------------------------------------------------------------------------------------------
# Self-check: python glm_asr_triton_example/fast_rope.py  (without a GPU: the Triton interpreter)
# --------------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_common.course.self_check import SelfCheck

    from glm_asr_common.reference.torch_ops import rope as torch_rope, rope_tables as torch_rope_tables

    check = SelfCheck("fast_rope.py", INTERPRET)
    on_gpu, dev = check.on_gpu, check.device
    torch.manual_seed(0)
    Hq, Hkv, D, Tmax = 16, 4, 128, (1024 if on_gpu else 32)
    cos, sin = torch_rope_tables(torch.arange(Tmax, device=dev), 128, 10000.0)
    H, eps, slot = (2048 if on_gpu else 96), 1e-5, 7
    x = torch.randn(1, H, device=dev, dtype=torch.bfloat16) * 3
    norm_weight = torch.randn(H, device=dev, dtype=torch.bfloat16)
    weight = (torch.randn((Hq + 2 * Hkv) * D, H, device=dev) * H ** -0.5).to(torch.bfloat16)
    q1 = torch.empty(1, 1, Hq, D, device=dev, dtype=torch.bfloat16)
    k1, v1 = (torch.zeros(1, Hkv, Tmax, D, device=dev, dtype=torch.bfloat16) for _ in range(2))
    pos1 = torch.tensor([slot], dtype=torch.int32, device=dev)
    start1 = torch.zeros(1, dtype=torch.int32, device=dev)

    def fused():
        project_qkv_into_cache(x, weight, norm_weight, eps, Hq, Hkv, D, cos, sin, 128, q1, k1, v1, pos1, start1,
                               precision="tf32")
        return q1

    normed = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16)
    q_lin = ((norm_weight * normed).float() @ weight[: Hq * D].float().T).to(torch.bfloat16).view(1, 1, Hq, D)
    check.check("qkv_rope_gemv_kernel", fused,
                lambda: torch_rope(q_lin, cos[slot:slot + 1][None], sin[slot:slot + 1][None], 128),
                f"1x{H}->{(Hq + 2 * Hkv) * D} bf16", 1e-2, graph=on_gpu)
    check.finish()


if __name__ == "__main__":
    _self_check()
