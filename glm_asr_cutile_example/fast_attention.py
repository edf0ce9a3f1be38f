"""The cuTile fast path's attention: fused kernels whose scores never leave the chip.

    flash_attention_kernel / flash_attention
        encoder and decoder prefill: one block per (query tile, batch x head), an online softmax over
        key tiles with fp32 statistics and accumulator. GQA by head index, causal mask, left padding.
    decode_attention_kernel, decode_combine_kernel / decode_attention
        one new token per row, flash-decoding: the cache is cut into splits processed in parallel,
        each by all query heads that share one kv head (the K/V tiles are read once for the group),
        then a second kernel merges the splits' (max, sum, partial output). A cache of one split
        needs no merge. Both launch with programmatic dependent launch (the decode step's chain).

Softmax runs in base 2: exp(x) = exp2(x * log2 e), with log2 e folded into the score scale. Any head
size works: channels pad to a power of two with zeros, which add nothing to q.k and are never stored.
Like transformers' eager attention in bf16, the probabilities are rounded to the value dtype before
P @ V. The live cache length and the left padding are read on the device, so a launch depends only on
shapes and a captured CUDA graph replays for every step.

Self-check: python -m glm_asr_cutile_example.fast_attention  (without a GPU: the cuTile emulator)
"""

import torch

from glm_asr_course.runtimes import gpu_name
from glm_asr_course.runtimes.cutile import ct, launch, with_hints
from glm_asr_course.runtimes.tile_helpers import EMULATED, NEG_INF, ZERO, cdiv, next_power_of_2

from .fast_linear import kernel_hints

LOG2E = 1.4426950408889634


def online_softmax_step(acc, m_i, l_i, scores, v_tile, visible, TF32):
    """Fold one key tile into the running (acc, max, sum) of each query row; scores in log2 units.

    A row with no visible key so far keeps max -inf; subtracting 0 instead keeps exp2(-inf - -inf)
    (NaN) out, so its p and alpha are exactly 0."""
    scores = ct.where(visible, scores, float("-inf"))
    m_new = ct.maximum(m_i, ct.max(scores, axis=1, keepdims=True))
    m_ref = ct.where(m_new == float("-inf"), 0.0, m_new)
    alpha = ct.exp2(m_i - m_ref)
    p = ct.exp2(scores - m_ref)
    l_i = l_i * alpha + ct.sum(p, axis=1, keepdims=True)
    operand = ct.tfloat32 if TF32 and v_tile.dtype == ct.float32 else v_tile.dtype
    # Like transformers: probabilities rounded to the value dtype, products summed in fp32.
    p_v = ct.astype(ct.astype(p, v_tile.dtype), operand)
    acc = ct.mma(p_v, ct.astype(v_tile, operand), acc * alpha)
    return acc, m_new, l_i


