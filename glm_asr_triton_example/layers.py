"""Triton kernels for GLM-ASR-Nano-2512 (Whisper-style encoder, projector, Llama decoder).

Each kernel sits next to its launcher. Two groups:

* Course kernels, one row or one tile per program, written to be read: ``rmsnorm``, ``layernorm``,
  ``gelu``, ``silu``, ``linear_tf32`` and ``softmax``.
* Production kernels the model calls: ``linear`` (a CUDA-core GEMV for one row, a 16-row
  tensor-core launch for decode batches, a tiled GEMM for prefill; optional split K; bias, exact
  GELU and residual add fused), ``swiglu_linear``, ``embed_tokens``, ``greedy_head``,
  ``lm_head_logits`` and ``argmax_rows``.

Launchers take and return torch tensors. Torch only allocates, views and launches: every arithmetic
operation runs inside a Triton kernel, in fp32, and results are stored in the activation dtype.

bf16 follows Hugging Face transformers: wherever the reference model materialises a bf16 tensor (a
Linear output before its activation, the normalised row before RMSNorm's weight, the gate and up
projections of the MLP, the logits), the kernels round to bf16 at the same point, so greedy decoding
picks the same tokens as the reference. ``round_to`` (see ``_triton_compat``) is that cast: plain on
the GPU, round-to-nearest-even under the interpreter too.

Under the interpreter (TRITON_INTERPRET=1, Triton 3.6) ``tl.dot`` multiplies bf16 operands as their
raw 16-bit patterns, so the GEMM kernels widen their tiles to fp32 first (exact) when interpreting.

Self-check: python glm_asr_triton_example/layers.py  (without a GPU it runs in the Triton interpreter)
"""

import functools
import time

import torch

if __name__ == "__main__":  # run as a script: python glm_asr_triton_example/layers.py
    from _script import package_of

    __package__ = package_of(__file__)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from ._triton_compat import FP32_PRECISION, INTERPRET, pdl_options, release_consumer, round_to, wait_for_producer  # noqa: E402

# A module-level constexpr is resolved when a kernel is compiled: the workaround costs nothing on GPU.
_INTERPRETER = tl.constexpr(INTERPRET)

# Elementwise kernels: 2048 elements over 4 warps is 16 per thread, two or four 16-byte vectors.
_ELEMENTWISE_BLOCK = 2048


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a (rows, width) view whose rows are contiguous; a strided 2-D row view stays as is."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t
    return t.view(-1, t.shape[-1])


