"""The cuTile fast path's decoder attention inputs: RMSNorm, the q|k|v projection, RoPE and the
KV-cache write.

    qkv_rope_gemv_kernel   one new token (decode at batch 1) in one launch: each block runs the GEMV
                           for BLOCK_P rotation pairs (d, d + D/2) of one head, so its epilogue holds
                           both halves of every pair it rotates, then stores q, or k and v at the
                           token's cache slot
    project_qkv_into_cache that kernel, or for a prompt (or a batch) the RMSNorm-prologue linear, the
                           course's apply_rope_kernel and glue's KV-cache write

Self-check: python -m glm_asr_cutile_example.fast_rope  (without a GPU: the cuTile emulator)
"""

import torch

from glm_asr_course.runtimes.cutile import ct, launch
from glm_asr_course.runtimes.tile_helpers import EMULATED, next_power_of_2, round_as

from .fast_linear import GEMV_STEP_BYTES, RMSNORM, gemv_rows, rms_linear, stats_block
from .glue import write_kv_cache
from .rope import apply_rope


def rotate(x1, x2, cos, sin, dtype):
    """The two rotated halves, rounded where HF's ``q*cos + rotate_half(q)*sin`` rounds in ``dtype``:
    the tables cast to the dtype, each product rounded, then the difference / sum."""
    c = round_as(cos, dtype)
    s = round_as(sin, dtype)
    return round_as(x1 * c, dtype) - round_as(x2 * s, dtype), round_as(x2 * c, dtype) + round_as(x1 * s, dtype)


@ct.kernel
def qkv_rope_gemv_kernel(x, w, norm_weight, cos, sin, cache_pos, kv_start, q_out, k_cache, v_cache, eps,
                         N_Q_HEADS: ct.Constant[int], N_KV_HEADS: ct.Constant[int], HALF: ct.Constant[int],
                         BLOCK_P: ct.Constant[int], BLOCK_K: ct.Constant[int], BLOCK_STATS: ct.Constant[int]):
    """Pairs [p0, p0 + BLOCK_P) of one head of rmsnorm(x) @ W^T, rotated and stored.

    x: (1, H) the token's hidden state; W: ((Hq + 2 Hkv) * 2 HALF, H), heads q, k, v in that order;
    cos, sin: (positions, HALF) fp32; cache_pos: int32 (1,) the token's slot; kv_start: int32 (1,)
    the row's left padding (position = slot - kv_start); q_out: (Hq, 2 HALF); k_cache, v_cache:
    (1, Hkv, Tmax, 2 HALF). Grid ((Hq + 2 Hkv) * HALF / BLOCK_P,).
    """
    ct.grid_dependency_control_launch_dependents()
    per_head = HALF // BLOCK_P
    head = ct.bid(0) // per_head
    part = ct.bid(0) % per_head
    first_rows = head * 2 * per_head + part  # tile index of the x1 rows; the x2 rows are HALF further
    x1, x2 = gemv_rows(x, norm_weight, 0, eps, w, first_rows, w, first_rows + per_head, RMSNORM, True, BLOCK_P,
                       BLOCK_K, BLOCK_STATS)
    # The Linear's output is rounded to the activation dtype before RoPE sees it, as in transformers.
    x1 = round_as(x1, x.dtype)
    x2 = round_as(x2, x.dtype)
    slot = ct.load(cache_pos, (0,), ())
    if head < N_Q_HEADS + N_KV_HEADS:
        position = ct.maximum(slot - ct.load(kv_start, (0,), ()), 0)
        lanes = part * BLOCK_P + ct.arange(BLOCK_P, dtype=ct.int32)
        out1, out2 = rotate(x1, x2, ct.gather(cos, (position, lanes))[None, :],
                            ct.gather(sin, (position, lanes))[None, :], x.dtype)
        if head < N_Q_HEADS:
            ct.store(q_out, (head, part), ct.astype(out1, q_out.dtype))
            ct.store(q_out, (head, part + per_head), ct.astype(out2, q_out.dtype))
        else:
            cache_tile = (1, 1, 1, BLOCK_P)
            ct.store(k_cache, (0, head - N_Q_HEADS, slot, part), ct.reshape(ct.astype(out1, k_cache.dtype), cache_tile))
            ct.store(k_cache, (0, head - N_Q_HEADS, slot, part + per_head),
                     ct.reshape(ct.astype(out2, k_cache.dtype), cache_tile))
    else:
        cache_tile = (1, 1, 1, BLOCK_P)
        v_head = head - N_Q_HEADS - N_KV_HEADS
        ct.store(v_cache, (0, v_head, slot, part), ct.reshape(ct.astype(x1, v_cache.dtype), cache_tile))
        ct.store(v_cache, (0, v_head, slot, part + per_head), ct.reshape(ct.astype(x2, v_cache.dtype), cache_tile))


