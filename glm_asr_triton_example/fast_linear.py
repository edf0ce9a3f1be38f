"""The fast path's linear layers: tiled tensor-core GEMMs and a CUDA-core GEMV, with fused epilogues.

    fused_linear_kernel     one (BLOCK_M, BLOCK_N) tile over a K slice: bias, exact GELU, SwiGLU
                            (gate and up accumulated in the same loop) and the residual add in the
                            epilogue; grouped tile order for L2 reuse; split K into fp32 partials
    splitk_epilogue_kernel  sums the split-K partials and applies the same epilogue
    tma_linear_kernel       fused_linear_kernel's tiles with x and W fetched by TMA tensor descriptors,
                            optionally persistent (one program per SM): the encoder's GEMMs
    gemv_kernel             one row (decode at batch 1) on the CUDA cores; its prologue can compute
                            the input from what the previous kernel would have produced (RMSNorm of
                            the row, or SiLU(gate) * up), its epilogue adds the residual

``linear``, ``swiglu_linear`` and ``llama_mlp`` pick the kernel and its tiles
from a table (``_linear_config``) built from sweeps at the real shapes (glm_asr_lab/tuning/sweep_linear.py;
docs/performance.md has the numbers). Every kernel rounds to the activation dtype where
transformers does (a Linear's output before GELU or the residual add, SwiGLU's four roundings).

Self-check: python -m glm_asr_triton_example.fast_linear  (without a GPU: the Triton interpreter)
"""

import functools
import zlib

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from glm_asr_course.runtimes import gpu_name
from glm_asr_course.runtimes.triton_helpers import (INTERPRET, as_rows, dot, fma_dot, pdl_options, release_consumer,
                                                    round_to, wait_for_producer)

from .layers import rmsnorm


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Map a flat program id to a (row tile, column tile), GROUP_M row tiles at a time.

    Consecutive programs walk down a band of GROUP_M row tiles before stepping to the next column,
    so the programs running together share both their x rows and their weight columns in L2.
    """
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    band = pid // (GROUP_M * tiles_n)
    first_m = band * GROUP_M
    band_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    in_band = pid - band * GROUP_M * tiles_n
    return first_m + in_band % band_rows, in_band // band_rows


@triton.jit
def _store_linear(acc, offs_m, offs_n, M, N, bias_ptr, residual_ptr, stride_rm, out_ptr, stride_om,
                  APPLY_GELU: tl.constexpr):
    """out = [residual +] [gelu](acc [+ bias]), rounded to the output dtype where torch rounds."""
    out_dtype = out_ptr.dtype.element_ty
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    y = acc
    if bias_ptr is not None:
        y += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if APPLY_GELU:
        # nn.Linear hands GELU an output already rounded to the activation dtype.
        y = round_to(y, out_dtype).to(tl.float32)
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    if residual_ptr is not None:
        residual = tl.load(residual_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
        y = round_to(y, out_dtype).to(tl.float32) + residual.to(tl.float32)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], round_to(y, out_dtype), mask=mask)


@triton.jit
def _swiglu(gate, up, dtype: tl.constexpr):
    """silu(gate) * up in ``dtype``, rounded where HF's LlamaMLP rounds: gate, up, silu(gate), the product."""
    gate = round_to(gate, dtype).to(tl.float32)
    up = round_to(up, dtype).to(tl.float32)
    activated = round_to(gate / (1.0 + tl.exp(-gate)), dtype).to(tl.float32)
    return round_to(activated * up, dtype)