def _warps_for_row(block: int) -> int:
    """About eight elements (one 16-byte bf16 vector) per thread; one warp for short rows, 16 at most."""
    return max(1, min(16, block // 256))


# ---------------------------------------------------------------------------------------------
# Course kernels
# ---------------------------------------------------------------------------------------------


# >>> STUDENT KERNEL rmsnorm_kernel
@triton.jit
def rmsnorm_kernel(x_ptr, weight_ptr, y_ptr, x_row_stride, y_row_stride, n_rows, N, eps,
                   BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight.

    x: (n_rows, N), row stride x_row_stride (in elements, last dim contiguous); weight: (N,);
    y: (n_rows, N), row stride y_row_stride, in the activation dtype (fp32 or bf16).
    Grid: (cdiv(n_rows, ROWS),). Program p normalises rows p*ROWS .. p*ROWS + ROWS - 1, each row held
    whole in a BLOCK_N = next_power_of_2(N) tile (ROWS is 1 on a GPU; the interpreter takes many).
    Masking: lanes with column >= N or row >= n_rows load 0.0 and are not stored; zeros add nothing to
    the sum of squares as long as the mean divides by N, not BLOCK_N.
    Hint: statistics in fp32. Like transformers, round the normalised row x * inv_rms to y's dtype
    before the weight multiply (round_to(v, y_ptr.dtype.element_ty)); in bf16 it changes tokens.
    """
    # ROWS rows per program, one whole row each (1 on a GPU; many under the interpreter).
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < n_rows) & (cols < N)
    x = tl.load(x_ptr + rows * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    # Masked lanes read 0 and add nothing to the sum of squares; divide by the true width N.
    inv_rms = tl.math.rsqrt(tl.sum(x * x, axis=1) / N + eps)[:, None]
    # HF Llama rounds the normalised row to the input dtype before multiplying by the weight.
    normed = round_to(x * inv_rms, y_ptr.dtype.element_ty).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows * y_row_stride + cols, round_to(normed * weight, y_ptr.dtype.element_ty), mask=mask)
# <<< STUDENT KERNEL


def _rows_per_program(n_rows: int, block: int) -> int:
    """A GPU gets one row per program (thousands of programs fill it); the interpreter pays per
    program, so it takes as many rows as fit a 4M-element tile."""
    if not INTERPRET:
        return 1
    return max(1, min(triton.next_power_of_2(n_rows), (1 << 22) // block))


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dimension, in x.dtype."""
    rows = _rows(x)
    n_rows, width = rows.shape
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(width)
    per_program = _rows_per_program(n_rows, block)
    rmsnorm_kernel[(triton.cdiv(n_rows, per_program),)](
        rows, weight, y, rows.stride(0), y.stride(0), n_rows, width, eps,
        BLOCK_N=block, ROWS=per_program, num_warps=_warps_for_row(block),
    )
    return y.view(x.shape)


# >>> STUDENT KERNEL layernorm_kernel
@triton.jit
def layernorm_kernel(x_ptr, weight_ptr, bias_ptr, y_ptr, x_row_stride, y_row_stride, n_rows, N, eps,
                     BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance, per row.

    x: (n_rows, N), row stride x_row_stride; y: (n_rows, N), row stride y_row_stride (last dims
    contiguous); weight, bias: (N,). Statistics in fp32: mean = sum(x) / N, var = sum((x - mean)^2) / N.
    Grid: (cdiv(n_rows, ROWS),), ROWS whole rows per program, BLOCK_N = next_power_of_2(N) lanes each.
    Masking: padding lanes load 0.0, but x - mean is -mean there: zero them (tl.where) before squaring,
    or every padding lane adds mean^2 to the variance.
    Hint: compute the mean first, then the variance of the centred values (two reductions over the
    registers): steadier than E[x^2] - mean^2, which cancels badly when |mean| >> std.
    """
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < n_rows) & (cols < N)
    x = tl.load(x_ptr + rows * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = (tl.sum(x, axis=1) / N)[:, None]
    # Zero the padding lanes, otherwise each would add mean^2 to the variance.
    centered = tl.where(mask, x - mean, 0.0)
    inv_std = tl.math.rsqrt(tl.sum(centered * centered, axis=1) / N + eps)[:, None]
    weight = tl.load(weight_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    y = centered * inv_std * weight + bias
    tl.store(y_ptr + rows * y_row_stride + cols, round_to(y, y_ptr.dtype.element_ty), mask=mask)
# <<< STUDENT KERNEL


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """torch.nn.functional.layer_norm over the last dimension (biased variance, fp32 statistics)."""
    rows = _rows(x)
    n_rows, width = rows.shape
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(width)
    per_program = _rows_per_program(n_rows, block)
    layernorm_kernel[(triton.cdiv(n_rows, per_program),)](
        rows, weight, bias, y, rows.stride(0), y.stride(0), n_rows, width, eps,
        BLOCK_N=block, ROWS=per_program, num_warps=_warps_for_row(block),
    )
    return y.view(x.shape)


# >>> STUDENT KERNEL gelu_kernel
@triton.jit
def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Exact GELU, elementwise: y = 0.5 * x * (1 + erf(x / sqrt(2))).

    x, y: contiguous buffers of n_elements (any tensor viewed flat), same dtype.
    Grid: (cdiv(n_elements, BLOCK_SIZE),); program p owns elements [p * BLOCK_SIZE, (p + 1) * BLOCK_SIZE).
    Masking: offsets >= n_elements (the ragged last block) neither load nor store.
    Hint: compute in fp32 with tl.math.erf and store in y's dtype. The checkpoint's "gelu" is the erf
    form; the tanh approximation differs by up to ~1e-3, enough to flip bf16 roundings.
    """
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    # The exact (erf) form, as nn.GELU() and the checkpoint's "gelu" use; not the tanh approximation.
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offsets, round_to(y, y_ptr.dtype.element_ty), mask=mask)
# <<< STUDENT KERNEL


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact GELU 0.5 * x * (1 + erf(x / sqrt(2))) of a contiguous tensor."""
    flat = x.view(-1)
    y = torch.empty_like(flat)
    gelu_kernel[(triton.cdiv(flat.numel(), _ELEMENTWISE_BLOCK),)](
        flat, y, flat.numel(), BLOCK_SIZE=_ELEMENTWISE_BLOCK, num_warps=4
    )
    return y.view(x.shape)


# >>> STUDENT KERNEL silu_kernel
@triton.jit
def silu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """SiLU (swish), elementwise: y = x * sigmoid(x) = x / (1 + exp(-x)).

    x, y: contiguous buffers of n_elements, same dtype.
    Grid: (cdiv(n_elements, BLOCK_SIZE),); program p owns elements [p * BLOCK_SIZE, (p + 1) * BLOCK_SIZE).
    Masking: offsets >= n_elements neither load nor store.
    Hint: in fp32, x / (1 + exp(-x)) behaves at both ends: for very negative x, exp(-x) overflows to
    inf and y becomes -0; for large x, exp(-x) -> 0 and y -> x. No special cases needed.
    """
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    # x * sigmoid(x); for very negative x, exp(-x) overflows to inf and y correctly becomes -0.
    y = x / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offsets, round_to(y, y_ptr.dtype.element_ty), mask=mask)
# <<< STUDENT KERNEL


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU x * sigmoid(x) of a contiguous tensor."""
    flat = x.view(-1)
    y = torch.empty_like(flat)
    silu_kernel[(triton.cdiv(flat.numel(), _ELEMENTWISE_BLOCK),)](
        flat, y, flat.numel(), BLOCK_SIZE=_ELEMENTWISE_BLOCK, num_warps=4
    )
    return y.view(x.shape)


# >>> STUDENT KERNEL linear_kernel_tf32
@triton.jit
def linear_kernel_tf32(
    x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """out = x @ w^T + bias (nn.Linear), one (BLOCK_M, BLOCK_N) output tile per program.

    x: (M, K), row stride stride_xm; w: (N, K), row stride stride_wn (row n is output feature n);
    bias: (N,) or None; out: (M, N), row stride stride_om. Last dims contiguous.
    Grid: (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)). Program (i, j) owns out rows i*BLOCK_M.. and columns
    j*BLOCK_N.., and walks K in BLOCK_K steps: acc (fp32) += x_tile (BLOCK_M, BLOCK_K) @ w_tile^T.
    Masking: rows >= M, columns >= N and the ragged end of K load 0.0 (zeros add nothing to a dot);
    the store masks rows >= M and columns >= N.
    Hint: load w as a (BLOCK_N, BLOCK_K) tile along its contiguous K axis and tl.trans it for
    tl.dot(..., input_precision="tf32"). Under TRITON_INTERPRET=1, widen bf16 tiles to fp32 before
    tl.dot (the interpreter's dot mis-reads bf16; see _INTERPRETER in this file).
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        k = k_start + offs_k
        x_tile = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + k[None, :],
            mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0,
        )
        # Row n of an nn.Linear weight is output feature n: read a (BLOCK_N, BLOCK_K) tile along its
        # contiguous K axis and transpose it in registers.
        w_tile = tl.load(
            w_ptr + offs_n[:, None] * stride_wn + k[None, :],
            mask=(offs_n[:, None] < N) & (k[None, :] < K), other=0.0,
        )
        if _INTERPRETER:  # the interpreter's tl.dot mis-reads bf16 (module docstring); widening is exact
            x_tile = x_tile.to(tl.float32)
            w_tile = w_tile.to(tl.float32)
        acc = tl.dot(x_tile, tl.trans(w_tile), acc, input_precision="tf32")
    if bias_ptr is not None:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    out_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], round_to(acc, out_ptr.dtype.element_ty), mask=out_mask)
# <<< STUDENT KERNEL


def linear_tf32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (M, K) @ weight (N, K)^T + bias on the tensor cores: tf32 for fp32, bf16 -> fp32 accumulate."""
    M, K = x.shape
    N = weight.shape[0]
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    block_m, block_n, block_k = 64, 64, 32
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    linear_kernel_tf32[grid](
        x, weight, bias, out, M, N, K, x.stride(0), weight.stride(0), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4, num_stages=3,
    )
    return out


# >>> STUDENT KERNEL softmax_kernel
@triton.jit
def softmax_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, N, BLOCK_N: tl.constexpr):
    """Row softmax: y = exp(x - max(x)) / sum(exp(x - max(x))) over each row of N values.

    x: (n_rows, N), row stride x_row_stride; y: (n_rows, N), row stride y_row_stride (last dims
    contiguous); any float dtype, computed in fp32.
    Grid: (n_rows,); program r handles row r whole in a BLOCK_N = next_power_of_2(N) tile.
    Masking: padding lanes load -inf, so they never win the max and add exp(-inf) = 0 to the sum.
    Hint: subtracting the row max first keeps every exponent <= 0: no overflow whatever the logits.
    """
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    # Padding lanes read -inf so they neither win the max nor add to the sum (exp(-inf) = 0).
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    # Subtracting the row maximum keeps every exponent <= 0: no overflow, whatever the logits.
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, round_to(y, y_ptr.dtype.element_ty), mask=mask)
# <<< STUDENT KERNEL


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Numerically stable softmax over the last dimension."""
    rows = _rows(x)
    n_rows, width = rows.shape
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(width)
    softmax_kernel[(n_rows,)](
        rows, y, rows.stride(0), y.stride(0), width, BLOCK_N=block, num_warps=_warps_for_row(block)
    )
    return y.view(x.shape)


# ---------------------------------------------------------------------------------------------
# Production GEMM / GEMV with fused epilogues
# ---------------------------------------------------------------------------------------------


@triton.jit
def _mma(a, b, acc, INPUT_PRECISION: tl.constexpr):
    """acc + a @ b on the tensor cores (fp32 accumulate)."""
    if _INTERPRETER:  # the interpreter's tl.dot mis-reads bf16 (module docstring); widening is exact
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=INPUT_PRECISION)


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
        acc = _mma(x_tile, tl.trans(w_tile), acc, INPUT_PRECISION)
        if GATED:
            up_tile = tl.load(up_ptrs + k_step, mask=n_mask[:, None] & k_mask[None, :], other=0.0)
            acc_up = _mma(x_tile, tl.trans(up_tile), acc_up, INPUT_PRECISION)

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
    swizzled for the tensor cores, so the warps only issue the matmuls. PERSISTENT: one program per
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
            acc = _mma(x_tile, w_tile.T, acc, INPUT_PRECISION)
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


# Rows at or below which a launch is bound by reading the weight once (decode: M = batch size).
SKINNY_MAX_M = 16
# Up to this many rows (a short prompt) one row tile covers M and the weight is still read once.
ONE_TILE_MAX_M = 64

# Tiles for M > ONE_TILE_MAX_M: (BLOCK_M, BLOCK_N, num_warps, throughput relative to 128x128). The
# rates were read off an H200 and an H100 in bf16 (K = 1280..6144; utils/sweep_linear.py): smaller
# tiles run slower per element but fill the last wave of a small grid better, and _linear_config
# weighs the two.
_GEMM_TILES = ((128, 256, 8, 1.2), (128, 128, 8, 1.0), (64, 128, 4, 0.85), (64, 64, 4, 0.7))


def _linear_config(M: int, N: int, K: int, dtype: torch.dtype, gated: bool, sms: int) -> tuple[str, dict]:
    """("gemv" | "gemm" | "tma", launch options) for one problem size.

    A hand-picked table instead of autotuning: nothing is benchmarked on a first call (which would
    also break CUDA-graph capture) and every run makes the same choice. Sizes are in bytes where the
    dtype matters, so fp32 gets the same shared memory per stage as bf16. N counts output features;
    a gated launch holds two accumulators of (BLOCK_M, BLOCK_N). The entries come from
    utils/sweep_linear.py on an H100 (docs/performance.md); the figures quoted are bf16 there.
    """
    if INTERPRET:
        return _interpreter_linear_config(M, N, K, gated)
    elem_bytes = dtype.itemsize
    if M == 1 and not gated:
        # 8 weight rows x 4 KiB per step: each thread of 4 warps keeps eight 16-byte loads in
        # flight (8 warps for long rows). Measured against 4 rows x 2 KiB: 20.3 vs 23.4 us on the
        # 50 MB gate|up matrix, 11.1 vs 14.6 us on down. Split K only when N is too narrow to give
        # every SM a program.
        block_n, block_k = 8, 4096 // elem_bytes
        split = max(1, min(sms // triton.cdiv(N, block_n), K // (2 * block_k)))
        return "gemv", dict(BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, num_warps=8 if K >= 4096 else 4,
                            num_stages=2)
    if M <= SKINNY_MAX_M:
        # One 16-row tensor-core tile covers every row (padding rows read as zeros); 32 weight rows
        # x 1 KiB per step (512 B when gated, to fit three stages of two weight tiles), split K in
        # two when the column tiles cannot fill the SMs and K is long.
        block_n, block_k = 32, (512 if gated else 1024) // elem_bytes
        split = 2 if triton.cdiv(N, block_n) < sms and K > 4 * block_k else 1
        return "gemm", dict(BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=1, SPLIT_K=split,
                            num_warps=4, num_stages=3)
    if M <= ONE_TILE_MAX_M:
        # Still bound by the weight: narrow column tiles, 256-byte K steps, and split K until the
        # SMs hold about two programs each (prefill of a 59-token prompt: 9.9 vs 15.2 us for
        # q|k|v, 15.1 vs 17.2 us for down, 21.8 vs 25.7 us for gate|up).
        block_n = 32
        tiles = triton.cdiv(N, block_n)
        split = 1 if tiles >= sms else min(4, triton.cdiv(2 * sms, tiles), K // 512)
        return "gemm", dict(BLOCK_M=64, BLOCK_N=block_n, BLOCK_K=256 // elem_bytes, GROUP_M=1, SPLIT_K=split,
                            num_warps=4, num_stages=3)

    def cost(tile):
        block_m, block_n, _, rate = tile
        waves = triton.cdiv(triton.cdiv(M, block_m) * triton.cdiv(N, block_n), sms)
        return waves * block_m * block_n / rate

    block_m, block_n, warps, _ = min(_GEMM_TILES, key=cost)
    # 128-byte K steps: one swizzled shared-memory row of a TMA tile in either dtype.
    block_k = 128 // elem_bytes
    # Split K only when the tiles leave most SMs idle and K is long: the fp32 partials cost a
    # round trip through memory and a launch (the encoder's fc2, 120 tiles on 132 SMs: 38.4 us
    # whole, 62.3 us split in three).
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    split = min(triton.cdiv(2 * sms, tiles), K // 1024) if K >= 4096 and 2 * tiles <= sms else 1
    if gated or split > 1:
        stages = 4 if block_m == 128 and K > 2048 else 3
        return "gemm", dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SPLIT_K=split,
                            num_warps=warps, num_stages=stages)
    # The encoder's GEMMs (M = 1500) on an H100, TMA against plain loads at the same tile, bf16 /
    # fp32 in us: q|k|v 28.0 / 56.6 vs 31.5 / 73.9, o 10.7 / 20.5 vs 19.6 / 28.1, fc1 (128x256)
    # 45.0 / 80.9 vs 47.8 / 86.5, fc2 33.9 / 68.6 vs 38.4 / 98.9. 128x128 tiles gain from a
    # persistent schedule (the next tile's loads overlap this one's epilogue) and four stages;
    # 128x256 tiles, with twice the accumulator, do not.
    square = block_m == block_n == 128
    return "tma", dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SPLIT_K=1, PERSISTENT=square,
                       num_warps=warps, num_stages=4 if square else 3)


def one_row_gemv_config(N: int, K: int, dtype: torch.dtype, device: torch.device) -> dict:
    """The launch options _linear_config gives a one-row GEMV of (N, K), for kernels built on gemv_rows."""
    kind, cfg = _linear_config(1, N, K, dtype, False, _sm_count(torch.device(device)))
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


def _launch_linear(x, weight, bias, residual, out, apply_gelu, gated, input_precision, *,
                   prologue="none", norm_weight=None, eps=0.0, config=None):
    """The shared launcher. prologue "rmsnorm" / "swiglu" (see _gemv_input) is fused into the GEMV;
    the tiled kernels get "rmsnorm" as a separate rmsnorm launch and do not take "swiglu".
    config: (kind, launch options) in place of _linear_config's choice (utils/sweep_linear.py)."""
    rows = _rows(x)
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
    out_rows = _rows(out)
    residual_rows = None if residual is None else _rows(residual)
    stride_rm = 0 if residual_rows is None else residual_rows.stride(0)
    kind, cfg = config or _linear_config(M, N, K, x.dtype, gated, _sm_count(x.device))
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
            APPLY_GELU=apply_gelu, INPUT_PRECISION=input_precision, **pdl, **cfg,
        )
    else:
        fused_linear_kernel[(triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), split)](
            rows, weight, bias, residual_rows, out_rows, partial,
            M, N, K, rows.stride(0), weight.stride(0), stride_rm, out_rows.stride(0), k_per_split,
            SPLIT_K=split, APPLY_GELU=apply_gelu, GATED=gated, INPUT_PRECISION=input_precision, **pdl, **cfg,
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
    activation: str | None = None,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    rms_norm: tuple[torch.Tensor, float] | None = None,
    input_precision: str = FP32_PRECISION,
) -> torch.Tensor:
    """out = act(x @ weight^T + bias) + residual, in x.dtype.

    x: (..., K), rows contiguous (a strided 2-D row view such as hidden[:, -1] is fine).
    weight: (N, K), nn.Linear layout. bias: (N,) or None. activation: None or "gelu" (exact erf).
    residual: (..., N) or None. out: preallocated (..., N) or None.
    rms_norm: (norm_weight, eps) to multiply rmsnorm(x) instead of x (as rmsnorm() would compute it).
    input_precision: for fp32 inputs "tf32", "tf32x3" or "ieee" (default: _triton_compat.FP32_PRECISION,
    "tf32" unless GLM_ASR_FP32_PRECISION says otherwise); ignored for bf16.
    One row (decode, batch 1) runs gemv_kernel on the CUDA cores, with the RMSNorm fused in; up to
    SKINNY_MAX_M rows a 16-row tensor-core tile with split K; more rows the tiled GEMM.
    """
    if activation not in (None, "gelu"):
        raise ValueError(f"activation must be None or 'gelu', not {activation!r}")
    norm_weight, eps = rms_norm if rms_norm is not None else (None, 0.0)
    return _launch_linear(x, weight, bias, residual, out, activation == "gelu", False, input_precision,
                          prologue="none" if rms_norm is None else "rmsnorm", norm_weight=norm_weight, eps=eps)