def attend_keys(q_tile, k, v, b, kv_head, lo, hi, qk_scale, query_pos, CAUSAL, TF32, BLOCK_N):
    """Attention of the q_tile rows over keys [lo, hi) of batch row b, kv head kv_head, BLOCK_N keys
    a step: the online softmax's unnormalised (acc, max, sum), in log2 units (qk_scale holds log2 e).
    With CAUSAL, row i also skips the keys past query_pos[i]. q_tile: (rows, BLOCK_D), already in
    the operand dtype, which the key tiles take too. A row that sees no key keeps (0, -inf, 0)."""
    BLOCK_Q, BLOCK_D = q_tile.shape
    m_i = ct.full((BLOCK_Q, 1), float("-inf"), ct.float32)
    l_i = ct.zeros((BLOCK_Q, 1), ct.float32)
    acc = ct.zeros((BLOCK_Q, BLOCK_D), ct.float32)
    for key_tile in range(lo // BLOCK_N, (hi + BLOCK_N - 1) // BLOCK_N):
        k_tile = ct.load(k, (b, kv_head, key_tile, 0), (1, 1, BLOCK_N, BLOCK_D), padding_mode=ZERO)
        v_tile = ct.load(v, (b, kv_head, key_tile, 0), (1, 1, BLOCK_N, BLOCK_D), padding_mode=ZERO)
        k_tile = ct.astype(ct.reshape(k_tile, (BLOCK_N, BLOCK_D)), q_tile.dtype)
        scores = ct.mma(q_tile, ct.transpose(k_tile), ct.zeros((BLOCK_Q, BLOCK_N), ct.float32)) * qk_scale
        keys = key_tile * BLOCK_N + ct.arange(BLOCK_N, dtype=ct.int32)
        visible = (keys[None, :] >= lo) & (keys[None, :] < hi)
        if CAUSAL:
            visible = visible & (keys[None, :] <= query_pos[:, None])
        acc, m_i, l_i = online_softmax_step(acc, m_i, l_i, scores, ct.reshape(v_tile, (BLOCK_N, BLOCK_D)), visible,
                                            TF32)
    return acc, m_i, l_i


@ct.kernel
def flash_attention_kernel(q, k, v, o, kv_start, qk_scale, CAUSAL: ct.Constant[bool],
                           HAS_KV_START: ct.Constant[bool], TF32: ct.Constant[bool], BLOCK_M: ct.Constant[int],
                           BLOCK_N: ct.Constant[int], BLOCK_D: ct.Constant[int]):
    """o = softmax(q k^T * scale) v for BLOCK_M queries of one (batch, head).

    q, o: (B, Hq, Tq, D) and k, v: (B, Hkv, Tk, D) arrays (any strides, last dim contiguous); query
    head h reads kv head h // (Hq // Hkv). kv_start: int32 (B,), keys below it hidden (left
    padding). qk_scale: the softmax scale times log2 e. Grid (cdiv(Tq, BLOCK_M), B * Hq).
    CAUSAL: query i sees keys j <= i (queries and keys share positions). A query row that sees no
    key (a left-padding query) comes out as zeros.
    """
    query_tile = ct.bid(0)
    n_heads = q.shape[1]
    b = ct.bid(1) // n_heads
    h = ct.bid(1) % n_heads
    kv_head = h // (n_heads // k.shape[1])
    operand = ct.tfloat32 if TF32 and q.dtype == ct.float32 else q.dtype
    q_tile = ct.load(q, (b, h, query_tile, 0), (1, 1, BLOCK_M, BLOCK_D), padding_mode=ZERO)
    q_tile = ct.astype(ct.reshape(q_tile, (BLOCK_M, BLOCK_D)), operand)
    rows = query_tile * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32)
    lo = 0
    if HAS_KV_START:
        lo = ct.load(kv_start, (b,), ())
    hi = k.shape[2]
    if CAUSAL:
        # No query of the tile sees a key past the tile's last query.
        hi = ct.minimum(hi, (query_tile + 1) * BLOCK_M)
    acc, _, l_i = attend_keys(q_tile, k, v, b, kv_head, lo, hi, qk_scale, rows, CAUSAL, TF32, BLOCK_N)
    out = acc / ct.where(l_i == 0.0, 1.0, l_i)
    ct.store(o, (b, h, query_tile, 0), ct.reshape(ct.astype(out, o.dtype), (1, 1, BLOCK_M, BLOCK_D)))


def _flash_tiles(Tq: int, Tk: int, head_dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D). The emulator pays per block and per tile: the largest tiles."""
    block_d = max(16, next_power_of_2(head_dim))
    if EMULATED:
        return min(512, next_power_of_2(Tq)), min(512, next_power_of_2(Tk)), block_d
    if dtype == torch.float32:
        return 64, 32, block_d
    if head_dim <= 64:
        return 128, 128, block_d  # the encoder: 20 heads of 64 over 1500 frames
    return 64, 64, block_d


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, out: torch.Tensor, *,
                    causal: bool, precision: str, kv_start: torch.Tensor | None = None, tiles=None,
                    hints: dict | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v into out, fused; returns out.

    q, out: (B, Hq, Tq, D); k, v: (B, Hkv, Tk, D): any strides with a contiguous last dim (views of
    a fused QKV output, or the first Tk slots of a KV cache). causal needs Tq == Tk. kv_start: int32
    (B,) or None. precision: "tf32" or "ieee" for fp32 operands. Any head size D. tiles, hints:
    (BLOCK_M, BLOCK_N, BLOCK_D) and ct.kernel's compiler options in place of the defaults (the
    hints: fast_linear.KERNEL_HINTS_BY_GPU's "flash" entries, by B * Tq rows; both come from
    glm_asr_lab/tuning/sweep_cutile_fast.py).
    """
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or Hq % Hkv or out.shape != q.shape:
        raise ValueError(f"flash_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
                         f"out {tuple(out.shape)} do not fit")
    if not q.stride(3) == k.stride(3) == v.stride(3) == out.stride(3) == 1:
        raise ValueError("flash_attention: the head channels must be contiguous")
    if causal and Tq != Tk:
        raise ValueError(f"flash_attention: causal attention needs as many queries as keys ({Tq} != {Tk})")
    if kv_start is not None and (kv_start.dtype != torch.int32 or kv_start.shape != (B,)):
        raise ValueError("flash_attention: kv_start must be int32 (B,)")
    block_m, block_n, block_d = tiles or _flash_tiles(Tq, Tk, D, q.dtype)
    if hints is None:
        hints = kernel_hints(gpu_name(q.device), "flash", (block_m, block_n, block_d), B * Tq)
    kernel = with_hints(flash_attention_kernel, hints)
    launch((cdiv(Tq, block_m), B * Hq), kernel, q, k, v, out,
           kv_start if kv_start is not None else torch.zeros(B, dtype=torch.int32, device=q.device),
           float(scale * LOG2E), causal, kv_start is not None, precision == "tf32", block_m, block_n, block_d)
    return out


