"""The cuTile fast path's linear layers: a tensor-core GEMM and a one-row GEMV, with fused epilogues.

    gemm_kernel   one (BLOCK_M, BLOCK_N) output tile of x @ W^T through ct.mma; the epilogue adds the
                  bias, applies the exact GELU, adds the result into ``out`` (the residual stream,
                  updated in place) or, GATED, accumulates the gate and up products of [gate; up] in
                  the same K loop and stores silu(gate) * up
    gemv_kernel   BLOCK_N outputs of one row (decode) on the CUDA cores: the weight is streamed once,
                  every element used once. Its prologue can compute the input from what the previous
                  kernel would have produced (RMSNorm of the row); its epilogue adds into ``out`` (the
                  residual) or, GATED, runs gate and up rows together and stores silu(gate) * up.
                  Launched with programmatic dependent launch: its first weight tiles load while the
                  kernel before it drains

``layernorm`` and ``rmsnorm`` launch the course's norm kernels, which feed the GEMMs of more than one
row, at the rows a block and the occupancy that read fastest where a GPU was measured (NORM_ROWS_BY_GPU).

``linear``, ``llama_mlp`` and ``rms_linear`` pick the kernel and its tiles (``linear_tiles``). Every
kernel rounds to the activation dtype where transformers materialises a tensor (a Linear's output
before GELU or the residual add, SwiGLU's four roundings), so bf16 greedy decoding follows it.

cuTile arrays passed to one kernel must not overlap, so an in-place residual add is not "residual
+ y into out" with residual and out the same tensor: the kernel reads ``out``'s tile and writes it
back (ACCUMULATE).

Self-check: python -m glm_asr_cutile_example.fast_linear  (without a GPU: the cuTile emulator)
"""

import zlib

import torch

from glm_asr_course.runtimes import gpu_name
from glm_asr_course.runtimes.cutile import ct, launch, with_hints
from glm_asr_course.runtimes.tile_helpers import (EMULATED, ZERO, as_rows, cdiv, erf, next_power_of_2, round_as,
                                                  rows_per_block)

from .layers import layernorm_kernel, rmsnorm_kernel

# gemv_kernel's prologues: what the weight multiplies.
AS_STORED, RMSNORM = 0, 1


def swiglu(gate, up, dtype):
    """silu(gate) * up from fp32 tiles, rounded where HF's LlamaMLP rounds: the gate and up Linear
    outputs, silu(gate), and (at the caller's store) the product."""
    gate = round_as(gate, dtype)
    up = round_as(up, dtype)
    return round_as(gate / (1.0 + ct.exp(-gate)), dtype) * up


def linear_epilogue(acc, bias, out, row_tile, col_tile, HAS_BIAS, GELU, ACCUMULATE, BLOCK_M, BLOCK_N):
    """[out +] [gelu](acc [+ bias]) as out's dtype, rounded where torch rounds."""
    y = acc
    if HAS_BIAS:
        y = y + ct.astype(ct.load(bias, (col_tile,), (BLOCK_N,), padding_mode=ZERO), ct.float32)[None, :]
    if GELU:
        # nn.Linear hands GELU an output already rounded to the activation dtype.
        y = round_as(y, out.dtype)
        y = 0.5 * y * (1.0 + erf(y * 0.7071067811865476))
    if ACCUMULATE:
        residual = ct.load(out, (row_tile, col_tile), (BLOCK_M, BLOCK_N), padding_mode=ZERO)
        y = round_as(y, out.dtype) + ct.astype(residual, ct.float32)
    return ct.astype(y, out.dtype)