def swiglu_linear(
    x: torch.Tensor, gate_up_weight: torch.Tensor, out: torch.Tensor | None = None, *, input_precision: str = FP32_PRECISION
) -> torch.Tensor:
    """Llama MLP input half: out = silu(x @ W_gate^T) * (x @ W_up^T), shape (..., N).

    gate_up_weight is (2N, K): rows [0, N) are gate_proj.weight and rows [N, 2N) up_proj.weight,
    i.e. torch.cat([gate_proj.weight, up_proj.weight]) built once when the model loads.
    """
    return _launch_linear(x, gate_up_weight, None, None, out, False, True, input_precision)


def llama_mlp(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, gate_up_weight: torch.Tensor,
              down_weight: torch.Tensor, *, input_precision: str = FP32_PRECISION) -> torch.Tensor:
    """The decoder layer's second half, in place: x += down(silu(gate(h)) * up(h)), h = rmsnorm(x).

    x: (..., H), contiguous. For one row, two GEMVs: [gate | up] of the normalised row (the RMSNorm
    in its prologue), then down with silu(gate) * up computed in its prologue and the residual in
    its epilogue. For more rows: rmsnorm, the gated GEMM with SwiGLU epilogue, down (+ residual).
    """
    if _rows(x).shape[0] == 1:
        gate_up = _launch_linear(x, gate_up_weight, None, None, None, False, False, input_precision,
                                 prologue="rmsnorm", norm_weight=norm_weight, eps=eps)
        return _launch_linear(gate_up, down_weight, None, x, x, False, False, input_precision, prologue="swiglu")
    activated = swiglu_linear(rmsnorm(x, norm_weight, eps), gate_up_weight, input_precision=input_precision)
    return linear(activated, down_weight, residual=x, out=x, input_precision=input_precision)


