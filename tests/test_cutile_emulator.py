"""cuTile semantics that the course kernels rely on, checked on small kernels written for the test.

Without a GPU these kernels run in the CPU emulator (cutile_emulator/emulator.py); on a GPU,
glm_asr_course.runtimes.cutile hands them to the real cuda.tile, so the same assertions check that
the emulator's semantics are the real ones. Expected values come from torch, computed independently
of both. Tests about the emulator itself (its error lines, its launch record, what it refuses) run
in emulation only.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glm_asr_course.runtimes import cutile as cutile_runtime
from glm_asr_course.kernels import todo_kernels
from glm_asr_course.runtimes.cutile import MODE, ct, launch

REPO = Path(__file__).resolve().parent.parent
DEV = "cuda" if MODE == "gpu" else "cpu"
emulator_only = pytest.mark.skipif(MODE != "emulate", reason="checks the CPU emulator itself")


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------------
# Loads and stores: tile-unit indices, padding, the edge
# --------------------------------------------------------------------------------------------------


@ct.kernel
def copy_tiles(x, y, TM: ct.Constant[int], TN: ct.Constant[int]):
    tile = ct.load(x, (ct.bid(0), ct.bid(1)), (TM, TN), padding_mode=ct.PaddingMode.ZERO)
    ct.store(y, (ct.bid(0), ct.bid(1)), tile)


@ct.kernel
def padded_tile(x, out, TM: ct.Constant[int], TN: ct.Constant[int], NEG_INF: ct.Constant[bool]):
    mode = ct.PaddingMode.NEG_INF if NEG_INF else ct.PaddingMode.ZERO
    ct.store(out, (0, 0), ct.load(x, (1, 1), (TM, TN), padding_mode=mode))


def test_store_drops_the_part_of_a_tile_past_the_array():
    x = torch.randn(5, 7, device=DEV)
    # y is a window of a larger buffer: a store that wrote past y's edge would change the buffer.
    buffer = torch.full((8, 8), 123.0, device=DEV)
    y = buffer[:5, :7]
    launch((2, 2), copy_tiles, x, y, 4, 4)
    sync()
    assert torch.equal(y, x)
    outside = torch.ones(8, 8, dtype=torch.bool, device=DEV)
    outside[:5, :7] = False
    assert bool((buffer[outside] == 123.0).all())


@pytest.mark.parametrize("neg_inf", [False, True], ids=["zero", "neg_inf"])
def test_load_fills_the_lanes_past_the_array_with_the_padding(neg_inf):
    x = torch.randn(6, 5, device=DEV)
    out = torch.full((4, 4), float("nan"), device=DEV)
    launch((1,), padded_tile, x, out, 4, 4, neg_inf)  # tile (1, 1): rows 4..7, columns 4..7
    sync()
    expected = torch.full((4, 4), float("-inf") if neg_inf else 0.0, device=DEV)
    expected[:2, :1] = x[4:, 4:]
    assert torch.equal(out, expected)


@ct.kernel
def load_tile_at(x, out, INDEX: ct.Constant[int], SIZE: ct.Constant[int]):
    ct.store(out, (0,), ct.load(x, (INDEX,), (SIZE,), padding_mode=ct.PaddingMode.ZERO))


def test_load_index_counts_tiles_not_elements():
    x = torch.arange(10, dtype=torch.int32, device=DEV)
    out = torch.empty(4, dtype=torch.int32, device=DEV)
    launch((1,), load_tile_at, x, out, 2, 4)  # tile 2 of 4 elements: elements 8, 9 and padding
    sync()
    assert out.tolist() == [8, 9, 0, 0]


@ct.kernel
def transpose_by_order(x, out, T: ct.Constant[int]):
    ct.store(out, (0, 0), ct.load(x, (0, 0), (T, T), order="F"))


def test_load_order_f_reads_the_transpose():
    x = torch.randn(4, 4, device=DEV)
    out = torch.empty(4, 4, device=DEV)
    launch((1,), transpose_by_order, x, out, 4)
    sync()
    assert torch.equal(out, x.T)


@ct.kernel
def copy_strided_heads(q, out, TT: ct.Constant[int], TD: ct.Constant[int]):
    tile = ct.load(q, (ct.bid(1) // q.shape[1], ct.bid(1) % q.shape[1], ct.bid(0), 0), (1, 1, TT, TD),
                   padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, (ct.bid(1) // q.shape[1], ct.bid(1) % q.shape[1], ct.bid(0), 0), tile)


def test_strided_4d_views_load_by_their_strides():
    qkv = torch.randn(2, 7, 3 * 3 * 24, device=DEV)
    q = qkv[..., 3 * 24: 6 * 24].view(2, 7, 3, 24).transpose(1, 2)  # (B, H, T, D) with odd strides
    out = torch.full((2, 3, 7, 24), float("nan"), device=DEV)
    launch((2, 6), copy_strided_heads, q, out, 4, 32)
    sync()
    assert torch.equal(out, q)


@ct.kernel
def slice_halves(x, out, HALF: ct.Constant[int], T: ct.Constant[int]):
    second = x.slice(1, HALF, 2 * HALF)
    ct.store(out, (0, 0), ct.load(second, (0, 0), (T, T), padding_mode=ct.PaddingMode.ZERO))


def test_array_slice_is_a_view_with_its_own_edge():
    x = torch.randn(3, 10, device=DEV)
    out = torch.full((4, 4), float("nan"), device=DEV)
    launch((1,), slice_halves, x, out, 3, 4)
    sync()
    expected = torch.zeros(4, 4, device=DEV)
    expected[:3, :3] = x[:, 3:6]
    assert torch.equal(out, expected)


# --------------------------------------------------------------------------------------------------
# Element-indexed access
# --------------------------------------------------------------------------------------------------


@ct.kernel
def gather_rows(table, rows, out, R: ct.Constant[int], C: ct.Constant[int]):
    index = ct.load(rows, (0,), (R,), padding_mode=ct.PaddingMode.ZERO)
    lanes = ct.arange(C, dtype=ct.int32)
    values = ct.gather(table, (index[:, None], lanes[None, :]), mask=(index >= 1)[:, None], padding_value=-1.0)
    ct.store(out, (0, 0), values)


def test_gather_pads_indices_outside_the_array_and_masked_lanes():
    table = torch.randn(5, 3, device=DEV)
    rows = torch.tensor([4, 0, 7, -1, 2, 1, 3, 4], dtype=torch.int32, device=DEV)
    out = torch.empty(8, 4, device=DEV)
    launch((1,), gather_rows, table, rows, out, 8, 4)
    sync()
    expected = torch.full((8, 4), -1.0, device=DEV)
    for i, r in enumerate(rows.tolist()):
        if 1 <= r < 5:
            expected[i, :3] = table[r]
    assert torch.equal(out, expected)


@ct.kernel
def scatter_values(out, index, N: ct.Constant[int]):
    where = ct.load(index, (0,), (N,), padding_mode=ct.PaddingMode.ZERO)
    ct.scatter(out, where, ct.astype(ct.arange(N, dtype=ct.int32), ct.float32) + 1.0)


def test_scatter_drops_indices_outside_the_array():
    out = torch.zeros(6, device=DEV)
    index = torch.tensor([5, 9, 0, -3], dtype=torch.int32, device=DEV)
    launch((1,), scatter_values, out, index, 4)
    sync()
    assert out.tolist() == [3.0, 0.0, 0.0, 0.0, 0.0, 1.0]


# --------------------------------------------------------------------------------------------------
# Matrix products and conversions
# --------------------------------------------------------------------------------------------------


@ct.kernel
def matmul_kernel(a, b, c, TF32: ct.Constant[bool], M: ct.Constant[int], N: ct.Constant[int], K: ct.Constant[int]):
    x = ct.load(a, (0, 0), (M, K), padding_mode=ct.PaddingMode.ZERO)
    y = ct.load(b, (0, 0), (K, N), padding_mode=ct.PaddingMode.ZERO)
    if TF32:
        x = ct.astype(x, ct.tfloat32)
        y = ct.astype(y, ct.tfloat32)
    ct.store(c, (0, 0), ct.mma(x, y, ct.full((M, N), 1.0, ct.float32)))


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 values with the mantissa rounded to 10 bits, to nearest, ties to even (independent of
    the emulator: in float64, adding and subtracting 1.5 * 2^(e+41), whose ulp is 2^(e-11), rounds
    t = m * 2^e, 0.5 <= m < 1, to a multiple of 2^(e-11): 10 bits after the leading one)."""
    exponent = torch.frexp(t.double())[1].double()
    shift = 1.5 * torch.pow(2.0, exponent + 41)
    return ((t.double() + shift) - shift).float()