@ct.kernel
def gemm_kernel(x, w, bias, out, HAS_BIAS: ct.Constant[bool], GELU: ct.Constant[bool],
                ACCUMULATE: ct.Constant[bool], GATED: ct.Constant[bool], TF32: ct.Constant[bool],
                BLOCK_M: ct.Constant[int], BLOCK_N: ct.Constant[int], BLOCK_K: ct.Constant[int]):
    """out tile (i, j) = epilogue(x @ W^T); x (M, K), W (N, K) (GATED: (2N, K), rows [gate; up]),
    out (M, N). Grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)). fp32 operands go to the tensor cores as
    tfloat32 when TF32, else they stay IEEE fp32."""
    row_tile = ct.bid(0)
    col_tile = ct.bid(1)
    operand = ct.tfloat32 if TF32 and x.dtype == ct.float32 else x.dtype
    acc = ct.zeros((BLOCK_M, BLOCK_N), ct.float32)
    if GATED:
        n_out = out.shape[1]
        gate_w = w.slice(0, 0, n_out)
        up_w = w.slice(0, n_out, 2 * n_out)
        acc_up = ct.zeros((BLOCK_M, BLOCK_N), ct.float32)
    for k in range(ct.num_tiles(x, 1, (BLOCK_M, BLOCK_K))):
        x_tile = ct.astype(ct.load(x, (row_tile, k), (BLOCK_M, BLOCK_K), padding_mode=ZERO), operand)
        if GATED:
            g_tile = ct.load(gate_w, (col_tile, k), (BLOCK_N, BLOCK_K), padding_mode=ZERO)
            u_tile = ct.load(up_w, (col_tile, k), (BLOCK_N, BLOCK_K), padding_mode=ZERO)
            acc = ct.mma(x_tile, ct.transpose(ct.astype(g_tile, operand)), acc)
            acc_up = ct.mma(x_tile, ct.transpose(ct.astype(u_tile, operand)), acc_up)
        else:
            w_tile = ct.load(w, (col_tile, k), (BLOCK_N, BLOCK_K), padding_mode=ZERO)
            acc = ct.mma(x_tile, ct.transpose(ct.astype(w_tile, operand)), acc)
    if GATED:
        ct.store(out, (row_tile, col_tile), ct.astype(swiglu(acc, acc_up, out.dtype), out.dtype))
    else:
        ct.store(out, (row_tile, col_tile),
                 linear_epilogue(acc, bias, out, row_tile, col_tile, HAS_BIAS, GELU, ACCUMULATE, BLOCK_M, BLOCK_N))


def gemv_input(x, norm_weight, row, k, inv_rms, PROLOGUE, BLOCK_K):
    """The (1, BLOCK_K) fp32 input tile k of row ``row`` after the prologue (see gemv_kernel)."""
    values = ct.astype(ct.load(x, (row, k), (1, BLOCK_K), padding_mode=ZERO), ct.float32)
    if PROLOGUE == RMSNORM:
        weight = ct.astype(ct.load(norm_weight, (k,), (BLOCK_K,), padding_mode=ZERO), ct.float32)
        values = round_as(round_as(values * inv_rms, x.dtype) * weight[None, :], x.dtype)
    return values


def inverse_rms(x, row, eps, BLOCK):
    """1 / sqrt(mean(x[row]^2) + eps) in fp32, over the row's x.shape[1] values, BLOCK a load."""
    squares = ct.zeros((1, BLOCK), ct.float32)
    for k in range(ct.num_tiles(x, 1, (1, BLOCK))):
        values = ct.astype(ct.load(x, (row, k), (1, BLOCK), padding_mode=ZERO), ct.float32)
        squares = squares + values * values
    return ct.rsqrt(ct.sum(squares) / x.shape[1] + eps)


# The widest load of a row that the RMSNorm prologue's statistics take at once (stats_block).
STATS_MAX = 8192


def stats_block(K: int) -> int:
    """The RMSNorm prologue's statistics load: the whole row of K values at once, up to STATS_MAX. In
    BLOCK_K steps they were a chain of dependent loads that every block waits on after the PDL wait: the
    decode q|k|v launch after the down GEMV took 7.10 us a layer that way, 6.71 in one load (H200,
    2026-11-27 f, docs/gpu_runs/2026-11-27-f-h200-qkv-prologue)."""
    return min(next_power_of_2(K), STATS_MAX)