# ==================================================================================================
# Decode: one query per row against the KV cache
# ==================================================================================================


def split_keys(split, b, kv_start, valid_len, SPLIT):
    """Cache slots [lo, hi) of split ``split`` of row b: none below kv_start[b], none at or past the
    live cache length."""
    lo = ct.maximum(split * SPLIT, ct.load(kv_start, (b,), ()))
    hi = ct.minimum((split + 1) * SPLIT, ct.load(valid_len, (0,), ()))
    return lo, hi


@ct.kernel
def decode_attention_kernel(q, k_cache, v_cache, valid_len, kv_start, part_m, part_l, part_acc, o, qk_scale,
                            DIRECT: ct.Constant[bool], TF32: ct.Constant[bool], SPLIT: ct.Constant[int],
                            BLOCK_G: ct.Constant[int], BLOCK_N: ct.Constant[int], BLOCK_D: ct.Constant[int]):
    """One split of the cache for the query heads of one kv head.

    q, o: (B, Hkv, group, D) views of the (B, Hq, D) query / output (head h = hk * group + g);
    k_cache, v_cache: (B, Hkv, Tmax, D); valid_len: int32 (1,) live slots; kv_start: int32 (B,).
    Grid (n_splits, B * Hkv). DIRECT (one split): the normalised output goes to o. Otherwise the
    split's unnormalised (max, sum, acc) go to part_m / part_l (B, Hkv, n_splits, group) and
    part_acc (B, Hkv, n_splits, group, D) for decode_combine_kernel.
    """
    ct.grid_dependency_control_launch_dependents()
    ct.grid_dependency_control_wait()
    split = ct.bid(0)
    n_kv = k_cache.shape[1]
    b = ct.bid(1) // n_kv
    kv_head = ct.bid(1) % n_kv
    operand = ct.tfloat32 if TF32 and q.dtype == ct.float32 else q.dtype
    q_tile = ct.load(q, (b, kv_head, 0, 0), (1, 1, BLOCK_G, BLOCK_D), padding_mode=ZERO)
    q_tile = ct.astype(ct.reshape(q_tile, (BLOCK_G, BLOCK_D)), operand)
    lo, hi = split_keys(split, b, kv_start, valid_len, SPLIT)
    # An empty split (wholly past the live cache, or inside the left padding) runs at most one tile,
    # with every key hidden: it keeps (max -inf, sum 0, acc 0).
    acc, m_i, l_i = attend_keys(q_tile, k_cache, v_cache, b, kv_head, lo, hi, qk_scale, None, False, TF32, BLOCK_N)
    if DIRECT:
        out = acc / ct.where(l_i == 0.0, 1.0, l_i)
        ct.store(o, (b, kv_head, 0, 0), ct.reshape(ct.astype(out, o.dtype), (1, 1, BLOCK_G, BLOCK_D)))
    else:
        ct.store(part_m, (b, kv_head, split, 0), ct.reshape(m_i, (1, 1, 1, BLOCK_G)))
        ct.store(part_l, (b, kv_head, split, 0), ct.reshape(l_i, (1, 1, 1, BLOCK_G)))
        ct.store(part_acc, (b, kv_head, split, 0, 0), ct.reshape(acc, (1, 1, 1, BLOCK_G, BLOCK_D)))


