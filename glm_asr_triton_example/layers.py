"""The course's layer kernels for GLM-ASR, in Triton, each above its launcher: rmsnorm_kernel,
layernorm_kernel, gelu_kernel, silu_kernel, linear_kernel_tf32, softmax_kernel (their formulas and
where the model uses them: docs/guide-triton.md, "The eleven kernels you write").

These are the model's whole arithmetic apart from attention (attention.py), RoPE (rope.py) and the
provided glue (glue.py, conv.py): the course model calls nothing else. Launchers take and return torch
tensors; torch only allocates and makes views. Every kernel computes in fp32 and rounds to the
activation dtype where transformers materialises a tensor of that dtype, so bf16 greedy decoding
picks transformers' tokens. ``round_to`` (triton_helpers) is that cast: plain on the GPU,
round-to-nearest-even under the interpreter too. ``dot`` (triton_helpers) is the GEMM's ``tl.dot``
with two fixes: under the interpreter (TRITON_INTERPRET=1, Triton 3.6) ``tl.dot`` multiplies bf16
operands as their raw 16-bit patterns, so ``dot`` widens them to fp32 first (exact); on a GPU a "tf32"
``tl.dot`` truncates fp32 operands to TF32, so ``dot`` rounds them to nearest first, as cuBLAS does.

Self-check: python glm_asr_triton_example/layers.py  (without a GPU it runs in the Triton interpreter)
"""


import torch
import triton
import triton.language as tl

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.triton_helpers import INTERPRET, as_rows, dot, round_to, rows_per_program, warps_for_row

# Elementwise kernels: 2048 elements over 4 warps is 16 per thread, two or four 16-byte vectors (the
# interpreter pays per program, so it takes far more at once).
_ELEMENTWISE_BLOCK = 1 << 16 if INTERPRET else 2048


def _launch_per_row(kernel, x: torch.Tensor, *per_column: torch.Tensor, scalars: tuple = ()) -> torch.Tensor:
    """Launch a row kernel (rmsnorm, layernorm, softmax) over the rows of x's last dimension; returns
    y, in x's shape and dtype. The kernel takes (x, *per_column, y, x_row_stride, y_row_stride, n_rows,
    N, *scalars, BLOCK_N, ROWS): per_column are (N,) vectors such as a norm's weight and bias, scalars
    such as its eps.
    """
    rows = as_rows(x)
    n_rows, width = rows.shape
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(width)
    per_program = rows_per_program(n_rows, block)
    kernel[(triton.cdiv(n_rows, per_program),)](
        rows, *per_column, y, rows.stride(0), y.stride(0), n_rows, width, *scalars,
        BLOCK_N=block, ROWS=per_program, num_warps=warps_for_row(block),
    )
    return y.view(x.shape)


def _launch_elementwise(kernel, x: torch.Tensor) -> torch.Tensor:
    """Launch an elementwise kernel (gelu, silu) over a contiguous x seen flat; returns y, in x's shape
    and dtype. The kernel takes (x, y, n_elements, BLOCK_SIZE)."""
    flat = x.view(-1)
    y = torch.empty_like(flat)
    kernel[(triton.cdiv(flat.numel(), _ELEMENTWISE_BLOCK),)](
        flat, y, flat.numel(), BLOCK_SIZE=_ELEMENTWISE_BLOCK, num_warps=4
    )
    return y.view(x.shape)


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
    eps is a Python float under the interpreter; when to use round_to: docs/guide-triton.md#interpreter-traps.
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


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dimension, in x.dtype."""
    return _launch_per_row(rmsnorm_kernel, x, weight, scalars=(eps,))


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
    return _launch_per_row(layernorm_kernel, x, weight, bias, scalars=(eps,))


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
    return _launch_elementwise(gelu_kernel, x)


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
    return _launch_elementwise(silu_kernel, x)


# >>> STUDENT KERNEL linear_kernel_tf32
@triton.jit
def linear_kernel_tf32(
    x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
):
    """out = x @ w^T + bias (nn.Linear), one (BLOCK_M, BLOCK_N) output tile per program.

    x: (M, K), row stride stride_xm; w: (N, K), row stride stride_wn (row n is output feature n);
    bias: (N,) or None; out: (M, N), row stride stride_om. Last dims contiguous.
    Grid: (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)). Program (i, j) owns out rows i*BLOCK_M.. and columns
    j*BLOCK_N.., and walks K in BLOCK_K steps: acc (fp32) += x_tile (BLOCK_M, BLOCK_K) @ w_tile^T.
    Masking: rows >= M, columns >= N and the ragged end of K load 0.0 (zeros add nothing to a dot);
    the store masks rows >= M and columns >= N.
    INPUT_PRECISION: how fp32 tiles meet the tensor cores, "tf32" (the default precision) or "ieee"
    (--precision fp32); pass it on to dot(a, b, acc, INPUT_PRECISION), imported above: tl.dot(a, b, acc,
    input_precision=INPUT_PRECISION) with the fixes of the module docstring. bf16 ignores it.
    Hint: load w as a (BLOCK_N, BLOCK_K) tile along its contiguous K axis and tl.trans it for the dot.
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
        acc = dot(x_tile, tl.trans(w_tile), acc, INPUT_PRECISION)
    if bias_ptr is not None:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    out_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], round_to(acc, out_ptr.dtype.element_ty), mask=out_mask)