def gemv_rows(x, norm_weight, row, eps, w, tile, w2, tile2, PROLOGUE, TWO, BLOCK_N, BLOCK_K, BLOCK_STATS):
    """(1, BLOCK_N) fp32 sums over K of w[rows of tile ``tile``] * input, the input being x's row
    after PROLOGUE; with TWO, also those of w2[rows of tile ``tile2``] against the same input (a
    gated pair, or RoPE's two halves), else the second result repeats the first. Lane-wise partial
    sums, one reduction after the loop. BLOCK_STATS: stats_block(K), the RMSNorm statistics' load."""
    # The first weight tiles do not depend on x: loaded before the RMSNorm statistics, their
    # latency overlaps them instead of following them, and before waiting for the kernel that wrote
    # x (launched with programmatic dependent launch, this one may start while that one drains).
    first = ct.astype(ct.load(w, (tile, 0), (BLOCK_N, BLOCK_K), padding_mode=ZERO), ct.float32)
    if TWO:
        first2 = ct.astype(ct.load(w2, (tile2, 0), (BLOCK_N, BLOCK_K), padding_mode=ZERO), ct.float32)
    ct.grid_dependency_control_wait()
    inv_rms = 0.0
    if PROLOGUE == RMSNORM:
        inv_rms = inverse_rms(x, row, eps, BLOCK_STATS)
    values = gemv_input(x, norm_weight, row, 0, inv_rms, PROLOGUE, BLOCK_K)
    acc = first * values
    if TWO:
        acc2 = first2 * values
    for k in range(1, ct.num_tiles(w, 1, (BLOCK_N, BLOCK_K))):
        values = gemv_input(x, norm_weight, row, k, inv_rms, PROLOGUE, BLOCK_K)
        acc = acc + ct.astype(ct.load(w, (tile, k), (BLOCK_N, BLOCK_K), padding_mode=ZERO), ct.float32) * values
        if TWO:
            acc2 = acc2 + ct.astype(ct.load(w2, (tile2, k), (BLOCK_N, BLOCK_K), padding_mode=ZERO),
                                    ct.float32) * values
    total = ct.reshape(ct.sum(acc, axis=1), (1, BLOCK_N))
    total2 = total
    if TWO:
        total2 = ct.reshape(ct.sum(acc2, axis=1), (1, BLOCK_N))
    return total, total2


@ct.kernel
def gemv_kernel(x, w, bias, norm_weight, out, eps, PROLOGUE: ct.Constant[int], HAS_BIAS: ct.Constant[bool],
                GELU: ct.Constant[bool], ACCUMULATE: ct.Constant[bool], GATED: ct.Constant[bool],
                BLOCK_N: ct.Constant[int], BLOCK_K: ct.Constant[int], BLOCK_STATS: ct.Constant[int]):
    """out[r, tile j] = epilogue(W[tile j] . prologue(x[r])) for the rows r of a decode step.

    x: (R, K); W: (N, K), or GATED (2N, K) with rows [gate; up]: the block runs gate rows j and up
    rows j together and stores silu(gate) * up; out: (R, N). Grid (cdiv(N, BLOCK_N), R): each row
    re-reads the weight, which is why it serves one or two rows, not a batch.
    PROLOGUE RMSNORM multiplies rmsnorm(x[r]) * norm_weight (eps: fp32), recomputed by every block
    from the few kilobytes of the row, instead of a separate launch and a round trip through memory.
    """
    ct.grid_dependency_control_launch_dependents()
    col_tile = ct.bid(0)
    row = ct.bid(1)
    if GATED:
        n_out = out.shape[1]
        gate, up = gemv_rows(x, norm_weight, row, eps, w.slice(0, 0, n_out), col_tile, w.slice(0, n_out, 2 * n_out),
                             col_tile, PROLOGUE, True, BLOCK_N, BLOCK_K, BLOCK_STATS)
        ct.store(out, (row, col_tile), ct.astype(swiglu(gate, up, out.dtype), out.dtype))
    else:
        total, _ = gemv_rows(x, norm_weight, row, eps, w, col_tile, w, col_tile, PROLOGUE, False, BLOCK_N, BLOCK_K,
                             BLOCK_STATS)
        ct.store(out, (row, col_tile), linear_epilogue(total, bias, out, row, col_tile, HAS_BIAS, GELU, ACCUMULATE,
                                                       1, BLOCK_N))