def _pair_tiles(half: int, dtype: torch.dtype) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_K): 16 pairs (32 weight rows, the q|k|v GEMV's tile) x 512 bytes per step on a
    GPU (fast_linear.linear_tiles); the emulator takes a whole head's pairs."""
    if EMULATED:
        return half, 128
    return min(16, half), GEMV_STEP_BYTES // dtype.itemsize


def project_qkv_into_cache(x: torch.Tensor, qkv_weight: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                           num_q_heads: int, num_kv_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor,
                           rotary_dim: int, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           cache_pos: torch.Tensor, kv_start: torch.Tensor, q_buffer: torch.Tensor, *,
                           precision: str) -> torch.Tensor:
    """The decoder layer's attention inputs: h = rmsnorm(x); q|k|v = h @ qkv_weight^T; rotated q
    returned as (B, T, Hq, D); rotated k and raw v written into the caches at slots cache_pos + t.

    x: (B * T, H) rows; positions: int32 (B, T) RoPE positions of the new tokens (glue.token_positions);
    cache_pos: int32 (1,), kv_start: int32 (B,) on the device. q_buffer: a contiguous (1, 1, Hq, D)
    buffer the one-launch path writes (a decode token at batch 1 with the whole head rotated and a
    power-of-two head size); the returned q is that buffer there, a view into the q|k|v output
    otherwise. precision: "tf32" or "ieee" for fp32 operands.
    """
    B, T = positions.shape
    half = head_dim // 2
    if B * T == 1 and rotary_dim == head_dim and head_dim == next_power_of_2(head_dim):
        K = x.shape[-1]
        if qkv_weight.shape != ((num_q_heads + 2 * num_kv_heads) * head_dim, K) or not x.is_contiguous():
            raise ValueError(f"project_qkv_into_cache: weight {tuple(qkv_weight.shape)} does not fit x {tuple(x.shape)}")
        block_p, block_k = _pair_tiles(half, x.dtype)
        launch(((num_q_heads + 2 * num_kv_heads) * half // block_p,), qkv_rope_gemv_kernel, x.view(1, K), qkv_weight,
               norm_weight, cos, sin, cache_pos, kv_start, q_buffer.view(num_q_heads, head_dim), k_cache, v_cache,
               float(eps), num_q_heads, num_kv_heads, half, block_p, block_k, stats_block(K), pdl=True)
        return q_buffer
    qkv = rms_linear(x, norm_weight, eps, qkv_weight, precision=precision)
    qkv = qkv.view(B, T, num_q_heads + 2 * num_kv_heads, head_dim)
    apply_rope(qkv[:, :, :num_q_heads + num_kv_heads], cos, sin, positions, rotary_dim)
    write_kv_cache(qkv[:, :, num_q_heads:num_q_heads + num_kv_heads], qkv[:, :, num_q_heads + num_kv_heads:],
                   k_cache, v_cache, cache_pos)
    return qkv[:, :, :num_q_heads]


# --------------------------------------------------------------------------------------------------
# Self-check: python -m glm_asr_cutile_example.fast_rope  (without a GPU: the cuTile emulator)
# --------------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck
    from glm_asr_course.reference.torch_ops import rope as torch_rope
    from glm_asr_course.reference.torch_ops import rope_tables as torch_rope_tables

    check = SelfCheck("fast_rope.py", EMULATED, cpu_runner="cuTile emulator", decorator="@ct.kernel")
    on_gpu, dev = check.on_gpu, check.device
    torch.manual_seed(0)
    bf16 = torch.bfloat16
    Hq, Hkv, D, Tmax = 16, 4, 128, (1024 if on_gpu else 32)
    cos, sin = torch_rope_tables(torch.arange(Tmax, device=dev), D, 10000.0)
    H, eps, slot, pad = (2048 if on_gpu else 96), 1e-5, 9, 2
    x = torch.randn(1, H, device=dev, dtype=bf16) * 3
    norm_weight = torch.randn(H, device=dev, dtype=bf16)
    weight = (torch.randn((Hq + 2 * Hkv) * D, H, device=dev) * H ** -0.5).to(bf16)
    q_buffer = torch.empty(1, 1, Hq, D, device=dev, dtype=bf16)
    k_cache, v_cache = (torch.zeros(1, Hkv, Tmax, D, device=dev, dtype=bf16) for _ in range(2))
    cache_pos = torch.tensor([slot], dtype=torch.int32, device=dev)
    kv_start = torch.tensor([pad], dtype=torch.int32, device=dev)
    positions = torch.tensor([[slot - pad]], dtype=torch.int32, device=dev)

    def fused():
        q = project_qkv_into_cache(x, weight, norm_weight, eps, Hq, Hkv, D, cos, sin, D, positions, k_cache, v_cache,
                                   cache_pos, kv_start, q_buffer, precision="tf32")
        return torch.cat([q.reshape(-1), k_cache[0, :, slot].reshape(-1), v_cache[0, :, slot].reshape(-1)])

    normed = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(bf16)
    qkv = ((norm_weight * normed).float() @ weight.float().T).to(bf16).view(1, 1, Hq + 2 * Hkv, D)
    position = slot - pad

    def reference():
        rotated = torch_rope(qkv[:, :, :Hq + Hkv], cos[position:position + 1][None], sin[position:position + 1][None], D)
        return torch.cat([rotated.reshape(-1), qkv[:, :, Hq + Hkv:].reshape(-1)])

    check.check("qkv_rope_gemv_kernel", fused, reference, f"1x{H}->{(Hq + 2 * Hkv) * D} bf16", 1e-2, graph=on_gpu)
    check.finish()


if __name__ == "__main__":
    _self_check()