def test_mma_bf16_multiplies_exactly_and_accumulates_in_fp32():
    a = torch.randn(16, 32, device=DEV).bfloat16()
    b = torch.randn(32, 16, device=DEV).bfloat16()
    c = torch.empty(16, 16, device=DEV)
    launch((1,), matmul_kernel, a, b, c, False, 16, 16, 32)
    sync()
    reference = a.double() @ b.double() + 1.0
    assert (c.double() - reference).abs().max() <= 1e-5 * reference.abs().max()


def test_mma_tf32_rounds_the_operands_to_nearest_even():
    # Ties between two tf32 values: 1 + 2^-11 rounds down to 1 (even), 1 + 3 * 2^-11 up to 1 + 2^-9.
    tie_down, tie_up, plain = 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -12
    a = torch.tensor([[tie_down, tie_up, plain, -tie_up]] * 16, device=DEV)
    b = torch.zeros(4, 16, device=DEV)
    b[torch.arange(4), torch.arange(4)] = 1.0  # picks column j of a into output column j
    c = torch.empty(16, 16, device=DEV)
    launch((1,), matmul_kernel, a, b, c, True, 16, 16, 4)
    sync()
    expected = torch.tensor([1.0, 1 + 2 ** -9, 1.0, -(1 + 2 ** -9)], device=DEV) + 1.0
    assert torch.equal(c[:, :4], expected.expand(16, 4))
    assert torch.equal(round_to_tf32(a[0]) + 1.0, expected)