@triton.jit
def _store_swiglu(gate, up, offs_m, offs_n, M, N, out_ptr, stride_om):
    """out = silu(gate) * up (_swiglu's rounding) for one output tile."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], _swiglu(gate, up, out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _store_partial_sums(acc, offs_m, offs_n, M, N, split, first_col, GATED: tl.constexpr, partial_ptr):
    """fp32 partial sums of one K slice into partial[split, m, first_col + n], (SPLIT_K, M, N or 2N)."""
    partial_cols = 2 * N if GATED else N
    ptrs = partial_ptr + (split * M + offs_m[:, None]) * partial_cols + first_col + offs_n[None, :]
    tl.store(ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def fused_linear_kernel(
    x_ptr, w_ptr, bias_ptr, residual_ptr, out_ptr, partial_ptr,
    M, N, K, stride_xm, stride_wn, stride_rm, stride_om, k_per_split,
    SPLIT_K: tl.constexpr,
    APPLY_GELU: tl.constexpr, GATED: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PDL: tl.constexpr,
):
    """One (BLOCK_M, BLOCK_N) output tile over one K slice of x @ W^T.

    GATED: W is [gate; up], (2N, K); the same K loop also accumulates the up rows N + n, so each
    x tile is loaded once for both products. With SPLIT_K > 1 (grid axis 1) each program covers
    k_per_split columns of K and writes its fp32 partial sums to partial_ptr, (SPLIT_K, M, N or 2N);
    splitk_epilogue_kernel adds them up and applies the epilogue.
    """
    release_consumer(PDL)
    wait_for_producer(PDL)
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    split = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = split * k_per_split + tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if GATED:
        up_ptrs = w_ptrs + N * stride_wn
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_step in range(0, k_per_split, BLOCK_K):
        k_mask = offs_k < K - k_step
        x_tile = tl.load(x_ptrs + k_step, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        w_tile = tl.load(w_ptrs + k_step, mask=n_mask[:, None] & k_mask[None, :], other=0.0)
        acc = dot(x_tile, tl.trans(w_tile), acc, INPUT_PRECISION)
        if GATED:
            up_tile = tl.load(up_ptrs + k_step, mask=n_mask[:, None] & k_mask[None, :], other=0.0)
            acc_up = dot(x_tile, tl.trans(up_tile), acc_up, INPUT_PRECISION)

    if SPLIT_K == 1:
        if GATED:
            _store_swiglu(acc, acc_up, offs_m, offs_n, M, N, out_ptr, stride_om)
        else:
            _store_linear(acc, offs_m, offs_n, M, N, bias_ptr, residual_ptr, stride_rm, out_ptr, stride_om,
                          APPLY_GELU)
    else:
        _store_partial_sums(acc, offs_m, offs_n, M, N, split, 0, GATED, partial_ptr)
        if GATED:
            _store_partial_sums(acc_up, offs_m, offs_n, M, N, split, N, GATED, partial_ptr)


@triton.jit
def tma_linear_kernel(
    x_desc, w_desc, bias_ptr, residual_ptr, out_ptr,
    M, N, K, stride_rm, stride_om,
    APPLY_GELU: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PERSISTENT: tl.constexpr, PDL: tl.constexpr,
):
    """fused_linear_kernel's tiles (no split K, no gate) with x and W tiles fetched by the TMA unit.

    A tensor descriptor names a tile by its corner; the copy engine computes the addresses, fills
    rows past M or N and columns past K with zeros, and lands the tile in shared memory already
    swizzled for the tensor cores, so the warps only issue the matmuls (fp32 tiles at "tf32" excepted:
    dot rounds them to nearest in registers first). PERSISTENT: one program per
    SM walks the tiles (flattened into one software-pipelined loop, so the next tile's loads
    overlap this tile's epilogue); otherwise one program per tile.
    """
    release_consumer(PDL)
    wait_for_producer(PDL)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    step = tl.num_programs(0) if PERSISTENT else tiles
    for tile in tl.range(tl.program_id(0), tiles, step, flatten=PERSISTENT):
        pid_m, pid_n = _grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            x_tile = x_desc.load([pid_m * BLOCK_M, k])
            w_tile = w_desc.load([pid_n * BLOCK_N, k])
            acc = dot(x_tile, w_tile.T, acc, INPUT_PRECISION)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        _store_linear(acc, offs_m, offs_n, M, N, bias_ptr, residual_ptr, stride_rm, out_ptr, stride_om,
                      APPLY_GELU)


@triton.jit
def _inv_rms(x_ptr, K, eps, BLOCK_K: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) of one row of K values, in fp32."""
    offs = tl.arange(0, BLOCK_K)
    squares = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k_step in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + k_step + offs, mask=offs < K - k_step, other=0.0).to(tl.float32)
        squares += x * x
    return tl.math.rsqrt(tl.sum(squares, axis=0) / K + eps)