def lm_head_logits(x_normed: torch.Tensor, lm_head_weight: torch.Tensor, *, input_precision: str = FP32_PRECISION):
    """Full logits (..., V) = x_normed @ lm_head_weight^T, in x_normed.dtype (as HF's lm_head)."""
    return linear(x_normed, lm_head_weight, input_precision=input_precision)


# ---------------------------------------------------------------------------------------------
# Embedding gather
# ---------------------------------------------------------------------------------------------


@triton.jit
def embed_tokens_kernel(
    ids_ptr, audio_index_ptr, table_ptr, audio_ptr, out_ptr, H, stride_table, stride_audio, stride_out,
    PDL: tl.constexpr, BLOCK_H: tl.constexpr,
):
    release_consumer(PDL)
    wait_for_producer(PDL)
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < H
    out_dtype = out_ptr.dtype.element_ty
    # The whole program takes one branch, so only the source row it needs is ever read.
    audio_row = tl.load(audio_index_ptr + row)
    if audio_row >= 0:
        values = round_to(tl.load(audio_ptr + audio_row * stride_audio + cols, mask=mask).to(tl.float32), out_dtype)
    else:
        token = tl.load(ids_ptr + row)
        values = round_to(tl.load(table_ptr + token * stride_table + cols, mask=mask).to(tl.float32), out_dtype)
    tl.store(out_ptr + row * stride_out + cols, values, mask=mask)


