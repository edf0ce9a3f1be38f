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

from .fast_attention import LOG2E, decode_in_one_split, decode_keys_step, decode_output
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
                         valid_len_ptr, arrivals_ptr, attn_out_ptr, qk_scale,
                         N_Q_HEADS: tl.constexpr, N_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr, ATTEND: tl.constexpr,
                         BLOCK_KEYS: tl.constexpr, BLOCK_G: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                         PDL: tl.constexpr):
    """BLOCK_P rotation pairs (d, d + HEAD_DIM/2) of one head: their 2 * BLOCK_P weight rows go
    through the GEMV together, so the epilogue holds both halves of every pair it rotates.

    Grid: ((N_Q_HEADS + 2 * N_KV_HEADS) * HEAD_DIM / 2 / BLOCK_P [+ N_KV_HEADS with ATTEND],). Heads are
    q, then k, then v (the fused weight's row order); q goes to q_out (Hq, D), k and v to the cache slot
    cache_pos[0].

    ATTEND: N_KV_HEADS more programs, after the projection's, compute the step's attention into
    attn_out (Hq, D): one program per kv head, as decode_attention's single split does, without that
    launch (_attend_when_projected). What it saves is the launch, not GPU time. Measured on an H200
    (docs/performance.md, 2026-11-27 g): a step replayed back to back takes 1,058 us against 1,060; as the
    host loop runs it (token read back, counters copied in, graph launched) 1,102 against 1,131, its graph
    having 28 fewer kernel nodes.

    cache_pos, kv_start, valid_len and the tables are read before the PDL wait: no kernel of a decode step
    writes them (the host sets the counters before the step), and read there their round trips overlap the
    previous kernel's tail instead of following the GEMV.
    """
    release_consumer(PDL)
    HALF: tl.constexpr = HEAD_DIM // 2
    GROUP: tl.constexpr = N_Q_HEADS // N_KV_HEADS
    PROJECTION_PROGRAMS: tl.constexpr = (N_Q_HEADS + 2 * N_KV_HEADS) * (HALF // BLOCK_P)
    pid = tl.program_id(0)
    slot = tl.load(cache_pos_ptr)
    if pid < PROJECTION_PROGRAMS:
        head = pid // (HALF // BLOCK_P)
        first_pair = (pid % (HALF // BLOCK_P)) * BLOCK_P
        d = first_pair + tl.arange(0, BLOCK_P)
        # Rows [x1 rows | x2 rows]: pair i sits at i and BLOCK_P + i.
        r = tl.arange(0, 2 * BLOCK_P)
        rows = head * HEAD_DIM + first_pair + r % BLOCK_P + (r // BLOCK_P) * HALF
        dtype = q_out_ptr.dtype.element_ty
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
        if ATTEND:
            # Count this program's rows in for its kv head's attention program. The barrier puts every
            # thread's stores before the count; the release makes them visible with it.
            tl.debug_barrier()
            group = tl.where(head < N_Q_HEADS, head // GROUP, (head - N_Q_HEADS) % N_KV_HEADS)
            tl.atomic_add(arrivals_ptr + group, 1, sem="release")
    elif ATTEND:
        hk = pid - PROJECTION_PROGRAMS
        _attend_when_projected(q_out_ptr + hk * GROUP * HEAD_DIM, k_cache_ptr + hk * stride_kc_h,
                               v_cache_ptr + hk * stride_vc_h, attn_out_ptr + hk * GROUP * HEAD_DIM,
                               arrivals_ptr + hk, slot, tl.load(kv_start_ptr), tl.load(valid_len_ptr),
                               qk_scale, stride_kc_t, stride_vc_t,
                               EXPECTED=(GROUP + 2) * (HALF // BLOCK_P), GROUP=GROUP, HEAD_DIM=HEAD_DIM,
                               BLOCK_KEYS=BLOCK_KEYS, BLOCK_G=BLOCK_G, INPUT_PRECISION=INPUT_PRECISION, PDL=PDL)


@triton.jit
def _attend_when_projected(q_ptr, k_rows, v_rows, out_ptr, arrivals_ptr, slot, lo, hi, qk_scale,
                           stride_kt, stride_vt, EXPECTED: tl.constexpr, GROUP: tl.constexpr,
                           HEAD_DIM: tl.constexpr, BLOCK_KEYS: tl.constexpr, BLOCK_G: tl.constexpr,
                           INPUT_PRECISION: tl.constexpr, PDL: tl.constexpr):
    """Attention of one kv head's GROUP query heads (rows of q_ptr, (GROUP, HEAD_DIM)) over cache slots
    [lo, hi), into out_ptr; the step's q rows and its k and v rows at ``slot`` come from the projection
    programs of the same launch.

    The first block of older keys is loaded before anything else: the cache holds them from earlier
    steps. The program then waits until all EXPECTED projection programs of this kv head have counted
    themselves in at *arrivals_ptr, and loads only what they wrote: q and the new k and v rows. It
    resets the count for the next launch. Waiting on programs of the same launch cannot deadlock: the
    programs waited for wait on nothing of this launch, and the N_KV_HEADS waiting programs hold only as
    many of the GPU's program slots. The interpreter runs programs in order; these come last in the grid,
    so it has finished every program they wait for. BLOCK_G pads the group to the 16 rows a tensor-core
    dot needs.
    """
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, HEAD_DIM)
    first = (lo // BLOCK_KEYS) * BLOCK_KEYS
    n = first + tl.arange(0, BLOCK_KEYS)
    older = (n >= lo) & (n < hi) & (n != slot)
    k = tl.load(k_rows + n[:, None] * stride_kt + d[None, :], mask=older[:, None], other=0.0)
    v = tl.load(v_rows + n[:, None] * stride_vt + d[None, :], mask=older[:, None], other=0.0)
    wait_for_producer(PDL)
    arrived = tl.atomic_add(arrivals_ptr, 0, sem="acquire")
    while arrived < EXPECTED:
        arrived = tl.atomic_add(arrivals_ptr, 0, sem="acquire")
    tl.atomic_xchg(arrivals_ptr, 0, sem="relaxed")
    # Every thread's loads below follow the acquire (made by one thread).
    tl.debug_barrier()
    # ".cg": from L2, where the other programs' stores are; this SM's L1 is not kept coherent with them.
    q = tl.load(q_ptr + g[:, None] * HEAD_DIM + d[None, :], mask=(g < GROUP)[:, None], other=0.0,
                cache_modifier=".cg")
    new_ok = (slot >= lo) & (slot < hi)
    is_new = (n == slot)[:, None] & new_ok
    k = tl.where(is_new, tl.load(k_rows + slot * stride_kt + d, mask=new_ok, cache_modifier=".cg")[None, :], k)
    v = tl.where(is_new, tl.load(v_rows + slot * stride_vt + d, mask=new_ok, cache_modifier=".cg")[None, :], v)
    m_i = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, HEAD_DIM), dtype=tl.float32)
    if lo < hi:  # at least one visible key: the running max is finite from the first block on
        m_i, l_i, acc = decode_keys_step(q, k, v, (n >= lo) & (n < hi), m_i, l_i, acc, qk_scale, INPUT_PRECISION)
        for start_n in range(first + BLOCK_KEYS, hi, BLOCK_KEYS):
            n = start_n + tl.arange(0, BLOCK_KEYS)
            key_ok = n < hi
            k = tl.load(k_rows + n[:, None] * stride_kt + d[None, :], mask=key_ok[:, None], other=0.0,
                        cache_modifier=".cg")
            v = tl.load(v_rows + n[:, None] * stride_vt + d[None, :], mask=key_ok[:, None], other=0.0,
                        cache_modifier=".cg")
            m_i, l_i, acc = decode_keys_step(q, k, v, key_ok, m_i, l_i, acc, qk_scale, INPUT_PRECISION)
    tl.store(out_ptr + g[:, None] * HEAD_DIM + d[None, :], decode_output(acc, l_i, out_ptr.dtype.element_ty),
             mask=(g < GROUP)[:, None])


def _launch_decode_projection(x, qkv_weight, norm_weight, eps, num_q_heads, num_kv_heads, head_dim, cos, sin,
                              q_out, k_cache, v_cache, cache_pos, kv_start, precision, attend=None):
    """qkv_rope_gemv_kernel over one token; attend: (valid_len, arrivals, scale, out, key block) or None."""
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
    programs = (num_q_heads + 2 * num_kv_heads) * half // block_p
    valid_len, arrivals, scale, out, block_keys = attend or (cache_pos, cache_pos, 1.0, q_out, 16)
    qkv_rope_gemv_kernel[(programs + (num_kv_heads if attend else 0),)](
        x, qkv_weight, norm_weight, eps, cos, sin, cache_pos, kv_start, q_out, k_cache, v_cache,
        K, qkv_weight.stride(0), cos.stride(0),
        k_cache.stride(1), k_cache.stride(2), v_cache.stride(1), v_cache.stride(2), k_cache.shape[2],
        valid_len, arrivals, out, scale * LOG2E,
        N_Q_HEADS=num_q_heads, N_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_P=block_p, BLOCK_K=tile["BLOCK_K"],
        ATTEND=attend is not None, BLOCK_KEYS=block_keys,
        BLOCK_G=max(16, triton.next_power_of_2(num_q_heads // num_kv_heads)), INPUT_PRECISION=precision,
        enable_fp_fusion=False, **pdl_options(x.device), **launch,
    )


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
    if not _one_launch(B, T, head_dim, rotary_dim):
        qkv = linear(x, qkv_weight, rms_norm=(norm_weight, eps), precision=precision).view(B, T, -1)
        rope_qkv_into_cache(qkv, num_q_heads, num_kv_heads, head_dim, cos, sin, rotary_dim, q_out, k_cache,
                            v_cache, cache_pos, kv_start)
        return
    _launch_decode_projection(x, qkv_weight, norm_weight, eps, num_q_heads, num_kv_heads, head_dim, cos, sin,
                              q_out, k_cache, v_cache, cache_pos, kv_start, precision)


def _one_launch(B: int, T: int, head_dim: int, rotary_dim: int) -> bool:
    return B * T == 1 and rotary_dim == head_dim == triton.next_power_of_2(head_dim)


def attends_in_projection(q: torch.Tensor, k_cache: torch.Tensor, rotary_dim: int) -> bool:
    """True when project_qkv_and_attend can take a decode step's attention into the q|k|v launch: one
    token of one row, the whole head rotated, and a cache decode_attention covers with one split."""
    B, T, _, head_dim = q.shape
    return _one_launch(B, T, head_dim, rotary_dim) and decode_in_one_split(k_cache.shape[2], q.dtype)


def project_qkv_and_attend(x: torch.Tensor, qkv_weight: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                           num_q_heads: int, num_kv_heads: int, head_dim: int,
                           cos: torch.Tensor, sin: torch.Tensor,
                           q_out: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           cache_pos: torch.Tensor, kv_start: torch.Tensor, valid_len: torch.Tensor,
                           arrivals: torch.Tensor, scale: float, out: torch.Tensor, *, precision: str,
                           block_keys: int | None = None) -> torch.Tensor:
    """project_qkv_into_cache for one decode token, then its attention over cache slots [kv_start,
    valid_len) into out (1, 1, Hq, D), in the same launch (where attends_in_projection holds).

    arrivals: int32 (Hkv,) zeros on the device, left zero by every launch; launches that share it must
    not overlap (a stream's launches do not). block_keys: cache slots per step of the attention
    programs (a power of two; default _attention_block_keys).
    """
    assert attends_in_projection(q_out, k_cache, head_dim)
    assert out.shape == q_out.shape and out.is_contiguous() and out.dtype == q_out.dtype
    assert arrivals.shape == (num_kv_heads,) and arrivals.dtype == torch.int32
    assert valid_len.dtype == torch.int32 and kv_start.shape == (1,)
    block_keys = block_keys or _attention_block_keys(q_out.dtype, precision)
    _launch_decode_projection(x, qkv_weight, norm_weight, eps, num_q_heads, num_kv_heads, head_dim, cos, sin,
                              q_out, k_cache, v_cache, cache_pos, kv_start, precision,
                              attend=(valid_len, arrivals, scale, out, block_keys))
    return out


def _attention_block_keys(dtype: torch.dtype, precision: str) -> int:
    """Cache slots per step of the attention programs. The kernel's registers are the most any of its
    programs needs, and an attention program holds its first block of keys and values while it waits: 64
    slots of 16-bit values fit beside the projection's tile (sm_90a: 249 registers against 217, no spill),
    32 of fp32 at "tf32", and 16 at "ieee", whose dot holds its operand slices in registers
    (tests/triton_sm90.py)."""
    if INTERPRET:  # the interpreter pays per step: one step covers a test's cache
        return 64
    if dtype != torch.float32:
        return 64
    return 32 if precision == "tf32" else 16


# --------------------------------------------------------------------------------------------------
# Self-check: python -m glm_asr_triton_example.fast_rope  (without a GPU: the Triton interpreter)
# --------------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck
    from glm_asr_course.reference.torch_ops import attention as torch_attention
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

    # The same launch with the step's attention, on a 256-slot cache (the test clip's) holding 71 older keys:
    # against torch over what the launch wrote; then launches in a row (200 on a GPU), each bitwise equal to
    # the first. An attention program that read q or the new k and v before the projection wrote them would
    # differ.
    cache_slots, slot = (256, 71) if on_gpu else (32, 7)
    k2, v2 = (torch.randn(1, Hkv, cache_slots, D, device=dev).to(torch.bfloat16) for _ in range(2))
    counters = torch.tensor([slot, slot + 1], dtype=torch.int32, device=dev)  # cache_pos, valid_len
    arrivals = torch.zeros(Hkv, dtype=torch.int32, device=dev)
    attn = torch.empty(1, 1, Hq, D, device=dev, dtype=torch.bfloat16)

    def attended():
        return project_qkv_and_attend(x, weight, norm_weight, eps, Hq, Hkv, D, cos, sin, q1, k2, v2, counters[:1],
                                      start1, counters[1:], arrivals, D ** -0.5, attn, precision="tf32")

    def attention_of_what_it_wrote():
        live = slice(0, slot + 1)
        return torch_attention(q1.transpose(1, 2), k2[:, :, live], v2[:, :, live], D ** -0.5).transpose(1, 2)

    shape = f"{Hq}/{Hkv} heads, {slot + 1} of {cache_slots} slots"
    check.check("  ... with attention", attended, attention_of_what_it_wrote, shape, 2e-2, graph=on_gpu)

    def largest_change_over_repeats():
        first = attended().clone()
        largest = torch.zeros_like(first, dtype=torch.float32)
        for _ in range(repeats):
            largest = torch.maximum(largest, (attended().float() - first.float()).abs())
        return largest

    repeats = 200 if on_gpu else 2
    check.check(f"  ... {repeats} launches", largest_change_over_repeats, lambda: torch.zeros(1, 1, Hq, D, device=dev),
                shape, 0.0, errors=lambda out, ref: ((out - ref).abs().max().item(),) * 2, timed=False,
                guards="a launch whose attention read the projection's outputs early")
    check.finish()


if __name__ == "__main__":
    _self_check()