@triton.jit
def _gemv_input(x_ptr, norm_weight_ptr, offs_k, k_mask, K, inv_rms, PROLOGUE: tl.constexpr, dtype: tl.constexpr):
    """The GEMV's input values at offs_k, in fp32, after the prologue the weight should see.

    "rmsnorm": x is the raw hidden row; returns rmsnorm(x) * weight with rmsnorm_kernel's rounding.
    "swiglu": x is [gate (K) | up (K)] as the gate/up GEMV stored them; returns _swiglu(gate, up).
    "none": x as stored.
    """
    x = tl.load(x_ptr + offs_k, mask=k_mask, other=0.0).to(tl.float32)
    if PROLOGUE == "rmsnorm":
        normed = round_to(x * inv_rms, dtype).to(tl.float32)
        weight = tl.load(norm_weight_ptr + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        x = round_to(normed * weight, dtype).to(tl.float32)
    elif PROLOGUE == "swiglu":
        up = tl.load(x_ptr + K + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        x = _swiglu(x, up, dtype).to(tl.float32)
    return x


@triton.jit
def gemv_rows(x_ptr, w_ptr, norm_weight_ptr, offs_n, n_mask, k_start, k_len, K, stride_wn, eps,
              PROLOGUE: tl.constexpr, PDL: tl.constexpr, BLOCK_K: tl.constexpr, dtype: tl.constexpr):
    """sum_k W[n, k] * input[k] over k in [k_start, k_start + k_len), in fp32, for the rows offs_n
    (any set of weight rows; RoPE's epilogue takes pairs half a head apart).

    The input is x after PROLOGUE ("none", "rmsnorm", "swiglu", see _gemv_input). Each thread
    multiplies its 16-byte vectors of W by the input and keeps lane-wise partial sums; the
    cross-lane reduction happens once, after the loop. With PDL the first step's weights are loaded
    before waiting for the previous kernel (they never depend on it), so that load overlaps its tail.
    """
    offs_k = k_start + tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
    k_mask = offs_k < K
    w_tile = tl.load(w_ptrs, mask=n_mask[:, None] & k_mask[None, :], other=0.0)
    wait_for_producer(PDL)
    inv_rms = 0.0
    if PROLOGUE == "rmsnorm":
        inv_rms = _inv_rms(x_ptr, K, eps, BLOCK_K)
    x_row = _gemv_input(x_ptr, norm_weight_ptr, offs_k, k_mask, K, inv_rms, PROLOGUE, dtype)
    acc = w_tile.to(tl.float32) * x_row[None, :]
    for k_step in range(BLOCK_K, k_len, BLOCK_K):
        k_mask = offs_k < K - k_step
        x_row = _gemv_input(x_ptr, norm_weight_ptr, k_step + offs_k, k_mask, K, inv_rms, PROLOGUE, dtype)
        w_tile = tl.load(w_ptrs + k_step, mask=n_mask[:, None] & k_mask[None, :], other=0.0)
        acc += w_tile.to(tl.float32) * x_row[None, :]
    return tl.sum(acc, axis=1)


@triton.jit
def gemv_kernel(
    x_ptr, w_ptr, bias_ptr, residual_ptr, out_ptr, partial_ptr, norm_weight_ptr, N, K, stride_wn, k_per_split, eps,
    SPLIT_K: tl.constexpr, APPLY_GELU: tl.constexpr, PROLOGUE: tl.constexpr, PDL: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One output row (M = 1): BLOCK_N outputs over one K slice, on the CUDA cores.

    A single row leaves a tensor-core tile nothing to reuse, and the time is all in streaming W.
    Same split-K and epilogue contract as fused_linear_kernel (ungated). PROLOGUE folds the kernel
    that would have produced x into this one: every program recomputes it from the few kilobytes
    of x, which L2 serves, instead of a launch and a round trip through memory.
    """
    release_consumer(PDL)
    split = tl.program_id(1)
    offs_m = tl.arange(0, 1)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = gemv_rows(x_ptr, w_ptr, norm_weight_ptr, offs_n, offs_n < N, split * k_per_split, k_per_split, K,
                      stride_wn, eps, PROLOGUE, PDL, BLOCK_K, out_ptr.dtype.element_ty)[None, :]
    if SPLIT_K == 1:
        _store_linear(total, offs_m, offs_n, 1, N, bias_ptr, residual_ptr, 0, out_ptr, 0, APPLY_GELU)
    else:
        _store_partial_sums(total, offs_m, offs_n, 1, N, split, 0, False, partial_ptr)


@triton.jit
def splitk_epilogue_kernel(
    partial_ptr, bias_ptr, residual_ptr, out_ptr, M, N, stride_rm, stride_om,
    SPLIT_K: tl.constexpr, APPLY_GELU: tl.constexpr, GATED: tl.constexpr, PDL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    release_consumer(PDL)
    wait_for_producer(PDL)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    partial_cols = 2 * N if GATED else N
    ptrs = partial_ptr + offs_m[:, None] * partial_cols + offs_n[None, :]
    # The split order is fixed, so the sum (and the output) is the same on every run.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for split in range(SPLIT_K):
        acc += tl.load(ptrs + split * M * partial_cols, mask=mask, other=0.0)
    if GATED:
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for split in range(SPLIT_K):
            acc_up += tl.load(ptrs + split * M * partial_cols + N, mask=mask, other=0.0)
        _store_swiglu(acc, acc_up, offs_m, offs_n, M, N, out_ptr, stride_om)
    else:
        _store_linear(acc, offs_m, offs_n, M, N, bias_ptr, residual_ptr, stride_rm, out_ptr, stride_om, APPLY_GELU)


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: any small number gives a few programs per launch
    return torch.cuda.get_device_properties(device).multi_processor_count


# One-row GEMV tiles that beat the rule in _linear_config on one GPU, by the name CUDA gives it:
# {(N, K, dtype): (BLOCK_N, BLOCK_K in bytes, num_warps, num_stages)}. A GPU, shape or dtype not listed takes
# the rule, which glm_asr_lab/tuning/sweep_linear.py's decode section chose on an H100, each launch timed alone.
GEMV_TILES_BY_GPU = {
    # Chosen inside the decode step (sweep_step.py; docs/performance.md, 2026-11-27 i, call 1): 1,038 us a step
    # against the earlier row's 1,061; q|k|v -26 us, gate|up -20, down -19.
    "NVIDIA H200": {(3072, 2048, torch.bfloat16): (16, 2048, 4, 2),
                    (12288, 2048, torch.bfloat16): (8, 2048, 4, 2),
                    (2048, 6144, torch.bfloat16): (16, 4096, 8, 2)},
    # Chosen inside the decode step (glm_asr_lab/tuning/sweep_step.py; docs/performance.md, 2026-11-27 h): 1,258 us
    # a step against the rule's 1,299; q|k|v -31 us, gate|up -32, down -3 (just past the rule's own spread). On 4
    # warps the rule's 8 x 4 KiB tile takes 255 registers a thread (ptxas, sm_90a): two programs fill an SM.
    "NVIDIA H100 80GB HBM3": {(3072, 2048, torch.bfloat16): (16, 2048, 4, 2),
                              (12288, 2048, torch.bfloat16): (8, 2048, 4, 2),
                              (2048, 6144, torch.bfloat16): (16, 4096, 8, 2)},
}


# Rows at or below which a launch is bound by reading the weight once (decode: M = batch size).
SKINNY_MAX_M = 16
# Up to this many rows (a short prompt) one row tile covers M and the weight is still read once.
ONE_TILE_MAX_M = 64

# Tiles for M > ONE_TILE_MAX_M: (BLOCK_M, BLOCK_N, num_warps, throughput relative to 128x128). The
# rates were read off an H200 and an H100 in bf16 (K = 1280..6144; glm_asr_lab/tuning/sweep_linear.py): smaller
# tiles run slower per element but fill the last wave of a small grid better, and _linear_config
# weighs the two.
_GEMM_TILES = ((128, 256, 8, 1.2), (128, 128, 8, 1.0), (64, 128, 4, 0.85), (64, 64, 4, 0.7))


def _linear_config(M: int, N: int, K: int, dtype: torch.dtype, gated: bool, sms: int, *,
                   fma: bool = False, gpu: str = "") -> tuple[str, dict]:
    """("gemv" | "gemm" | "tma", launch options) for one problem size.

    A hand-picked table instead of autotuning: nothing is benchmarked on a first call (which would
    also break CUDA-graph capture) and every run makes the same choice. Sizes are in bytes where the
    dtype matters, so fp32 gets the same shared memory per stage as bf16. N counts output features;
    a gated launch holds two accumulators of (BLOCK_M, BLOCK_N). The entries come from
    glm_asr_lab/tuning/sweep_linear.py on an H100 (docs/performance.md); the figures quoted are bf16 there.
    fma: the tiled kernels' dot runs as FMAs on the CUDA cores (IEEE fp32, triton_helpers.fma_dot),
    holding its operand slices in registers: shorter K steps, smaller tiles, no TMA.
    gpu: the GPU's name, for the one-row tiles tuned on it (GEMV_TILES_BY_GPU).
    """
    if INTERPRET:
        return _interpreter_linear_config(M, N, K, gated)
    elem_bytes = dtype.itemsize
    if M == 1 and not gated:
        # The rule, where GEMV_TILES_BY_GPU has no tile: 8 weight rows x 4 KiB per step, so each thread
        # of 4 warps keeps eight 16-byte loads in flight (8 warps for long rows); on an H100 faster than
        # 4 rows x 2 KiB on both the gate|up and the down matrix (docs/performance.md). Split K only when
        # N is too narrow to give every SM a program.
        block_n, k_bytes, warps, stages = GEMV_TILES_BY_GPU.get(gpu, {}).get(
            (N, K, dtype), (8, 4096, 8 if K >= 4096 else 4, 2))
        block_k = k_bytes // elem_bytes
        split = max(1, min(sms // triton.cdiv(N, block_n), K // (2 * block_k)))
        return "gemv", dict(BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, num_warps=warps, num_stages=stages)
    if M <= SKINNY_MAX_M:
        # One 16-row tensor-core tile covers every row (padding rows read as zeros); 32 weight rows
        # x 1 KiB per step (512 B when gated, to fit three stages of two weight tiles), split K in
        # two when the column tiles cannot fill the SMs and K is long. An FMA dot takes 128-byte
        # steps: at 1 KiB its operand slices spill (IEEE fp32, ptxas on sm_90a: 308 bytes a thread).
        block_n, block_k = 32, (128 if fma else 512 if gated else 1024) // elem_bytes
        split = 2 if triton.cdiv(N, block_n) < sms and K > 4 * block_k else 1
        return "gemm", dict(BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=1, SPLIT_K=split,
                            num_warps=4, num_stages=3)
    if M <= ONE_TILE_MAX_M:
        # Still bound by the weight: narrow column tiles, 256-byte K steps, and split K until the
        # SMs hold about two programs each (a short prompt's q|k|v, gate|up and down all gain;
        # docs/performance.md). An FMA dot takes 128-byte steps (a gated one spills at 256).
        block_n = 32
        tiles = triton.cdiv(N, block_n)
        split = 1 if tiles >= sms else max(1, min(4, triton.cdiv(2 * sms, tiles), K // 512))
        return "gemm", dict(BLOCK_M=64, BLOCK_N=block_n, BLOCK_K=(128 if fma else 256) // elem_bytes, GROUP_M=1,
                            SPLIT_K=split, num_warps=4, num_stages=3)

    def cost(tile):
        block_m, block_n, _, rate = tile
        waves = triton.cdiv(triton.cdiv(M, block_m) * triton.cdiv(N, block_n), sms)
        return waves * block_m * block_n / rate

    # Accumulator values per thread: a tensor-core tile may hold 128 (128 x 256 on 8 warps, or a gated
    # 128 x 128, whose two accumulators and two weight tiles per step fill an SM at 128 x 256: a long
    # prompt's gate|up). An FMA dot also holds its operand slices in registers, so half that: IEEE
    # fp32 at 128 x 128 spills nothing, at 128 x 256 808 bytes a thread (ptxas on sm_90a).
    per_thread = 64 if fma else 128
    tiles_allowed = [t for t in _GEMM_TILES if t[0] * t[1] * (2 if gated else 1) <= per_thread * 32 * t[2]]
    block_m, block_n, warps, _ = min(tiles_allowed, key=cost)
    # 128-byte K steps: one swizzled shared-memory row of a TMA tile in either dtype.
    block_k = 128 // elem_bytes
    # Split K only when the tiles leave most SMs idle and K is long: the fp32 partials cost a
    # round trip through memory and a launch (the encoder's fc2, 120 tiles on 132 SMs, is faster
    # whole than split in three).
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    split = min(triton.cdiv(2 * sms, tiles), K // 1024) if K >= 4096 and 2 * tiles <= sms else 1
    stage_bytes = (block_m + (2 if gated else 1) * block_n) * block_k * elem_bytes
    # The TMA kernel takes neither a gate nor split K, and no FMA dot: compiled for IEEE fp32 it gets
    # 32 registers and a 5 KB stack a thread (10 KB of spill stores; ptxas on sm_90a), where the
    # plain-load kernel at the same 128 x 128 tile gets 255 registers and spills nothing.
    if gated or split > 1 or fma:
        stages = _stages_that_fit(4 if block_m == 128 and K > 2048 else 3, stage_bytes)
        return "gemm", dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SPLIT_K=split,
                            num_warps=warps, num_stages=stages)
    # The encoder's GEMMs (M = 1500) on an H100, TMA against plain loads at the same tile, bf16 /
    # fp32 in us: q|k|v 28.0 / 56.6 vs 31.5 / 73.9, o 10.7 / 20.5 vs 19.6 / 28.1, fc1 (128x256)
    # 45.0 / 80.9 vs 47.8 / 86.5, fc2 33.9 / 68.6 vs 38.4 / 98.9. 128x128 tiles gain from a
    # persistent schedule (the next tile's loads overlap this one's epilogue) and four stages;
    # 128x256 tiles, with twice the accumulator, do not.
    square = block_m == block_n == 128
    return "tma", dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SPLIT_K=1, PERSISTENT=square,
                       num_warps=warps, num_stages=_stages_that_fit(4 if square else 3, stage_bytes))


# Shared memory the pipelined tile loads may take: an H100 / H200 SM has 227 KiB per block; the rest
# is left for the epilogue's layout conversion, which Triton also stages through shared memory.
_STAGE_BUDGET_BYTES = 192 * 1024


def _stages_that_fit(stages: int, stage_bytes: int) -> int:
    """``stages``, or fewer (at least 2) when that many stages of ``stage_bytes`` exceed the budget."""
    return max(2, min(stages, _STAGE_BUDGET_BYTES // stage_bytes))


def one_row_gemv_config(N: int, K: int, dtype: torch.dtype, device: torch.device) -> dict:
    """The launch options _linear_config gives a one-row GEMV of (N, K), for kernels built on gemv_rows."""
    device = torch.device(device)
    kind, cfg = _linear_config(1, N, K, dtype, False, _sm_count(device), gpu=gpu_name(device))
    assert kind == "gemv"
    return cfg


def _tma_addressable(t: torch.Tensor) -> bool:
    """A 2-D tensor a TMA descriptor can address: 16-byte aligned start and row stride, unit column stride."""
    return t.data_ptr() % 16 == 0 and t.stride(0) * t.element_size() % 16 == 0 and t.stride(1) == 1


def _interpreter_linear_config(M: int, N: int, K: int, gated: bool) -> tuple[str, dict]:
    """The interpreter runs each program as NumPy calls, so the fewest, largest tiles are fastest."""
    block_k = min(triton.next_power_of_2(K), 512)
    if M == 1 and not gated:
        return "gemv", dict(BLOCK_N=min(triton.next_power_of_2(N), 512), BLOCK_K=block_k, SPLIT_K=1)
    return "gemm", dict(BLOCK_M=min(triton.next_power_of_2(M), 512), BLOCK_N=min(triton.next_power_of_2(N), 256),
                        BLOCK_K=block_k, GROUP_M=1, SPLIT_K=1)


def _launch_linear(x, weight, bias, residual, out, apply_gelu, gated, precision, *,
                   prologue="none", norm_weight=None, eps=0.0, config=None):
    """The shared launcher. prologue "rmsnorm" / "swiglu" (see _gemv_input) is fused into the GEMV;
    the tiled kernels get "rmsnorm" as a separate rmsnorm launch and do not take "swiglu".
    config: (kind, launch options) in place of _linear_config's choice (glm_asr_lab/tuning/sweep_linear.py)."""
    rows = as_rows(x)
    M, K = rows.shape
    if prologue == "swiglu":
        K //= 2  # x holds [gate | up]
    N = weight.shape[0] // 2 if gated else weight.shape[0]
    if weight.shape[1] != K:
        raise ValueError(f"weight {tuple(weight.shape)} does not match x (..., {K})")
    if weight.dtype != x.dtype or weight.stride(1) != 1:
        raise ValueError("weight must have x's dtype and contiguous rows")
    if out is None:
        out = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
    out_rows = as_rows(out)
    residual_rows = None if residual is None else as_rows(residual)
    stride_rm = 0 if residual_rows is None else residual_rows.stride(0)
    kind, cfg = config or _linear_config(M, N, K, x.dtype, gated, _sm_count(x.device),
                                         fma=fma_dot(x.dtype, precision), gpu=gpu_name(x.device))
    cfg = dict(cfg)
    if kind == "tma" and not (_tma_addressable(rows) and _tma_addressable(weight)):
        kind = "gemm"  # the same tiles through plain loads
        del cfg["PERSISTENT"]
    if kind != "gemv" and prologue == "rmsnorm":
        rows = rmsnorm(rows, norm_weight, eps)
    elif kind != "gemv" and prologue != "none":
        raise ValueError(f"the {prologue} prologue needs the one-row GEMV (M = {M})")
    split = cfg.pop("SPLIT_K")
    k_per_split = triton.cdiv(triton.cdiv(K, split), cfg["BLOCK_K"]) * cfg["BLOCK_K"]
    split = triton.cdiv(K, k_per_split)  # rounding k_per_split up can leave the last slices empty
    partial = None
    if split > 1:
        partial = torch.empty((split, M, 2 * N if gated else N), dtype=torch.float32, device=x.device)
    pdl = pdl_options(x.device)
    if kind == "gemv":
        gemv_kernel[(triton.cdiv(N, cfg["BLOCK_N"]), split)](
            rows, weight, bias, residual_rows, out_rows, partial, norm_weight, N, K, weight.stride(0), k_per_split,
            eps, SPLIT_K=split, APPLY_GELU=apply_gelu, PROLOGUE=prologue, **pdl, **cfg,
        )
    elif kind == "tma":
        if gated or split > 1:
            raise ValueError("tma_linear_kernel takes neither a gate nor split K")
        x_desc = TensorDescriptor(rows, [M, K], [rows.stride(0), 1], [cfg["BLOCK_M"], cfg["BLOCK_K"]])
        w_desc = TensorDescriptor(weight, [N, K], [weight.stride(0), 1], [cfg["BLOCK_N"], cfg["BLOCK_K"]])
        tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
        tma_linear_kernel[(min(tiles, _sm_count(x.device)) if cfg["PERSISTENT"] else tiles,)](
            x_desc, w_desc, bias, residual_rows, out_rows, M, N, K, stride_rm, out_rows.stride(0),
            APPLY_GELU=apply_gelu, INPUT_PRECISION=precision, **pdl, **cfg,
        )
    else:
        fused_linear_kernel[(triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), split)](
            rows, weight, bias, residual_rows, out_rows, partial,
            M, N, K, rows.stride(0), weight.stride(0), stride_rm, out_rows.stride(0), k_per_split,
            SPLIT_K=split, APPLY_GELU=apply_gelu, GATED=gated, INPUT_PRECISION=precision, **pdl, **cfg,
        )
    if split > 1:
        block_n = 128
        splitk_epilogue_kernel[(triton.cdiv(M, SKINNY_MAX_M), triton.cdiv(N, block_n))](
            partial, bias, residual_rows, out_rows, M, N, stride_rm, out_rows.stride(0),
            SPLIT_K=split, APPLY_GELU=apply_gelu, GATED=gated, BLOCK_M=SKINNY_MAX_M, BLOCK_N=block_n,
            num_warps=4, **pdl,
        )
    return out


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    gelu: bool = False,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    rms_norm: tuple[torch.Tensor, float] | None = None,
    precision: str,
) -> torch.Tensor:
    """out = [gelu](x @ weight^T + bias) + residual, in x.dtype.

    x: (..., K), rows contiguous (a strided 2-D row view such as hidden[:, -1] is fine).
    weight: (N, K), nn.Linear layout. bias: (N,) or None. gelu: the exact (erf) GELU.
    residual: (..., N) or None. out: preallocated (..., N) or None.
    rms_norm: (norm_weight, eps) to multiply rmsnorm(x) instead of x (as rmsnorm() would compute it).
    precision: for fp32 inputs "tf32" or "ieee" (glm_asr_course/model/precision.py); ignored for bf16.
    One row (decode, batch 1) runs gemv_kernel on the CUDA cores, with the RMSNorm fused in; up to
    SKINNY_MAX_M rows a 16-row tensor-core tile with split K; more rows the tiled GEMM.
    """
    norm_weight, eps = rms_norm if rms_norm is not None else (None, 0.0)
    return _launch_linear(x, weight, bias, residual, out, gelu, False, precision,
                          prologue="none" if rms_norm is None else "rmsnorm", norm_weight=norm_weight, eps=eps)


def swiglu_linear(
    x: torch.Tensor, gate_up_weight: torch.Tensor, out: torch.Tensor | None = None, *, precision: str
) -> torch.Tensor:
    """Llama MLP input half: out = silu(x @ W_gate^T) * (x @ W_up^T), shape (..., N).

    gate_up_weight is (2N, K): rows [0, N) are gate_proj.weight and rows [N, 2N) up_proj.weight,
    i.e. torch.cat([gate_proj.weight, up_proj.weight]) built once when the model loads.
    """
    return _launch_linear(x, gate_up_weight, None, None, out, False, True, precision)


def llama_mlp(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, gate_up_weight: torch.Tensor,
              down_weight: torch.Tensor, *, precision: str) -> torch.Tensor:
    """The decoder layer's second half, in place: x += down(silu(gate(h)) * up(h)), h = rmsnorm(x).

    x: (..., H), contiguous. For one row, two GEMVs: [gate | up] of the normalised row (the RMSNorm
    in its prologue), then down with silu(gate) * up computed in its prologue and the residual in
    its epilogue. For more rows: rmsnorm, the gated GEMM with SwiGLU epilogue, down (+ residual).
    """
    if as_rows(x).shape[0] == 1:
        gate_up = _launch_linear(x, gate_up_weight, None, None, None, False, False, precision,
                                 prologue="rmsnorm", norm_weight=norm_weight, eps=eps)
        return _launch_linear(gate_up, down_weight, None, x, x, False, False, precision, prologue="swiglu")
    activated = swiglu_linear(rmsnorm(x, norm_weight, eps), gate_up_weight, precision=precision)
    return linear(activated, down_weight, residual=x, out=x, precision=precision)


# ---------------------------------------------------------------------------------------------
# Self-check: each launcher against plain torch on random inputs seeded by the sizes checked
# ---------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck

    check = SelfCheck("fast_linear.py", INTERPRET)
    on_gpu, device = check.on_gpu, check.device
    bf16 = torch.bfloat16
    # The model's sizes on the GPU; small stand-ins (same code paths, odd widths) for the interpreter.
    rows, tokens, H, F = (512, 1500, 2048, 6144) if on_gpu else (17, 33, 96, 80)
    E_gemm, F_enc = (1280, 5120) if on_gpu else (40, 48)
    # Seeded by the sizes, as kernel_cases seeds a case by its id: a failure recurs when run again.
    case = f"fast_linear rows={rows} tokens={tokens} H={H} F={F} E={E_gemm} F_enc={F_enc}"
    gen = torch.Generator().manual_seed(zlib.crc32(case.encode()))

    def rand(*shape, dtype=bf16, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

    def f32(t):
        return t.to(torch.float32)

    eps, tf32 = 1e-5, "tf32"
    w1, b1 = rand(F_enc, E_gemm, scale=E_gemm**-0.5), rand(F_enc)
    x1 = rand(tokens, E_gemm)
    check.check("fused_linear_kernel[gelu]", lambda: linear(x1, w1, b1, gelu=True, precision=tf32),
                lambda: torch.nn.functional.gelu(f32(x1) @ f32(w1).T + f32(b1)),
                f"{tokens}x{E_gemm}->{F_enc} bf16", 1e-2)
    w2, b2, r2 = rand(E_gemm, F_enc, scale=F_enc**-0.5), rand(E_gemm), rand(tokens, E_gemm)
    x2 = rand(tokens, F_enc)
    check.check("fused_linear_kernel[resid]", lambda: linear(x2, w2, b2, residual=r2, precision=tf32),
                lambda: f32(x2) @ f32(w2).T + f32(b2) + f32(r2), f"{tokens}x{F_enc}->{E_gemm} bf16", 1e-2)
    wd, rd = rand(H, F, scale=F**-0.5), rand(4, H)
    for m, name in ((1, "gemv_kernel[M=1]"), (4, "fused_linear_kernel[M=4]")):
        xd = rand(m, F)
        check.check(name, lambda xd=xd, m=m: linear(xd, wd, residual=rd[:m], precision=tf32),
                    lambda xd=xd, m=m: f32(xd) @ f32(wd).T + f32(rd[:m]), f"{m}x{F}->{H} bf16", 1e-2)
    wgu = rand(2 * F, H, scale=H**-0.5)
    xu = rand(rows, H)
    check.check(f"swiglu_linear[M={rows}]", lambda: swiglu_linear(xu, wgu, precision=tf32),
                lambda: torch.nn.functional.silu(f32(xu) @ f32(wgu[:F]).T) * (f32(xu) @ f32(wgu[F:]).T),
                f"{rows}x{H}->{F} bf16", 1e-2)

    # Decode at batch 1: the RMSNorm and SwiGLU prologues of the GEMV (timed as CUDA graphs, as they run).
    w = rand(H)

    def rms(t):
        return f32(t) * torch.rsqrt(f32(t).pow(2).mean(-1, keepdim=True) + eps) * f32(w)

    x_row = rand(1, H, scale=3.0)
    w_qkv = rand(3 * H // 2, H, scale=H**-0.5)
    check.check("gemv_kernel[rmsnorm prologue]", lambda: linear(x_row, w_qkv, rms_norm=(w, eps), precision=tf32),
                lambda: rms(x_row) @ f32(w_qkv).T, f"1x{H}->{3 * H // 2} bf16", 1e-2, graph=on_gpu)
    x_mlp = torch.empty_like(x_row)
    check.check("llama_mlp[M=1]", lambda: llama_mlp(x_mlp.copy_(x_row), w, eps, wgu, wd, precision=tf32),
                lambda: f32(x_row) + (torch.nn.functional.silu(rms(x_row) @ f32(wgu[:F]).T)
                                      * (rms(x_row) @ f32(wgu[F:]).T)) @ f32(wd).T,
                f"1x{H}->{F}->{H} bf16", 1e-2, graph=on_gpu)
    check.finish()


if __name__ == "__main__":
    _self_check()