# Compiler hints (ct.kernel's occupancy, num_ctas, num_worker_warps) for a launch kind ("gemv", "gated
# gemv", "gemm", "gated gemm"; "flash" for fast_attention's flash attention; "layernorm", "rmsnorm") at
# one tile (linear_tiles', _flash_tiles', or (rows a block, BLOCK_N) for a norm), by the name CUDA gives
# the GPU: what glm_asr_lab/tuning/sweep_cutile_fast.py's hints, long_gemm and norm sections found faster
# than the compiler's defaults (docs/performance.md). Each entry is ((min_rows, hints), ...) in rising
# min_rows: a launch of M rows takes the last hints whose min_rows <= M, since the best hint can change
# with the number of rows (an encoder window against a 5-minute clip's ten). A GPU, kind, tile or row
# count not listed gets the defaults.
KERNEL_HINTS_BY_GPU = {
    "NVIDIA H200": {
        # decode gate|up, weights missing L2: 21.1 us by default, 17.8 at occupancy 4 (more resident blocks
        # keep more loads in flight); the other GEMVs lose at 4, and every GEMV at num_ctas 2.
        ("gated gemv", (32, 256)): ((1, {"occupancy": 4}),),
        # a 5-minute clip's prompt gate|up (M = 3,765): 1,147 us by default, 358 with two-CTA clusters.
        # (The encoder's fc1, 64.7 us by default and 52.3 at occupancy 2 alone, made the test clip's
        # replayed prompt graph 1.9 ms slower: left at the default.)
        ("gated gemm", (128, 128, 64)): ((1, {"num_ctas": 2}),),
        # As on the H100 (below): the wide tile needs the worker warps (fc2 over ten windows: 4,595 us at the
        # defaults, 348 with them), and the norms read about 1 TB/s at the defaults. LayerNorm, 15,000 x 1,280:
        # 78.9 -> 35.1 us (1,500 rows: 8.7 -> 5.5); RMSNorm, a 3,765-token prompt: 24.2 -> 8.6 us at one row and
        # occupancy 8 (59 rows: 2.7 -> 2.3). 2026-11-27 e, call 1 (gpu_check.sh sweep_long).
        ("gemm", (128, 256, 64)): ((1, {"num_worker_warps": 8}),),
        ("layernorm", (4, 2048)): ((1, {"occupancy": 4}),),
        ("rmsnorm", (1, 2048)): ((1, {"occupancy": 8}),),
        # The encoder's flash attention at occupancy 2, as on the H100: one window 54.8 -> 44.1 us, ten
        # 499.5 -> 379.0 (2026-11-27 e, call 6).
        ("flash", (128, 128, 64)): ((1, {"occupancy": 2}),),
    },
    "NVIDIA H100 80GB HBM3": {
        # The decode gate|up gains on an H100 too (2026-11-27): 24.3 -> 21.4 us (21.5 at occupancy 4).
        ("gated gemv", (32, 256)): ((1, {"occupancy": 2}),),
        # The prompt's gate|up (5-minute clip, 3,765 rows): 1,184 us by default, 383 with two-CTA clusters,
        # 294 with 8 worker warps (cuda.tile 1.7). The encoder's flash attention at occupancy 2: 54.9 ->
        # 44.4 us over one window, 495.9 -> 370.9 over ten. Both together, end to end
        # (glm_asr_lab/tuning/ab_hints.py, two runs on one H100, ids equal): 5-minute clip 129.7 -> 123.2
        # ms and 128.8 -> 123.1; test clip 30.37 -> 30.43 and 29.98 -> 30.01, within its noise. Worker
        # warps only from 3,000 rows, where they were measured; shorter prompts keep the clusters.
        ("gated gemm", (128, 128, 64)): ((1, {"num_ctas": 2}), (3000, {"num_worker_warps": 8})),
        ("flash", (128, 128, 64)): ((1, {"occupancy": 2}),),
        # The 64 x 128 tile (the encoder's fc1 over one window, and the conv stem) at occupancy 4: fc1 66.5
        # -> 56.4 us. The 128 x 128 GEMMs gained at occupancy 4 from two windows on (ten windows: q|k|v 383
        # -> 303 us, o 151 -> 127, fc2 566 -> 406) but not over one (q|k|v 30.1 us by default, 30.9 at
        # occupancy 2). From two windows the encoder now takes WIDE_TILES_BY_GPU's tile, so from 3,000 rows
        # this entry serves a long prompt's q|k|v, o and down (down 166 -> 169 us; the 5-minute prompt's
        # kernels 29.4 -> 29.3 ms). 2026-11-27, one H100, docs/performance.md.
        ("gemm", (64, 128, 64)): ((1, {"occupancy": 4}),),
        ("gemm", (128, 128, 64)): ((3000, {"occupancy": 4}),),
        # WIDE_TILES_BY_GPU's 128 x 256 tile needs the worker warps: at the compiler's defaults it runs 13x
        # slower (the encoder's fc2 over ten windows: 4,886 us, against 375 with them; 2026-11-27 d, call 2).
        ("gemm", (128, 256, 64)): ((1, {"num_worker_warps": 8}),),
        # The norms read about 1 TB/s at the defaults. LayerNorm, 15,000 x 1,280: 81.6 -> 37.3 us (1,500 rows:
        # 8.8 -> 5.6). RMSNorm, a 3,765-token prompt: 24.1 us at the course's 2 rows a block, 8.8 at one row
        # and occupancy 8 (NORM_ROWS_BY_GPU); 59 rows: 2.8 -> 2.4. 2026-11-27 d, call 2.
        ("layernorm", (4, 2048)): ((1, {"occupancy": 4}),),
        ("rmsnorm", (1, 2048)): ((1, {"occupancy": 8}),),
    },
}