def test_mma_tf32_and_fp32_precision():
    a = torch.randn(16, 64, device=DEV)
    b = torch.randn(64, 16, device=DEV)
    tf32, fp32 = torch.empty(16, 16, device=DEV), torch.empty(16, 16, device=DEV)
    launch((1,), matmul_kernel, a, b, tf32, True, 16, 16, 64)
    launch((1,), matmul_kernel, a, b, fp32, False, 16, 16, 64)
    sync()
    exact = a.double() @ b.double() + 1.0
    rounded = round_to_tf32(a).double() @ round_to_tf32(b).double() + 1.0
    scale = exact.abs().max()
    assert (tf32.double() - rounded).abs().max() <= 1e-5 * scale  # tf32 operands, fp32 accumulation
    assert (tf32.double() - exact).abs().max() >= 1e-5 * scale  # which is visibly not fp32
    assert (fp32.double() - exact).abs().max() <= 1e-5 * scale


@ct.kernel
def to_bf16(x, y, N: ct.Constant[int]):
    ct.store(y, (0,), ct.astype(ct.load(x, (0,), (N,)), ct.bfloat16))


def test_astype_bfloat16_rounds_to_nearest_even():
    x = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20,
                      3.0e38, 1e-40, float("inf"), float("nan")], device=DEV)
    y = torch.empty(8, dtype=torch.bfloat16, device=DEV)
    launch((1,), to_bf16, x, y, 8)
    sync()
    assert torch.equal(y[:7], x[:7].bfloat16()) and bool(y[7].isnan())


@ct.kernel
def promotions(x, scale, loose_out, strict_out, N: ct.Constant[int]):
    tile = ct.load(x, (0,), (N,))
    ct.store(loose_out, (0,), ct.astype(tile * 1.1, ct.float32))  # a Python float keeps bf16
    ct.store(strict_out, (0,), tile * scale)  # an fp32 scalar argument promotes to fp32