# <<< STUDENT KERNEL


def _linear_tiles(M: int, N: int, K: int, dtype: torch.dtype) -> dict:
    """Block sizes and launch options for one problem, chosen from M (how many rows share a weight tile).

    Decode (M <= 16) is bound by reading the weight once: one 16-row tile covers every row (tl.dot
    needs 16), narrow column tiles give the SMs enough programs, long K steps keep loads in flight.
    Prefill of a short prompt (M <= 64) is still weight-bound: one 64-row tile. The encoder
    (M = 1500 per window) is compute-bound: 128 x 128 tiles reuse each loaded tile 128 times.
    K steps are counted in bytes, so fp32 tiles take the same shared memory per stage as bf16 ones.
    """
    elem = dtype.itemsize
    if INTERPRET:  # the interpreter pays per program and per loop step: few, large tiles
        return dict(BLOCK_M=min(triton.next_power_of_2(max(M, 16)), 256),
                    BLOCK_N=min(triton.next_power_of_2(max(N, 16)), 256),
                    BLOCK_K=min(triton.next_power_of_2(max(K, 16)), 256), num_warps=4, num_stages=1)
    if M <= 16:
        return dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=512 // elem, num_warps=4, num_stages=4)
    if M <= 64:
        return dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=256 // elem, num_warps=4, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128 // elem, num_warps=8, num_stages=3)


def linear_tf32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                precision: str = "tf32", out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x @ weight^T + bias on the tensor cores, in x.dtype (shapes: launch_contracts.linear); x
    may be a strided row view such as hidden[:, -1]; bf16 ignores precision (fp32 accumulation)."""
    M, N, K, out = launch_contracts.linear(x, weight, out, precision)
    tiles = _linear_tiles(M, N, K, x.dtype)
    grid = (triton.cdiv(M, tiles["BLOCK_M"]), triton.cdiv(N, tiles["BLOCK_N"]))
    linear_kernel_tf32[grid](
        x, weight, bias, out, M, N, K, x.stride(0), weight.stride(0), out.stride(0),
        INPUT_PRECISION=precision, **tiles,
    )
    return out


# >>> STUDENT KERNEL softmax_kernel
@triton.jit
def softmax_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_rows, N, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """Row softmax: y = exp(x - max(x)) / sum(exp(x - max(x))) over each row of N values.

    x: (n_rows, N), row stride x_row_stride; y: (n_rows, N), row stride y_row_stride (last dims
    contiguous); any float dtype, computed in fp32.
    Grid: (cdiv(n_rows, ROWS),); program p handles rows p*ROWS .. p*ROWS + ROWS - 1, each whole in a
    BLOCK_N = next_power_of_2(N) tile (ROWS is 1 on a GPU; many under the interpreter).
    Masking: padding lanes load -inf, so they never win the max and add exp(-inf) = 0 to the sum;
    rows >= n_rows are never stored (give them zeros, not -inf, or their softmax computes 0 / 0).
    Hint: subtracting the row max first keeps every exponent <= 0: no overflow whatever the logits.
    """
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    mask = (rows < n_rows) & (cols < N)
    # Padding lanes read -inf so they neither win the max nor add to the sum (exp(-inf) = 0).
    x = tl.load(x_ptr + rows * x_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    # Rows past n_rows (never stored) hold zeros instead, so their arithmetic stays finite.
    x = tl.where(rows < n_rows, x, 0.0)
    # Subtracting the row maximum keeps every exponent <= 0: no overflow, whatever the logits.
    numerator = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = numerator / tl.sum(numerator, axis=1)[:, None]
    tl.store(y_ptr + rows * y_row_stride + cols, round_to(y, y_ptr.dtype.element_ty), mask=mask)
# <<< STUDENT KERNEL


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Numerically stable softmax over the last dimension."""
    return _launch_per_row(softmax_kernel, x)


if __name__ == "__main__":  # the self-check: every case of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))