@ct.kernel
def decode_combine_kernel(part_m, part_l, part_acc, o, BLOCK_S: ct.Constant[int], BLOCK_G: ct.Constant[int],
                          BLOCK_D: ct.Constant[int]):
    """Merge the splits of one (batch, kv head): softmax over their union. Grid (B * Hkv,).
    An empty split holds (max -inf, sum 0, acc 0) and weighs 0; so does the padding past n_splits."""
    ct.grid_dependency_control_launch_dependents()
    ct.grid_dependency_control_wait()
    n_kv = part_m.shape[1]
    b = ct.bid(0) // n_kv
    kv_head = ct.bid(0) % n_kv
    m = ct.reshape(ct.load(part_m, (b, kv_head, 0, 0), (1, 1, BLOCK_S, BLOCK_G), padding_mode=NEG_INF),
                   (BLOCK_S, BLOCK_G))
    l_s = ct.reshape(ct.load(part_l, (b, kv_head, 0, 0), (1, 1, BLOCK_S, BLOCK_G), padding_mode=ZERO),
                     (BLOCK_S, BLOCK_G))
    acc = ct.reshape(ct.load(part_acc, (b, kv_head, 0, 0, 0), (1, 1, BLOCK_S, BLOCK_G, BLOCK_D), padding_mode=ZERO),
                     (BLOCK_S, BLOCK_G, BLOCK_D))
    m_max = ct.max(m, axis=0, keepdims=True)
    m_max = ct.where(m_max == float("-inf"), 0.0, m_max)
    weight = ct.exp2(m - m_max)
    total = ct.sum(weight * l_s, axis=0)
    total = ct.where(total == 0.0, 1.0, total)
    out = ct.sum(weight[:, :, None] * acc, axis=0) / total[:, None]
    ct.store(o, (b, kv_head, 0, 0), ct.reshape(ct.astype(out, o.dtype), (1, 1, BLOCK_G, BLOCK_D)))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, valid_len: torch.Tensor,
                     kv_start: torch.Tensor, scale: float, out: torch.Tensor, *, precision: str,
                     split_size: int | None = None, tiles: tuple[int, int] | None = None) -> torch.Tensor:
    """Attention of one new token per row over the KV cache, into out; returns out.

    q, out: (B, Hq, D), each row's heads contiguous (a row stride of its own is fine: q may be a view
    into a fused q|k|v output); k_cache, v_cache:
    (B, Hkv, Tmax, D); valid_len: int32 (1,) live slots (the token just written included); kv_start:
    int32 (B,) left padding. The grid depends on Tmax only, so the launch can be captured in a CUDA
    graph. split_size: cache slots per block, rounded up to a power of two (default on a GPU: the whole
    cache up to 256 slots; beyond, 32, or more for a cache of more than 1024 slots so that there are at
    most 32 splits; the whole cache in the emulator). tiles: (BLOCK_N, BLOCK_G) in place of the default (glm_asr_lab/tuning/sweep_cutile_fast.py):
    keys a step, and query rows a block holds (the group, padded with zero rows beyond it).
    """
    B, Hq, D = q.shape
    _, Hkv, Tmax, _ = k_cache.shape
    if k_cache.shape != v_cache.shape or k_cache.shape[0] != B or k_cache.shape[3] != D or Hq % Hkv:
        raise ValueError(f"decode_attention: q {tuple(q.shape)} and caches {tuple(k_cache.shape)} do not fit")
    for name, t in (("q", q), ("out", out)):
        if t.shape != (B, Hq, D) or t.stride(2) != 1 or t.stride(1) != D:
            raise ValueError(f"decode_attention: {name} must be (B, Hq, D) with contiguous heads, got "
                             f"{tuple(t.shape)} strides {tuple(t.stride())}")
    if k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("decode_attention: the caches' channels must be contiguous")
    group = Hq // Hkv
    # A split is a whole number of key tiles, and tiles are powers of two. On a GPU a short
    # transcription's cache (at most 256 slots) is one split, the group padded to 16 query rows: one
    # launch, 6.5 us where 8 splits of 32 and their merge take 7.3 (H100, 72 live slots, 2026-11-26 night,
    # glm_asr_lab/tuning/sweep_cutile_fast.py --only decode). It takes 128-key steps: fewer turns of the
    # serial key loop. 64-key steps took 5.7 us, 128-key steps 4.8 (H100, 2026-11-27 d, call 6); on an H200
    # 5.6 and 4.7 (2026-11-27 e, call 5). A longer one: 32 slots a split, up to 32
    # splits (1024 slots, 600 live: 9.2 us, against 15.0 whole). Split blocks hold the group unpadded
    # (4 rows), and at 4 rows 64-key steps run 2-3x slower than 32-key steps (H100, 3,840 slots, 3,778
    # live: 45.5 us against 14.0; the 5-minute clip's decode step 3,063 -> 2,142 us).
    if split_size is None:
        split_size = Tmax if EMULATED or Tmax <= 256 else max(32, cdiv(Tmax, 32))
    split_size = next_power_of_2(split_size)
    n_splits = cdiv(Tmax, split_size)
    direct = n_splits == 1
    block_d = max(16, next_power_of_2(D))
    block_g = max(16, next_power_of_2(group)) if direct and not EMULATED else next_power_of_2(group)
    block_n = split_size if EMULATED else min(split_size, 128 if direct else 32)
    if tiles is not None:
        block_n, block_g = tiles
    q_groups = q.view(B, Hkv, group, D)
    o_groups = out.view(B, Hkv, group, D)
    parts = 1 if direct else n_splits
    part_m = torch.empty((B, Hkv, parts, group), dtype=torch.float32, device=q.device)
    part_l = torch.empty_like(part_m)
    part_acc = torch.empty((B, Hkv, parts, group, D), dtype=torch.float32, device=q.device)
    tf32 = precision == "tf32"
    launch((n_splits, B * Hkv), decode_attention_kernel, q_groups, k_cache, v_cache, valid_len, kv_start, part_m,
           part_l, part_acc, o_groups, float(scale * LOG2E), direct, tf32, split_size, block_g, block_n, block_d,
           pdl=True)
    if not direct:
        launch((B * Hkv,), decode_combine_kernel, part_m, part_l, part_acc, o_groups, next_power_of_2(n_splits),
               block_g, block_d, pdl=True)
    return out


