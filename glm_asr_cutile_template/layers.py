# Generated from glm_asr_cutile_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""The course's layer kernels for GLM-ASR, in NVIDIA cuTile, each above its launcher: rmsnorm_kernel,
layernorm_kernel, gelu_kernel, silu_kernel, linear_kernel_tf32, softmax_kernel (their formulas and
where the model uses them: docs/guide-cutile.md, "The eleven kernels you write").

A cuTile kernel sees tensors as arrays that know their shape and strides, and moves whole tiles:
``ct.load(array, index, shape)`` reads the tile at ``index`` counted in tiles (tile (i, j) of shape
(R, C) starts at element (i*R, j*C)), ``ct.store`` writes one back. Tile dimensions are compile-time
powers of two, so launchers round widths up and kernels handle the excess: a load pads the lanes
past the array's end with its ``padding_mode`` (ZERO for sums, NEG_INF for maxima; the default pads
with undetermined values) and a store drops them. Every kernel computes in fp32 and rounds to the
activation dtype where transformers materialises a tensor of that dtype (``round_as``), so bf16
greedy decoding picks transformers' tokens. Launchers take and return torch tensors.

Self-check: python glm_asr_cutile_template/layers.py  (without a GPU it runs in the cuTile emulator)
"""


import torch

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.cutile import ct, launch
from glm_asr_course.kernels.todo_kernels import student_kernel  # noqa: E402
from glm_asr_course.runtimes.tile_helpers import (ELEMENTWISE_BLOCK, NEG_INF, ZERO, as_rows, cdiv, erf, next_power_of_2,
                                                  round_as, rows_per_block)


@student_kernel("rmsnorm_kernel", reference="glm_asr_cutile_example.layers", guide="docs/guide-cutile.md#rmsnorm_kernel")
def rmsnorm_kernel(x, weight, y, eps, ROWS: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    """RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight.

    x: (n_rows, N) array (any row stride, last dim contiguous); weight: (N,); y: (n_rows, N) in the
    activation dtype (fp32 or bf16); eps: an fp32 scalar. N is x.shape[1], a runtime value.
    Grid: (cdiv(n_rows, ROWS),). Block b normalises rows b*ROWS .. b*ROWS + ROWS - 1, each whole in a
    BLOCK_N = next_power_of_2(N) lane tile: ct.load(x, (b, 0), (ROWS, BLOCK_N)) (index in tiles).
    Masking: load with padding_mode=ZERO: lanes past N and rows past n_rows read 0.0, which adds
    nothing to the sum of squares as long as the mean divides by N, not BLOCK_N; ct.store drops
    whatever lies outside y.
    Hint: statistics in fp32 (ct.astype). Like transformers, round the normalised row to y's dtype
    before the weight multiply (round_as(v, y.dtype)); in bf16 it changes tokens. Where else to round:
    docs/guide-cutile.md#interpreter-traps.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dimension, in x.dtype."""
    rows = as_rows(x)
    n_rows, width = rows.shape
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = next_power_of_2(width)
    per_block = rows_per_block(n_rows, block)
    launch((cdiv(n_rows, per_block),), rmsnorm_kernel, rows, weight, y, float(eps), per_block, block)
    return y.view(x.shape)