def embed_tokens(
    input_ids: torch.Tensor,
    table: torch.Tensor,
    audio_embeds: torch.Tensor,
    audio_index: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """out[m] = audio_embeds[audio_index[m]] if audio_index[m] >= 0 else table[input_ids[m]].

    input_ids, audio_index: int64 (M,). table: (V, H). audio_embeds: (A, H), A may be 0.
    Output (M, H) in table.dtype. Indices are not bounds-checked.
    """
    M = input_ids.shape[0]
    H = table.shape[1]
    if out is None:
        out = torch.empty((M, H), dtype=table.dtype, device=table.device)
    # With no audio rows every audio_index is -1: the table stands in as a valid, never-read pointer.
    audio = audio_embeds if audio_embeds.numel() > 0 else table
    block_h = min(triton.next_power_of_2(H), 2048)
    embed_tokens_kernel[(M, triton.cdiv(H, block_h))](
        input_ids, audio_index, table, audio, out, H, table.stride(0), audio.stride(0), out.stride(0),
        BLOCK_H=block_h, num_warps=_warps_for_row(block_h), **pdl_options(table.device),
    )
    return out


# ---------------------------------------------------------------------------------------------
# Greedy decoding head: argmax over the vocabulary with optional banned ids
# ---------------------------------------------------------------------------------------------

_NO_INDEX = tl.constexpr(2**31 - 1)  # above any vocabulary index: loses every "lowest index" contest


@triton.jit
def _block_argmax(logits, cols, V, banned_ptr, num_banned, suppress_ptr, BLOCK_BANNED: tl.constexpr):
    """Per row of a (rows, cols) logits tile: (max, lowest column holding it).

    Columns >= V are skipped; so are the banned ids while suppress[0] != 0 (a device flag, so that a
    captured CUDA graph can switch suppression on and off without being recaptured).
    """
    slots = tl.arange(0, BLOCK_BANNED)
    banned = tl.load(banned_ptr + slots, mask=slots < num_banned, other=-1)
    is_banned = tl.max((cols[:, None] == banned[None, :]).to(tl.int32), axis=1) > 0
    excluded = (cols >= V) | (is_banned & (tl.load(suppress_ptr) != 0))
    logits = tl.where(excluded[None, :], float("-inf"), logits)
    row_max = tl.max(logits, axis=1)
    holders = tl.where((logits == row_max[:, None]) & (cols < V)[None, :], cols[None, :], _NO_INDEX)
    return row_max, tl.min(holders, axis=1)


@triton.jit
def argmax_reduce_kernel(max_ptr, idx_ptr, out_ptr, n_blocks, PDL: tl.constexpr, BLOCK: tl.constexpr):
    release_consumer(PDL)
    wait_for_producer(PDL)
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_blocks
    values = tl.load(max_ptr + row * n_blocks + offs, mask=mask, other=float("-inf"))
    indices = tl.load(idx_ptr + row * n_blocks + offs, mask=mask, other=_NO_INDEX)
    best = tl.max(values, axis=0)
    # Every block reports its lowest maximising index, so the lowest index over the blocks that
    # reach the row maximum is torch.argmax's answer.
    winner = tl.min(tl.where(mask & (values == best), indices, _NO_INDEX), axis=0)
    tl.store(out_ptr + row, winner.to(tl.int64))


def _reduce_block_argmax(partial_max, partial_idx, out_ids):
    n_rows, n_blocks = partial_max.shape
    block = triton.next_power_of_2(n_blocks)
    argmax_reduce_kernel[(n_rows,)](partial_max, partial_idx, out_ids, n_blocks, BLOCK=block,
                                   num_warps=_warps_for_row(block), **pdl_options(out_ids.device))
    return out_ids


def _banned_args(banned_ids, out_ids):
    """(pointer, count, padded block) for the banned ids; an empty list borrows a valid pointer."""
    count = banned_ids.numel()
    return (banned_ids if count else out_ids), count, triton.next_power_of_2(max(count, 1))


@triton.jit
def argmax_blocks_kernel(
    logits_ptr, banned_ptr, suppress_ptr, max_ptr, idx_ptr, V, row_stride, num_banned, n_blocks,
    BLOCK_V: tl.constexpr, BLOCK_BANNED: tl.constexpr,
):
    rows = tl.program_id(0) + tl.arange(0, 1)
    block = tl.program_id(1)
    cols = block * BLOCK_V + tl.arange(0, BLOCK_V)
    logits = tl.load(logits_ptr + rows[:, None] * row_stride + cols[None, :], mask=(cols < V)[None, :],
                     other=float("-inf")).to(tl.float32)
    block_max, block_idx = _block_argmax(logits, cols, V, banned_ptr, num_banned, suppress_ptr, BLOCK_BANNED)
    tl.store(max_ptr + rows * n_blocks + block, block_max)
    tl.store(idx_ptr + rows * n_blocks + block, block_idx)


def argmax_rows(logits: torch.Tensor, banned_ids: torch.Tensor, suppress: torch.Tensor, out_ids: torch.Tensor):
    """out_ids[b] = argmax(logits[b]) (lowest index on ties), skipping banned_ids when suppress[0] != 0.

    logits: (B, V), rows contiguous. banned_ids: int64 (nb,). suppress: int32 (1,) on the device.
    out_ids: int64 (B,). Two launches: per-block maxima, then one reduction per row.
    """
    rows = _rows(logits)
    n_rows, V = rows.shape
    block_v = min(triton.next_power_of_2(V), 4096)
    n_blocks = triton.cdiv(V, block_v)
    partial_max = torch.empty((n_rows, n_blocks), dtype=torch.float32, device=logits.device)
    partial_idx = torch.empty((n_rows, n_blocks), dtype=torch.int32, device=logits.device)
    banned, num_banned, block_banned = _banned_args(banned_ids, out_ids)
    argmax_blocks_kernel[(n_rows, n_blocks)](
        rows, banned, suppress, partial_max, partial_idx, V, rows.stride(0), num_banned, n_blocks,
        BLOCK_V=block_v, BLOCK_BANNED=block_banned, num_warps=_warps_for_row(block_v),
    )
    return _reduce_block_argmax(partial_max, partial_idx, out_ids)


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
        acc = _mma(x_tile, tl.trans(w_tile), acc, INPUT_PRECISION)
    # HF's lm_head materialises logits in the activation dtype; rounding the same way makes equal
    # logits equal here too, so ties break as they do there.
    logits = round_to(acc, x_ptr.dtype.element_ty).to(tl.float32)
    block_max, block_idx = _block_argmax(logits, cols, V, banned_ptr, num_banned, suppress_ptr, BLOCK_BANNED)
    tl.store(max_ptr + offs_m * n_blocks + block, block_max, mask=m_mask)
    tl.store(idx_ptr + offs_m * n_blocks + block, block_idx, mask=m_mask)


def _lm_head_config(dtype: torch.dtype) -> dict:
    """Weight-streaming tiles for the vocabulary GEMV: 64 vocabulary rows, 512-byte runs of K."""
    block_k = 256 if dtype == torch.bfloat16 or dtype == torch.float16 else 128
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
    input_precision: str = FP32_PRECISION,
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
    cfg = _lm_head_config(x.dtype)
    n_blocks = triton.cdiv(V, cfg["BLOCK_V"])
    partial_max = torch.empty((B, n_blocks), dtype=torch.float32, device=x.device)
    partial_idx = torch.empty((B, n_blocks), dtype=torch.int32, device=x.device)
    banned, num_banned, block_banned = _banned_args(banned_ids, out_ids)
    lm_head_argmax_kernel[(n_blocks, triton.cdiv(B, cfg["BLOCK_M"]))](
        x_normed, lm_head_weight, banned, suppress, partial_max, partial_idx,
        B, V, H, x_normed.stride(0), lm_head_weight.stride(0), num_banned, n_blocks,
        INPUT_PRECISION=input_precision, BLOCK_BANNED=block_banned, **pdl_options(x.device), **cfg,
    )
    return _reduce_block_argmax(partial_max, partial_idx, out_ids)


# ---------------------------------------------------------------------------------------------
# Self-check: each launcher against plain torch on fresh random inputs
# ---------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_common.teaching import SelfCheck

    check = SelfCheck("layers.py", INTERPRET)
    on_gpu, device = check.on_gpu, check.device
    gen = torch.Generator().manual_seed(int(time.time()))
    bf16, fp32 = torch.bfloat16, torch.float32

    def rand(*shape, dtype=bf16, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

    def f32(t):
        return t.to(torch.float32)

    # Model sizes on the GPU; small stand-ins (same code paths, odd widths) for the interpreter.
    if on_gpu:
        rows, tokens, H, E, F, V = 512, 1500, 2048, 1280, 6144, 59264
    else:
        rows, tokens, H, E, F, V = 17, 33, 96, 1280, 80, 300
    eps = 1e-5
    F_enc = 4 * E if on_gpu else 48
    E_gemm = E if on_gpu else 40

    # Course kernels, one launcher each.
    x = rand(rows, H)
    w = rand(H)
    check.check("rmsnorm_kernel", lambda: rmsnorm(x, w, eps),
                lambda: f32(x) * torch.rsqrt(f32(x).pow(2).mean(-1, keepdim=True) + eps) * f32(w),
                f"{rows}x{H} bf16", 1e-2)
    xe, we, be = rand(tokens, E), rand(E), rand(E)
    check.check("layernorm_kernel", lambda: layernorm(xe, we, be, eps),
                lambda: torch.nn.functional.layer_norm(f32(xe), (E,), f32(we), f32(be), eps),
                f"{tokens}x{E} bf16", 1e-2)
    xg = rand(tokens, F_enc)
    check.check("gelu_kernel", lambda: gelu(xg), lambda: torch.nn.functional.gelu(f32(xg)),
                f"{tokens}x{F_enc} bf16", 1e-2)
    xs = rand(rows, F, dtype=fp32)
    check.check("silu_kernel", lambda: silu(xs), lambda: torch.nn.functional.silu(xs), f"{rows}x{F} fp32", 1e-5)
    xl, wl, bl = rand(tokens, E_gemm, dtype=fp32), rand(E_gemm, E_gemm, dtype=fp32), rand(E_gemm, dtype=fp32)
    check.check("linear_kernel_tf32", lambda: linear_tf32(xl, wl, bl),
                lambda: xl.double() @ wl.double().T + bl.double(), f"{tokens}x{E_gemm}x{E_gemm} fp32", 3e-3)
    xm = rand(rows, tokens, dtype=fp32, scale=4.0)
    check.check("softmax_kernel", lambda: softmax(xm), lambda: torch.softmax(xm.double(), -1),
                f"{rows}x{tokens} fp32", 1e-5)

    # Production kernels the model calls.
    w1, b1 = rand(F_enc, E_gemm, scale=E_gemm**-0.5), rand(F_enc)
    x1 = rand(tokens, E_gemm)
    check.check("fused_linear_kernel[gelu]", lambda: linear(x1, w1, b1, activation="gelu"),
                lambda: torch.nn.functional.gelu(f32(x1) @ f32(w1).T + f32(b1)),
                f"{tokens}x{E_gemm}->{F_enc} bf16", 1e-2)
    w2, b2, r2 = rand(E_gemm, F_enc, scale=F_enc**-0.5), rand(E_gemm), rand(tokens, E_gemm)
    x2 = rand(tokens, F_enc)
    check.check("fused_linear_kernel[resid]", lambda: linear(x2, w2, b2, residual=r2),
                lambda: f32(x2) @ f32(w2).T + f32(b2) + f32(r2), f"{tokens}x{F_enc}->{E_gemm} bf16", 1e-2)
    wd, rd = rand(H, F, scale=F**-0.5), rand(4, H)
    for m, name in ((1, "gemv_kernel[M=1]"), (4, "fused_linear_kernel[M=4]")):
        xd = rand(m, F)
        check.check(name, lambda xd=xd, m=m: linear(xd, wd, residual=rd[:m]),
                    lambda xd=xd, m=m: f32(xd) @ f32(wd).T + f32(rd[:m]), f"{m}x{F}->{H} bf16", 1e-2)
    wgu = rand(2 * F, H, scale=H**-0.5)
    xu = rand(rows, H)
    check.check(f"swiglu_linear[M={rows}]", lambda: swiglu_linear(xu, wgu),
                lambda: torch.nn.functional.silu(f32(xu) @ f32(wgu[:F]).T) * (f32(xu) @ f32(wgu[F:]).T),
                f"{rows}x{H}->{F} bf16", 1e-2)

    # Decode at batch 1: the RMSNorm and SwiGLU prologues of the GEMV (timed as CUDA graphs, as they run).
    def rms(t):
        return f32(t) * torch.rsqrt(f32(t).pow(2).mean(-1, keepdim=True) + eps) * f32(w)

    x_row = rand(1, H, scale=3.0)
    w_qkv = rand(3 * H // 2, H, scale=H**-0.5)
    check.check("gemv_kernel[rmsnorm prologue]", lambda: linear(x_row, w_qkv, rms_norm=(w, eps)),
                lambda: rms(x_row) @ f32(w_qkv).T, f"1x{H}->{3 * H // 2} bf16", 1e-2, graph=on_gpu)
    x_mlp = torch.empty_like(x_row)
    check.check("llama_mlp[M=1]", lambda: llama_mlp(x_mlp.copy_(x_row), w, eps, wgu, wd),
                lambda: f32(x_row) + (torch.nn.functional.silu(rms(x_row) @ f32(wgu[:F]).T)
                                      * (rms(x_row) @ f32(wgu[F:]).T)) @ f32(wd).T,
                f"1x{H}->{F}->{H} bf16", 1e-2, graph=on_gpu)
    table = rand(V, H)
    audio = rand(rows // 2, H)
    ids = torch.randint(0, V, (rows,), generator=gen).to(device)
    audio_index = torch.full((rows,), -1, dtype=torch.int64)
    audio_index[3:3 + rows // 2] = torch.arange(rows // 2)
    audio_index = audio_index.to(device)
    check.check("embed_tokens_kernel", lambda: embed_tokens(ids, table, audio, audio_index),
                lambda: torch.where(audio_index[:, None] >= 0, audio[audio_index.clamp(min=0)], table[ids]),
                f"{rows}x{H} bf16", 0.0)

    # Greedy heads: judge the chosen id by its reference logit, so near-ties in bf16 still pass.
    banned = torch.tensor([V - 2, V - 1], device=device)
    suppress = torch.ones(1, dtype=torch.int32, device=device)
    w_lm = rand(V, H, scale=H**-0.5)
    xh = rand(2, H)
    ids_out = torch.empty(2, dtype=torch.int64, device=device)

    def head_logits():
        normed = f32(xh) * torch.rsqrt(f32(xh).pow(2).mean(-1, keepdim=True) + eps) * f32(w)
        logits = normed @ f32(w_lm).T
        logits[:, banned] = float("-inf")
        return logits

    def chosen_logit_gap(chosen, logits):
        """(how far the chosen id's logit falls short of the row maximum, that / max |logit|)."""
        logits = logits.double()
        finite = logits.masked_fill(~torch.isfinite(logits), 0.0)
        gap = (logits.max(-1).values - logits.gather(1, chosen[:, None].to(logits.device))[:, 0]).max().item()
        return gap, gap / finite.abs().max().item()

    lg = rand(4, V, dtype=fp32)
    ids4 = torch.empty(4, dtype=torch.int64, device=device)
    check.check("greedy_head", lambda: greedy_head(xh, w, eps, w_lm, banned, suppress, ids_out), head_logits,
                f"2x{H}->{V} bf16", 1e-2, errors=chosen_logit_gap)
    check.check("argmax_rows", lambda: argmax_rows(lg, banned, suppress, ids4),
                lambda: f32(lg).masked_fill(torch.isin(torch.arange(V, device=device), banned), float("-inf")),
                f"4x{V} fp32", 1e-2, errors=chosen_logit_gap)
    check.finish()


if __name__ == "__main__":
    _self_check()