def test_python_numbers_adopt_the_tile_dtype_and_scalar_arguments_are_fp32():
    x = (torch.randn(16, device=DEV) * 10).bfloat16()
    loose, strict = torch.empty(16, device=DEV), torch.empty(16, device=DEV)
    launch((1,), promotions, x, 1.1, loose, strict, 16)
    sync()
    # bf16 * 1.1: the constant (a float32 1.1) becomes bf16, the product is rounded to bf16.
    assert torch.equal(loose, (x * torch.tensor(1.1, dtype=torch.float32).bfloat16()).float())
    # The 1.1 argument arrives as fp32; the product is an fp32 one.
    assert torch.equal(strict, x.float() * torch.tensor(1.1, dtype=torch.float32))


@ct.kernel
def reductions(x, sums, maxima, R: ct.Constant[int], C: ct.Constant[int]):
    tile = ct.load(x, (0, 0), (R, C))
    ct.store(sums, (0, 0), ct.sum(tile, axis=1, keepdims=True))
    ct.store(maxima, (0,), ct.max(tile, axis=0))


def test_sum_and_max_reduce_an_axis_and_max_skips_nan():
    x = torch.randn(4, 8, device=DEV)
    x[1, 3] = float("nan")
    sums, maxima = torch.empty(4, 1, device=DEV), torch.empty(8, device=DEV)
    launch((1,), reductions, x, sums, maxima, 4, 8)
    sync()
    finite = ~x.isnan()
    assert torch.allclose(sums[finite.all(1)], x[finite.all(1)].sum(1, keepdim=True), rtol=1e-6, atol=1e-6)
    assert bool(sums[1].isnan())
    assert torch.equal(maxima, torch.where(finite, x, float("-inf")).amax(0))


@ct.kernel
def float64_math(x, cos_out, exp2_out, scaled_out, N: ct.Constant[int]):
    wide = ct.astype(ct.load(x, (0,), (N,)), ct.float64)
    ct.store(cos_out, (0,), ct.cos(wide))
    ct.store(exp2_out, (0,), ct.exp2(wide * 0.0009765625))
    ct.store(scaled_out, (0,), wide * 0.001)


def test_float64_math_is_float64_but_python_floats_are_float32():
    x = torch.tensor([0.5, 1000.25, 8191.0, 4097.125], device=DEV)
    cos_out, exp2_out, scaled_out = (torch.empty(4, dtype=torch.float64, device=DEV) for _ in range(3))
    launch((1,), float64_math, x, cos_out, exp2_out, scaled_out, 4)
    sync()
    assert (cos_out - x.double().cos()).abs().max() <= 1e-15
    assert ((exp2_out - torch.exp2(x.double() * 2 ** -10)) / exp2_out).abs().max() <= 1e-15
    # A Python float in tile code is a float32 constant, even next to a float64 tile.
    assert torch.equal(scaled_out, x.double() * torch.tensor(0.001, dtype=torch.float32).double())


# 2x^3 - 3x^2 + 0.5, highest power first: exact in fp32 at small integers, fused multiply-add or not.
CUBIC = (2.0, -3.0, 0.0, 0.5)


@ct.kernel
def cubic_by_horner(x, out, N: ct.Constant[int]):
    t = ct.load(x, (0,), (N,))
    value = ct.zeros((N,), ct.float32)
    for coefficient in ct.static_iter(CUBIC):
        value = value * t + coefficient
    ct.store(out, (0,), value)


def test_static_iter_runs_the_body_once_per_constant():
    x = torch.tensor([-2.0, 0.0, 1.0, 3.0], device=DEV)
    out = torch.empty(4, device=DEV)
    launch((1,), cubic_by_horner, x, out, 4)
    sync()
    assert torch.equal(out, 2 * x ** 3 - 3 * x ** 2 + 0.5)