@student_kernel("layernorm_kernel", reference="glm_asr_cutile_example.layers", guide="docs/guide-cutile.md#layernorm_kernel")
def layernorm_kernel(x, weight, bias, y, eps, ROWS: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    """LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias, biased variance, per row.

    x: (n_rows, N) array (any row stride, last dim contiguous); y: (n_rows, N); weight, bias: (N,);
    eps: an fp32 scalar. Statistics in fp32: mean = sum(x) / N, var = sum((x - mean)^2) / N.
    Grid: (cdiv(n_rows, ROWS),), ROWS whole rows per block, BLOCK_N = next_power_of_2(N) lanes each.
    Masking: padding lanes load 0.0 (padding_mode=ZERO), but x - mean is -mean there: zero them with
    ct.where(lane < N, x - mean, 0.0) before squaring, or every padding lane adds mean^2 to the
    variance (1280 is not a power of two: 768 padding lanes).
    Hint: compute the mean first, then the variance of the centred values: steadier than
    E[x^2] - mean^2, which cancels badly when |mean| >> std.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """torch.nn.functional.layer_norm over the last dimension (biased variance, fp32 statistics)."""
    rows = as_rows(x)
    n_rows, width = rows.shape
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = next_power_of_2(width)
    per_block = rows_per_block(n_rows, block)
    launch((cdiv(n_rows, per_block),), layernorm_kernel, rows, weight, bias, y, float(eps), per_block, block)
    return y.view(x.shape)


@student_kernel("gelu_kernel", reference="glm_asr_cutile_example.layers", guide="docs/guide-cutile.md#gelu_kernel")
def gelu_kernel(x, y, BLOCK: ct.Constant[int]):
    """Exact GELU, elementwise: y = 0.5 * x * (1 + erf(x / sqrt(2))).

    x, y: 1-D arrays of n elements (any tensor viewed flat), same dtype.
    Grid: (cdiv(n, BLOCK),); block b owns elements [b * BLOCK, (b + 1) * BLOCK): tile index b.
    Masking: the ragged last tile loads 0.0 past n (padding_mode=ZERO) and the store drops it.
    Hint: compute in fp32 and store in y's dtype. cuTile has no erf: use erf() from tile_helpers
    (an fp32 polynomial). The checkpoint's "gelu" is the erf form; the tanh approximation differs by
    up to ~1e-3, enough to flip bf16 roundings.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def _elementwise(kernel, x: torch.Tensor) -> torch.Tensor:
    """Launches an elementwise kernel(x, y, BLOCK) over contiguous x seen flat, ELEMENTWISE_BLOCK
    elements per block; returns y, a new tensor shaped like x."""
    flat = x.view(-1)
    y = torch.empty_like(flat)
    launch((cdiv(flat.numel(), ELEMENTWISE_BLOCK),), kernel, flat, y, ELEMENTWISE_BLOCK)
    return y.view(x.shape)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact GELU 0.5 * x * (1 + erf(x / sqrt(2))) of a contiguous tensor."""
    return _elementwise(gelu_kernel, x)


@student_kernel("silu_kernel", reference="glm_asr_cutile_example.layers", guide="docs/guide-cutile.md#silu_kernel")
def silu_kernel(x, y, BLOCK: ct.Constant[int]):
    """SiLU (swish), elementwise: y = x * sigmoid(x) = x / (1 + exp(-x)).

    x, y: 1-D arrays of n elements, same dtype.
    Grid: (cdiv(n, BLOCK),); block b owns elements [b * BLOCK, (b + 1) * BLOCK): tile index b.
    Masking: the ragged last tile loads 0.0 past n (padding_mode=ZERO) and the store drops it.
    Hint: in fp32, x / (1 + exp(-x)) behaves at both ends: for very negative x, exp(-x) overflows to
    inf and y becomes -0; for large x, exp(-x) -> 0 and y -> x. No special cases needed.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU x * sigmoid(x) of a contiguous tensor."""
    return _elementwise(silu_kernel, x)


@student_kernel("linear_kernel_tf32", reference="glm_asr_cutile_example.layers", guide="docs/guide-cutile.md#linear_kernel_tf32")
def linear_kernel_tf32(x, w, bias, out, HAS_BIAS: ct.Constant[bool], TF32: ct.Constant[bool],
                       BLOCK_M: ct.Constant[int], BLOCK_N: ct.Constant[int], BLOCK_K: ct.Constant[int]):
    """out = x @ w^T + bias (nn.Linear), one (BLOCK_M, BLOCK_N) output tile per block.

    x: (M, K); w: (N, K) (row n is output feature n); bias: (N,), read only when HAS_BIAS;
    out: (M, N). Any row strides, last dims contiguous.
    Grid: (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)). Block (i, j) owns out tile (i, j) and walks K:
    acc (fp32) = ct.mma(x tile (i, k) of (BLOCK_M, BLOCK_K), w tile (j, k) of (BLOCK_N, BLOCK_K)
    transposed, acc) for k in range(ct.num_tiles(x, 1, (BLOCK_M, BLOCK_K))).
    Masking: padding_mode=ZERO on every load: rows past M, columns past N and the ragged end of K read
    0.0, which adds nothing to a dot product; the store drops rows >= M and columns >= N.
    TF32: fp32 operands go to the tensor cores as tfloat32 (ct.astype(t, ct.tfloat32): mantissa
    rounded to 10 bits, ~1e-3 relative error); False keeps fp32 (cuTile then multiplies on the
    ordinary fp32 units: exact, far slower). bf16 operands multiply as they are, accumulating in fp32.
    Hint: ct.mma needs both operands in one dtype and an fp32 accumulator; ct.transpose(w_tile)
    turns the (BLOCK_N, BLOCK_K) weight tile into the (BLOCK_K, BLOCK_N) right-hand side. Round once,
    at the store (ct.astype(acc, out.dtype)).
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def _linear_tiles(M: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K) for M rows: decode (M <= 16) reads each weight tile once for all
    rows, so one short row tile and long K steps; the encoder (M = 1500) reuses every tile, so
    128 x 128. K steps are counted in bytes: fp32 tiles hold as many bytes per step as bf16 ones."""
    step = 128 // dtype.itemsize
    if M <= 16:
        return 16, 64, 2 * step
    if M <= 64:
        return 64, 64, step
    return 128, 128, step


def linear_tf32(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                precision: str = "tf32", out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x @ weight^T + bias on the tensor cores, in x.dtype (shapes: launch_contracts.linear); x
    may be a strided row view such as hidden[:, -1]; bf16 ignores precision (fp32 accumulation)."""
    M, N, K, out = launch_contracts.linear(x, weight, out, precision)
    block_m, block_n, block_k = _linear_tiles(M, x.dtype)
    # Without a bias the kernel never reads that argument (HAS_BIAS=False compiles the load away).
    launch((cdiv(M, block_m), cdiv(N, block_n)), linear_kernel_tf32, x, weight,
           weight[0] if bias is None else bias, out, bias is not None, precision == "tf32",
           block_m, block_n, block_k)
    return out