# Weight shapes (N, K, dtype) whose GEMMs, not gated, take 128 x 256 tiles, by GPU: each shape with the rows
# from which it takes them. The encoder's four from two windows on. H100, bf16, 2 / 10 windows, us (2026-11-27
# d, call 2; fc1's 64 x 128 figures from 2026-11-27 b): q|k|v 53.6 -> 49.8 / 291.2 -> 301.9 (a 4 % loss over
# ten windows, taken for one rule), o 20.7 -> 19.6 / 123.2 -> 117.3, fc1 104.6 -> 84.6 / 591 -> 485.1, fc2
# 67.4 -> 58.6 / 472.8 -> 374.8. One window was not timed at this tile with worker warps on an H100.
# H200, the same rule (2026-11-27 e, call 1): q|k|v 54.2 -> 49.2 / 259.4 -> 259.7, o 21.2 -> 19.3 / 107.5 ->
# 100.4, fc1 117.9 -> 86.1 / 620.5 -> 427.4, fc2 61.5 -> 58.8 / 400.5 -> 348.0. Over one window it loses
# for q|k|v (25.9 -> 32.2) and o (10.4 -> 18.7), and gains for fc1 (64.0 -> 42.8): an end-to-end candidate
# (glm_asr_lab/tuning/ab_hints.py), since a faster fc1 alone once made the prompt graph slower.
_ENCODER_GEMMS = ((3840, 1280), (1280, 1280), (5120, 1280), (1280, 5120))
WIDE_TILES_BY_GPU = {
    "NVIDIA H100 80GB HBM3": {(n, k, torch.bfloat16): 3000 for n, k in _ENCODER_GEMMS},
    "NVIDIA H200": {(n, k, torch.bfloat16): 3000 for n, k in _ENCODER_GEMMS},
}


def kernel_hints(gpu: str, kind: str, tile: tuple[int, ...], rows: int) -> dict:
    """KERNEL_HINTS_BY_GPU's hints for a launch of `rows` rows ({} where none apply)."""
    hints = {}
    for min_rows, entry in KERNEL_HINTS_BY_GPU.get(gpu, {}).get((kind, tile), ()):
        if rows >= min_rows:
            hints = entry
    return hints


# Rows up to which the one-row GEMV serves (it reads the weight once per row).
GEMV_MAX_ROWS = 2
# Bytes of each weight row a GEMV block reads per step.
GEMV_STEP_BYTES = 512