@ct.kernel
def block_ids(out):
    ct.store(out, (ct.bid(0), ct.bid(1), ct.bid(2)),
             ct.full((1, 1, 1), ct.bid(0) + 10 * ct.bid(1) + 100 * ct.bid(2) + 1000 * ct.num_blocks(0), ct.int32))


def test_bid_and_num_blocks_over_a_3d_grid():
    out = torch.zeros(3, 2, 2, dtype=torch.int32, device=DEV)
    launch((3, 2, 2), block_ids, out)
    sync()
    i, j, k = torch.meshgrid(torch.arange(3), torch.arange(2), torch.arange(2), indexing="ij")
    assert torch.equal(out.cpu(), (i + 10 * j + 100 * k + 3000).int())


@pytest.mark.skipif(MODE != "gpu", reason="CUDA graphs need a GPU")
def test_launches_are_captured_by_a_cuda_graph():
    x, y = torch.randn(8, 8, device=DEV), torch.empty(8, 8, device=DEV)
    launch((2, 2), copy_tiles, x, y, 4, 4)  # the first launch compiles, outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch((2, 2), copy_tiles, x, y, 4, 4)
    x.copy_(torch.randn(8, 8, device=DEV))
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x)


@ct.kernel
def add_one_after_wait(x, y, step, N: ct.Constant[int]):
    """y = x + step[0], launched with programmatic dependent launch: step is read before the wait
    (nothing writes it), x only after (the kernel before wrote it)."""
    ct.grid_dependency_control_launch_dependents()
    increment = ct.load(step, (0,), (N,))
    ct.grid_dependency_control_wait()
    ct.store(y, (ct.bid(0),), ct.load(x, (ct.bid(0),), (N,)) + increment)


def test_programmatic_dependent_launches_see_the_kernel_before():
    """A chain of kernels each reading what the one before wrote: with programmatic dependent launch a
    kernel starts early, and its wait must still order its reads after the previous kernel's writes
    (on a GPU: the chain captured as one CUDA graph, as the decode step runs)."""
    n, blocks, links = 64, 8, 40
    a, b = torch.zeros(n * blocks, device=DEV), torch.zeros(n * blocks, device=DEV)
    step = torch.ones(n, device=DEV)

    def chain():
        for i in range(links):
            src, dst = (a, b) if i % 2 == 0 else (b, a)
            launch((blocks,), add_one_after_wait, src, dst, step, n, pdl=True)

    chain()
    sync()
    assert torch.equal(a, torch.full_like(a, links))
    if DEV == "cuda":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain()
        for _ in range(3):
            graph.replay()
        sync()
        assert torch.equal(a, torch.full_like(a, 4 * links))


# --------------------------------------------------------------------------------------------------
# The emulator itself: what it refuses, its error lines, its launch record
# --------------------------------------------------------------------------------------------------


@ct.kernel
def uses_erf(x, N: ct.Constant[int]):
    ct.store(x, (0,), ct.erf(ct.load(x, (0,), (N,))))


@ct.kernel
def uses_tile_item(x):
    ct.store(x, (0,), ct.load(x, (0,), (1,)).item())


@emulator_only
def test_an_unsupported_call_raises_one_line_naming_it():
    with pytest.raises(ct.CutileEmulatorError) as info:
        launch((1,), uses_erf, torch.zeros(4), 4)
    message = str(info.value)
    assert message.startswith("cuda.tile emulator: ct.erf is not supported (the emulator implements: ")
    assert "\n" not in message and "mma" in message and "load" in message
    with pytest.raises(ct.CutileEmulatorError, match=r"ct\.Tile\.item is not supported"):
        launch((1,), uses_tile_item, torch.zeros(4))


@ct.kernel
def bad_tile_shape(x):
    ct.load(x, (0,), (3,), padding_mode=ct.PaddingMode.ZERO)


@ct.kernel
def tile_outside(x):
    ct.load(x, (5,), (4,), padding_mode=ct.PaddingMode.ZERO)


@ct.kernel
def store_fp32_into_bf16(x, y):
    ct.store(y, (0,), ct.load(x, (0,), (4,)))