# ==================================================================================================
# Self-check: python -m glm_asr_cutile_example.fast_attention  (without a GPU: the cuTile emulator)
# ==================================================================================================


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck
    from glm_asr_course.reference.torch_ops import attention as torch_attention

    check = SelfCheck("fast_attention.py", EMULATED, cpu_runner="cuTile emulator", decorator="@ct.kernel")
    on_gpu, dev = check.on_gpu, check.device
    torch.manual_seed(0)
    dt = torch.bfloat16
    T_enc, T_dec, T_max = (1500, 400, 1024) if on_gpu else (75, 40, 48)

    # Encoder: q, k, v are head views of one fused (1, T, 3 * 20 * 64) projection output.
    qkv = torch.randn(1, T_enc, 3, 20, 64, device=dev, dtype=dt)
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    out = torch.empty(1, T_enc, 20, 64, device=dev, dtype=dt).transpose(1, 2)
    scale = 64 ** -0.5
    check.check("flash_attention[encoder]", lambda: flash_attention(q, k, v, scale, out, causal=False,
                                                                    precision="tf32"),
                lambda: torch_attention(q, k, v, scale), f"{tuple(q.shape)} bf16", 2e-2)

    # Decoder prefill from the caches: GQA 16 / 4, head_dim 128, one left-padded row.
    B, Hq, Hkv, D = 2, 16, 4, 128
    scale = D ** -0.5
    kv_start = torch.tensor([0, 7], dtype=torch.int32, device=dev)
    qp = torch.randn(B, T_dec, Hq, D, device=dev, dtype=dt).transpose(1, 2)
    k_cache, v_cache = (torch.randn(B, Hkv, T_max, D, device=dev, dtype=dt) for _ in range(2))
    out = torch.empty(B, T_dec, Hq, D, device=dev, dtype=dt).transpose(1, 2)
    check.check("flash_attention[prefill]",
                lambda: flash_attention(qp, k_cache[:, :, :T_dec], v_cache[:, :, :T_dec], scale, out, causal=True,
                                        precision="tf32", kv_start=kv_start),
                lambda: torch_attention(qp, k_cache[:, :, :T_dec], v_cache[:, :, :T_dec], scale, True, kv_start),
                f"{tuple(qp.shape)} bf16", 2e-2)

    # Decode: one token against T_dec + 1 live slots, split in several parts and in one.
    q1 = torch.randn(B, Hq, D, device=dev, dtype=dt)
    valid = torch.tensor([T_dec + 1], dtype=torch.int32, device=dev)
    out1 = torch.empty(B, Hq, D, device=dev, dtype=dt)

    def reference():
        return torch_attention(q1[:, :, None], k_cache[:, :, :T_dec + 1], v_cache[:, :, :T_dec + 1], scale,
                               kv_start=kv_start)[:, :, 0]

    for split in ((128 if on_gpu else 16), T_max):
        check.check(f"decode_attention[split {split}]",
                    lambda split=split: decode_attention(q1, k_cache, v_cache, valid, kv_start, scale, out1,
                                                         precision="tf32", split_size=split),
                    reference, f"({B}, {Hq}, {T_max}, {D}) bf16", 2e-2, graph=on_gpu)
    check.finish()


if __name__ == "__main__":
    _self_check()