def linear_tiles(M: int, N: int, K: int, dtype: torch.dtype, gelu: bool = False, gpu: str = "",
                 gated: bool = False) -> tuple[str, tuple[int, ...]]:
    """("gemv", (BLOCK_N, BLOCK_K)) or ("gemm", (BLOCK_M, BLOCK_N, BLOCK_K)) for one problem size
    (N: weight rows read, both halves of a gated weight) on the GPU named ``gpu`` (WIDE_TILES_BY_GPU).

    K steps are counted in bytes where the dtype matters (fp32 tiles move as many bytes as bf16
    ones). The emulator pays per block and per tile operation, not per element: there it takes
    larger tiles, though none the compile check (which compiles the emulated launches for the GPU)
    would take long over."""
    if EMULATED:
        block_k = min(next_power_of_2(K), 128)
        if M <= GEMV_MAX_ROWS:
            return "gemv", (min(next_power_of_2(N), 128), block_k)
        return "gemm", (min(next_power_of_2(M), 256), min(next_power_of_2(N), 128), block_k)
    step = 128 // dtype.itemsize
    if M <= GEMV_MAX_ROWS:
        # Weight rows x bytes per step from glm_asr_lab/tuning/sweep_cutile_fast.py, each launch reading
        # weights that miss L2 as in a decode step (H100, docs/performance.md, 2026-11-26 night): 32 rows
        # for the wide matrices (q|k|v, gate|up), 16 for the 2048-row ones; 512 bytes a step.
        return "gemv", (32 if N >= 3072 else 16, GEMV_STEP_BYTES // dtype.itemsize)
    if M <= 16:
        return "gemm", (16, 64, 2 * step)
    if M <= 64:
        # Still bound by reading the weight once: narrow column tiles give the SMs enough blocks.
        return "gemm", (64, 32, 2 * step)
    wide_from = WIDE_TILES_BY_GPU.get(gpu, {}).get((N, K, dtype))
    if wide_from is not None and M >= wide_from and not gated:
        return "gemm", (128, 256, step)
    if gelu:
        # The exact GELU's polynomial in the epilogue needs registers beside a 128 x 128 accumulator.
        return "gemm", (64, 128, step)
    return "gemm", (128, 128, step)


def _rows_of(t: torch.Tensor, what: str) -> torch.Tensor:
    rows = as_rows(t)
    if rows.stride(1) != 1:
        raise ValueError(f"{what}: the last dim must be contiguous, got strides {tuple(t.stride())}")
    return rows


def _launch(x, weight, bias, out, *, gelu=False, accumulate=False, gated=False, prologue=AS_STORED,
            norm_weight=None, eps=0.0, precision="tf32", tiles=None, hints=None):
    """The shared launcher. tiles: linear_tiles' choice overridden; hints: KERNEL_HINTS_BY_GPU's
    (glm_asr_lab/tuning/sweep_cutile_fast.py)."""
    rows = _rows_of(x, "linear x")
    M, K = rows.shape
    N = weight.shape[0] // 2 if gated else weight.shape[0]
    if weight.shape[1] != K or weight.stride(1) != 1 or weight.dtype != x.dtype:
        raise ValueError(f"linear: weight {tuple(weight.shape)} {weight.dtype} does not fit x {tuple(x.shape)} "
                         f"{x.dtype} or its rows are not contiguous")
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"linear: precision must be 'tf32' or 'ieee', got {precision!r}")
    if out is None:
        out = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
    out_rows = _rows_of(out, "linear out")
    gpu = gpu_name(x.device)
    kind, tile = tiles or linear_tiles(M, weight.shape[0], K, x.dtype, gelu, gpu, gated)
    if hints is None:
        hints = kernel_hints(gpu, ("gated " if gated else "") + kind, tile, M)
    kernel = with_hints(gemv_kernel if kind == "gemv" else gemm_kernel, hints)
    # Unused array arguments get any array of the right kind: the constant flags compile their loads away.
    bias_arg = weight[0] if bias is None else bias
    if kind == "gemv":
        block_n, block_k = tile
        if gated and tiles is None:
            block_n = max(1, block_n // 2)  # a gated block reads BLOCK_N gate rows and BLOCK_N up rows
        launch((cdiv(N, block_n), M), kernel, rows, weight, bias_arg,
               weight[0] if norm_weight is None else norm_weight, out_rows, float(eps), prologue, bias is not None,
               gelu, accumulate, gated, block_n, block_k, stats_block(K) if prologue == RMSNORM else block_k, pdl=True)
        return out
    if prologue != AS_STORED:
        raise ValueError("the RMSNorm prologue belongs to the one-row GEMV")
    block_m, block_n, block_k = tile
    launch((cdiv(M, block_m), cdiv(N, block_n)), kernel, rows, weight, bias_arg, out_rows, bias is not None,
           gelu, accumulate, gated, precision == "tf32", block_m, block_n, block_k)
    return out


# Rows a norm block takes. LayerNorm: 4 on every GPU (1,500 x 1,280 on an H100: 8.7 us against 13.5 at the
# course's 2; 2026-11-26 night). RMSNorm: the course's rows_per_block, or NORM_ROWS_BY_GPU's where a GPU's
# occupancy hint makes fewer rows faster: one row at the defaults is the slowest choice (a 3,765-token
# prompt on an H100: 35.6 us, against 24.1 at the course's 2). The emulator pays per block: there a block
# takes at least the course's rows.
DEFAULT_NORM_ROWS = {"layernorm": 4}
NORM_ROWS_BY_GPU = {"NVIDIA H100 80GB HBM3": {"rmsnorm": 1}, "NVIDIA H200": {"rmsnorm": 1}}


def norm_rows(kind: str, gpu: str, n_rows: int, block: int) -> int:
    """Rows a ``kind`` ("layernorm" or "rmsnorm") block takes over n_rows rows of ``block`` lanes on ``gpu``."""
    course = rows_per_block(n_rows, block)
    if EMULATED:
        return max(course, DEFAULT_NORM_ROWS.get(kind, 1))
    return NORM_ROWS_BY_GPU.get(gpu, {}).get(kind) or DEFAULT_NORM_ROWS.get(kind, course)


def _norm(kind: str, kernel, x: torch.Tensor, params: tuple, eps: float, per_block: int | None = None,
          hints: dict | None = None) -> torch.Tensor:
    """The shared norm launcher. per_block: norm_rows' choice overridden; hints: KERNEL_HINTS_BY_GPU's
    (glm_asr_lab/tuning/sweep_cutile_fast.py)."""
    rows = _rows_of(x, kind + " x")
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = next_power_of_2(rows.shape[1])
    gpu = gpu_name(x.device)
    per_block = per_block or norm_rows(kind, gpu, rows.shape[0], block)
    if hints is None:
        hints = kernel_hints(gpu, kind, (per_block, block), rows.shape[0])
    launch((cdiv(rows.shape[0], per_block),), with_hints(kernel, hints), rows, *params, y, float(eps), per_block,
           block)
    return y.view(x.shape)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """torch.nn.functional.layer_norm over the last dimension: the course's layernorm_kernel."""
    return _norm("layernorm", layernorm_kernel, x, (weight, bias), eps)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, in x.dtype: the course's rmsnorm_kernel."""
    return _norm("rmsnorm", rmsnorm_kernel, x, (weight,), eps)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, gelu: bool = False,
           accumulate_into: torch.Tensor | None = None, precision: str, tiles=None) -> torch.Tensor:
    """[accumulate_into +] [gelu](x @ weight^T + bias), in x.dtype.

    x: (..., K) rows with a contiguous last dim; weight: (N, K), nn.Linear layout. accumulate_into:
    (..., N), updated in place and returned (a residual stream). precision: "tf32" or "ieee" for fp32
    operands (glm_asr_course/model/precision.py), ignored for bf16. tiles: linear_tiles' choice overridden.
    """
    return _launch(x, weight, bias, accumulate_into, gelu=gelu, accumulate=accumulate_into is not None,
                   precision=precision, tiles=tiles)