@ct.kernel
def mixes_half_precisions(x, y):
    ct.store(y, (0,), ct.load(x, (0,), (4,)) + ct.load(y, (0,), (4,)))


@ct.kernel
def mma_mixed_dtypes(x, y, out):
    ct.store(out, (0, 0), ct.mma(ct.load(x, (0, 0), (4, 4)), ct.load(y, (0, 0), (4, 4)), ct.zeros((4, 4), ct.float32)))


@ct.kernel
def tf32_arithmetic(x):
    ct.store(x, (0,), ct.astype(ct.astype(ct.load(x, (0,), (4,)), ct.tfloat32) * 2.0, ct.float32))


@ct.kernel
def unrolls_past_the_limit(x):
    total = ct.load(x, (0,), (4,))
    for _ in ct.static_iter(range(1001)):
        total = total + 1.0
    ct.store(x, (0,), total)


@emulator_only
@pytest.mark.parametrize("kern, args, message", [
    (bad_tile_shape, lambda: (torch.zeros(8),), "must be a power of two"),
    (tile_outside, lambda: (torch.zeros(8),), "lies entirely outside the array"),
    (store_fp32_into_bf16, lambda: (torch.zeros(4), torch.zeros(4, dtype=torch.bfloat16)),
     "cannot implicitly cast float32 to bfloat16"),
    (mixes_half_precisions, lambda: (torch.zeros(4, dtype=torch.float16), torch.zeros(4, dtype=torch.bfloat16)),
     "promotion of float16 and bfloat16 is not supported"),
    (mma_mixed_dtypes, lambda: (torch.zeros(4, 4), torch.zeros(4, 4, dtype=torch.bfloat16), torch.zeros(4, 4)),
     "x and y must have the same dtype"),
    (tf32_arithmetic, lambda: (torch.zeros(4),), "tfloat32 only feeds ct.mma"),
    (unrolls_past_the_limit, lambda: (torch.zeros(4),), "cuTile unrolls at most 1000"),
], ids=["shape", "outside", "store-cast", "f16-bf16", "mma-dtypes", "tf32-arith", "static-iter"])
def test_code_the_compiler_rejects_or_leaves_undefined_is_refused(kern, args, message):
    with pytest.raises(ct.CutileEmulatorError, match=message):
        launch((1,), kern, *args())


@ct.kernel
def undetermined_padding(x, out, N: ct.Constant[int]):
    ct.store(out, (0,), ct.load(x, (0,), (N,)))


@emulator_only
def test_undetermined_padding_reads_nan():
    out = torch.zeros(4)
    launch((1,), undetermined_padding, torch.ones(3), out, 4)
    assert out[:3].tolist() == [1.0, 1.0, 1.0] and math.isnan(out[3])


@emulator_only
def test_math_functions_take_the_keywords_cutile_takes():
    assert ct.exp2(3.0, flush_to_zero=True) == 8.0
    assert ct.sqrt(4.0, rounding_mode=None, flush_to_zero=False) == 2.0
    with pytest.raises(TypeError, match="ct.log.. got an unexpected keyword argument 'flush_to_zero'"):
        ct.log(2.0, flush_to_zero=True)
    with pytest.raises(TypeError, match="'rounding_mode'"):
        ct.exp2(2.0, rounding_mode=None)


@emulator_only
def test_scalar_arguments_must_fit_int32_and_constants_are_numbers():
    with pytest.raises(ct.CutileEmulatorError, match="does not fit the int32"):
        launch((1,), load_tile_at, torch.zeros(4), 2 ** 31, 0, 4)
    with pytest.raises(ct.CutileEmulatorError, match="ct.Constant arguments are bool, int or float"):
        launch((1,), load_tile_at, torch.zeros(4), torch.zeros(4), "0", 4)


