"""The fast path's decoder attention inputs. For one new token: RMSNorm, the q|k|v GEMV, RoPE and the
KV-cache write in one launch (qkv_rope_gemv_kernel), where the course path runs rmsnorm_kernel,
linear_kernel_tf32, apply_rope_kernel and glue.kv_cache_write_kernel. For a prompt (or a batch):
the RMSNorm-prologue GEMM, then RoPE and the cache write in one launch (rope_qkv_to_cache_kernel).

Self-check: python -m glm_asr_triton_example.fast_rope  (without a GPU: the Triton interpreter)
"""


import torch
import triton
import triton.language as tl

from glm_asr_course.runtimes.triton_helpers import (INTERPRET, pdl_options, release_consumer, round_to,
                                                    rows_per_program, wait_for_producer)

from .fast_linear import gemv_rows, linear, one_row_gemv_config

# ---------------------------------------------------------------------------------------------
# RoPE and the KV-cache write fused: the prefill's (and any batch's) path
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
    block_t = rows_per_program(T, (triton.next_power_of_2(num_q_heads) + triton.next_power_of_2(num_kv_heads))
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

    cache_pos, kv_start and the tables are read before the PDL wait (inside gemv_rows): no kernel of a
    decode step writes them (the host sets the counters before the step), and read there their round
    trips overlap the previous kernel's tail instead of following the GEMV.
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
    slot = tl.load(cache_pos_ptr)
    pos = tl.maximum(slot - tl.load(kv_start_ptr), 0)
    cos = tl.load(cos_ptr + pos * stride_table + d)
    sin = tl.load(sin_ptr + pos * stride_table + d)
    total = gemv_rows(x_ptr, w_ptr, norm_weight_ptr, rows, rows >= 0, 0, K, K, stride_wn, eps,
                      "rmsnorm", PDL, BLOCK_K, dtype)
    # The Linear's output is rounded to the activation dtype before RoPE sees it, as in transformers.
    x1, x2 = tl.split(tl.permute(tl.reshape(round_to(total, dtype), (2, BLOCK_P)), (1, 0)))
    if head < N_Q_HEADS + N_KV_HEADS:
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
    rope_qkv_into_cache. precision: "tf32" or "ieee" for fp32 operands.
    """
    B, T = q_out.shape[:2]
    if B * T != 1 or rotary_dim != head_dim or head_dim != triton.next_power_of_2(head_dim):
        qkv = linear(x, qkv_weight, rms_norm=(norm_weight, eps), precision=precision).view(B, T, -1)
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
# Self-check: python -m glm_asr_triton_example.fast_rope  (without a GPU: the Triton interpreter)
# --------------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck
    from glm_asr_course.reference.torch_ops import rope as torch_rope
    from glm_asr_course.reference.torch_ops import rope_tables as torch_rope_tables

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