def rms_linear(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, weight: torch.Tensor, *,
               precision: str) -> torch.Tensor:
    """rmsnorm(x) @ weight^T: the RMSNorm inside the GEMV for a decode row, else ``rmsnorm`` then the GEMM."""
    if as_rows(x).shape[0] <= GEMV_MAX_ROWS:
        return _launch(x, weight, None, None, prologue=RMSNORM, norm_weight=norm_weight, eps=eps, precision=precision)
    return linear(rmsnorm(x, norm_weight, eps), weight, precision=precision)


def llama_mlp(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, gate_up_weight: torch.Tensor,
              down_weight: torch.Tensor, *, precision: str) -> torch.Tensor:
    """The decoder layer's second half, in place: x += down(silu(gate(h)) * up(h)), h = rmsnorm(x).

    gate_up_weight: (2F, H), rows [gate_proj; up_proj]. For decode rows, two GEMVs: gate|up of the
    normalised row (RMSNorm in the prologue, SwiGLU in the epilogue), then down with the residual in
    its epilogue. For more rows: rmsnorm, the gated GEMM (SwiGLU epilogue), down (+ x).
    """
    if as_rows(x).shape[0] <= GEMV_MAX_ROWS:
        activated = _launch(x, gate_up_weight, None, None, gated=True, prologue=RMSNORM, norm_weight=norm_weight,
                            eps=eps, precision=precision)
    else:
        activated = _launch(rmsnorm(x, norm_weight, eps), gate_up_weight, None, None, gated=True, precision=precision)
    return linear(activated, down_weight, accumulate_into=x, precision=precision)