@emulator_only
def test_launches_are_recorded_for_the_compile_check():
    x = torch.randn(6, 5)[:, :4]  # a strided view: row stride 5
    y = torch.empty(6, 4)
    launch((2, 1), copy_tiles, x, y, 4, 4)
    records = [r for r in cutile_runtime.recorded_signatures() if r["kernel"].endswith(".copy_tiles")]
    record = next(r for r in records if r["params"][0]["strides"] == [5, 1])
    assert record["grid"] == [2, 1] and record["launches"] >= 1
    assert record["params"] == [
        {"param": "x", "kind": "array", "dtype": "float32", "shape": [6, 4], "strides": [5, 1],
         "aligned16": x.data_ptr() % 16 == 0},
        {"param": "y", "kind": "array", "dtype": "float32", "shape": [6, 4], "strides": [4, 1],
         "aligned16": y.data_ptr() % 16 == 0},
        {"param": "TM", "kind": "constant", "value": 4},
        {"param": "TN", "kind": "constant", "value": 4},
    ]


@emulator_only
def test_signatures_set_aside_hold_only_the_launches_inside():
    """The guard of the sm_90 compile tests under pytest-xdist (conftest's own_cutile_launch_record): inside,
    the record holds only what was launched there; afterwards the earlier record is back, the new after it."""
    def copies_of(width):
        return [r for r in cutile_runtime.recorded_signatures() if r["kernel"].endswith(".copy_tiles")
                and r["params"][0]["shape"] == [2, width]]

    launch((1, 1), copy_tiles, torch.ones(2, 3), torch.empty(2, 3), 2, 4)
    before = [r["kernel"] + str(r["params"]) for r in cutile_runtime.recorded_signatures()]
    with cutile_runtime.signatures_set_aside():
        assert cutile_runtime.recorded_signatures() == []
        launch((1, 1), copy_tiles, torch.ones(2, 5), torch.empty(2, 5), 2, 8)
        assert len(cutile_runtime.recorded_signatures()) == 1 and len(copies_of(5)) == 1
    after = [r["kernel"] + str(r["params"]) for r in cutile_runtime.recorded_signatures()]
    assert after[:len(before)] == before and len(copies_of(3)) == 1 and len(copies_of(5)) == 1


# --------------------------------------------------------------------------------------------------
# The runtime: template stand-ins, modes
# --------------------------------------------------------------------------------------------------


def test_launch_resolves_a_template_stand_in():
    @todo_kernels.student_kernel("gelu_kernel", reference="glm_asr_cutile_example.layers", guide="GUIDE.md#gelu_kernel")
    def gelu_kernel(x, y, BLOCK):
        """doc"""

    x = torch.randn(37, device=DEV)
    y = torch.empty_like(x)
    with pytest.raises(todo_kernels.KernelTodo, match="gelu_kernel in tests/test_cutile_emulator.py is a TODO"):
        with todo_kernels.references_for(None, ["gelu_kernel"]).active():
            launch((1,), gelu_kernel, x, y, 64)
    with todo_kernels.references_for("gelu_kernel", ["gelu_kernel"]).active() as references:
        launch((1,), gelu_kernel, x, y, 64)
        sync()
    assert references.substituted() == ["gelu_kernel"]
    assert torch.allclose(y, torch.nn.functional.gelu(x), rtol=1e-6, atol=1e-6)


def test_compile_mode_refuses_launches_in_one_line(monkeypatch):
    monkeypatch.setattr(cutile_runtime, "MODE", "compile")
    with pytest.raises(cutile_runtime.LaunchRefused) as info:
        launch((1,), copy_tiles, torch.zeros(1), torch.zeros(1), 1, 1)
    assert str(info.value) == ("GLM_ASR_CUTILE=compile only compiles kernels; launching copy_tiles needs a GPU "
                               "or GLM_ASR_CUTILE=emulate")


def test_an_unknown_mode_is_one_error_line():
    env = dict(os.environ, GLM_ASR_CUTILE="fast")
    result = subprocess.run([sys.executable, "-c", "import glm_asr_course.runtimes.cutile"], cwd=REPO, env=env,
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "GLM_ASR_CUTILE='fast': expected one of gpu, emulate, compile" in result.stderr