@student_kernel("softmax_kernel", reference="glm_asr_cutile_example.layers", guide="docs/guide-cutile.md#softmax_kernel")
def softmax_kernel(x, y, ROWS: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    """Row softmax: y = exp(x - max(x)) / sum(exp(x - max(x))) over each row of N values.

    x: (n_rows, N) array (any row stride, last dim contiguous); y: (n_rows, N); any float dtype,
    computed in fp32.
    Grid: (cdiv(n_rows, ROWS),); block b handles rows b*ROWS .. b*ROWS + ROWS - 1, each whole in a
    BLOCK_N = next_power_of_2(N) tile.
    Masking: load with padding_mode=NEG_INF: padding lanes never win the max and add exp(-inf) = 0
    to the sum. Rows past n_rows are all -inf and come out NaN; the store drops them.
    Hint: subtracting the row max first keeps every exponent <= 0: no overflow whatever the logits.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Numerically stable softmax over the last dimension."""
    rows = as_rows(x)
    n_rows, width = rows.shape
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    block = next_power_of_2(width)
    per_block = rows_per_block(n_rows, block)
    launch((cdiv(n_rows, per_block),), softmax_kernel, rows, y, per_block, block)
    return y.view(x.shape)


if __name__ == "__main__":  # the self-check: every case of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))