# ---------------------------------------------------------------------------------------------
# Self-check: each launcher against plain torch on random inputs seeded by the sizes checked
# ---------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck

    check = SelfCheck("fast_linear.py", EMULATED, cpu_runner="cuTile emulator", decorator="@ct.kernel")
    on_gpu, dev = check.on_gpu, check.device
    bf16 = torch.bfloat16
    # The model's sizes on a GPU; small odd stand-ins in the emulator.
    tokens, E, F_enc, H, F = (1500, 1280, 5120, 2048, 6144) if on_gpu else (33, 40, 48, 96, 80)
    # Seeded by the sizes, as kernel_cases seeds a case by its id: a failure recurs when run again.
    case = f"fast_linear tokens={tokens} E={E} F_enc={F_enc} H={H} F={F}"
    gen = torch.Generator().manual_seed(zlib.crc32(case.encode()))

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=dev, dtype=bf16)

    def f32(t):
        return t.float()

    eps = 1e-5
    w1, b1 = rand(F_enc, E, scale=E ** -0.5), rand(F_enc)
    w2, b2 = rand(E, F_enc, scale=F_enc ** -0.5), rand(E)
    # On a GPU two windows too: from 3,000 rows a GPU may take WIDE_TILES_BY_GPU's tiles.
    for rows in (tokens, 2 * tokens) if on_gpu else (tokens,):
        x1 = rand(rows, E)
        check.check("gemm_kernel[bias, gelu]", lambda x1=x1: linear(x1, w1, b1, gelu=True, precision="tf32"),
                    lambda x1=x1: torch.nn.functional.gelu(f32(x1) @ f32(w1).T + f32(b1)),
                    f"{rows}x{E}->{F_enc} bf16", 1e-2)
        r2, x2 = rand(rows, E), rand(rows, F_enc)
        out2 = torch.empty_like(r2)
        check.check("gemm_kernel[bias, residual]",
                    lambda r2=r2, x2=x2, out2=out2: linear(x2, w2, b2, accumulate_into=out2.copy_(r2),
                                                           precision="tf32"),
                    lambda r2=r2, x2=x2: f32(x2) @ f32(w2).T + f32(b2) + f32(r2), f"{rows}x{F_enc}->{E} bf16", 1e-2)
    norm_w = rand(H)

    def rms(t):
        return f32(t) * torch.rsqrt(f32(t).pow(2).mean(-1, keepdim=True) + eps) * f32(norm_w)

    w_gu, w_down = rand(2 * F, H, scale=H ** -0.5), rand(H, F, scale=F ** -0.5)

    def mlp_reference(x):
        h = rms(x)
        return f32(x) + (torch.nn.functional.silu(h @ f32(w_gu[:F]).T) * (h @ f32(w_gu[F:]).T)) @ f32(w_down).T

    for rows in (1, 59):
        x = rand(rows, H, scale=3.0)
        work = torch.empty_like(x)
        check.check(f"llama_mlp[M={rows}]",
                    lambda x=x, work=work: llama_mlp(work.copy_(x), norm_w, eps, w_gu, w_down, precision="tf32"),
                    lambda x=x: mlp_reference(x), f"{rows}x{H}->{F}->{H} bf16", 1e-2, graph=on_gpu)
    x_row = rand(1, H, scale=3.0)
    w_qkv = rand(3 * H // 2, H, scale=H ** -0.5)
    check.check("gemv_kernel[rmsnorm prologue]",
                lambda: rms_linear(x_row, norm_w, eps, w_qkv, precision="tf32"),
                lambda: rms(x_row) @ f32(w_qkv).T, f"1x{H}->{3 * H // 2} bf16", 1e-2, graph=on_gpu)
    x_o, r_o, w_o = rand(1, H), rand(1, H), rand(H, H, scale=H ** -0.5)
    out_o = torch.empty_like(r_o)
    check.check("gemv_kernel[residual]", lambda: linear(x_o, w_o, accumulate_into=out_o.copy_(r_o), precision="tf32"),
                lambda: f32(x_o) @ f32(w_o).T + f32(r_o), f"1x{H}->{H} bf16", 1e-2, graph=on_gpu)
    check.finish()


if __name__ == "__main__":
    _self_check()
