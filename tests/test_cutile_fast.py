"""The cuTile example's fast path (fast_linear, fast_attention, fast_rope, fast_head) against torch.

Awkward shapes on purpose: 1, 2, 3, 17 and 75 rows, widths and head sizes that are not powers of
two (24, 40, 80, 100), GQA, causal attention with left padding, decode splits that are empty, a
vocabulary that does not fill its last tile, ties in the argmax. fp32 in both precisions (IEEE and
tf32) and bf16. Without a GPU the kernels run in the cuTile emulator; the last test compiles, for
sm_90 with the real compiler, every fast-path signature the other tests launched. The whole model
is checked against transformers in test_parity.py (the fast path is the folder's default track).
"""

import json
import math
import subprocess
import sys

import pytest
import torch

from glm_asr_course.runtimes.cutile import MODE, recorded_signatures, write_signatures
from glm_asr_course.tracks import path_summary, resolve_path
from glm_asr_course.reference.torch_ops import attention as torch_attention
from glm_asr_course.reference.torch_ops import rope as torch_rope
from glm_asr_course.reference.torch_ops import rope_tables as torch_rope_tables
from glm_asr_cutile_example import fast_attention, fast_head, fast_linear, fast_rope
from glm_asr_lab.cutile_compile_check import REPO, toolchain_missing

from cutile_launches import record_launch_calls, record_launches

# Its sm_90 compile test compiles what this file launched, whatever ran before it (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("own_cutile_launch_record")

DEV = "cuda" if MODE == "gpu" else "cpu"
FP32, BF16 = torch.float32, torch.bfloat16
# (dtype, precision) → max |out - ref| / max |ref| for products summed over K.
TOL = {(FP32, "ieee"): 2e-6, (FP32, "tf32"): 3e-3, (BF16, "ieee"): 1.5e-2}
PRECISIONS = [(FP32, "ieee"), (FP32, "tf32"), (BF16, "ieee")]
FAST_MODULES = ("fast_linear", "fast_attention", "fast_rope", "fast_head")


def rand(*shape, dtype=FP32, scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.randn(*shape, generator=gen) * scale).to(DEV, dtype)


def rel_err(out, ref) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out).all()
    return float((out - ref).abs().max() / ref.abs().max())


def as_operand(t, precision):
    """The values the tensor cores multiply: tf32 rounds fp32 operands to 10 mantissa bits."""
    t = t.double()
    if precision == "tf32":
        bits = t.float().view(torch.int32)
        t = ((bits + 0x1000) & ~0x1FFF).view(torch.float32).double()
    return t


def test_the_folders_default_path_is_the_fast_one():
    assert resolve_path("glm_asr_cutile_example", None) == "fast"
    import glm_asr_cutile_example.fast_model as fast_model

    assert path_summary(fast_model) == "GLM-ASR on fused cuTile kernels"


# ---------------------------------------------------------------------------------------------
# Linear layers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, precision", PRECISIONS)
@pytest.mark.parametrize("M, N, K", [(1, 100, 24), (2, 40, 80), (3, 100, 80), (17, 40, 24), (75, 100, 136)])
@pytest.mark.parametrize("epilogue", ["plain", "bias_gelu", "bias_residual"])
def test_linear_matches_torch(dtype, precision, M, N, K, epilogue):
    x, w, b, r = rand(M, K, dtype=dtype), rand(N, K, dtype=dtype, scale=K ** -0.5), rand(N, dtype=dtype), \
        rand(M, N, dtype=dtype, seed=1)
    ref = as_operand(x, precision) @ as_operand(w, precision).T
    if epilogue == "plain":
        out = fast_linear.linear(x, w, precision=precision)
    elif epilogue == "bias_gelu":
        out = fast_linear.linear(x, w, b, gelu=True, precision=precision)
        ref = torch.nn.functional.gelu((ref + b.double()).to(dtype).double())
    else:
        out = fast_linear.linear(x, w, b, accumulate_into=r.clone(), precision=precision)
        ref = (ref + b.double()).to(dtype).double() + r.double()
    assert out.shape == (M, N) and out.dtype == dtype
    assert rel_err(out, ref) <= TOL[dtype, precision]


@pytest.mark.parametrize("dtype, precision", PRECISIONS)
@pytest.mark.parametrize("rows", [1, 2, 17])
def test_llama_mlp_gemv_and_gated_gemm_match_torch(dtype, precision, rows):
    """rows <= 2: RMSNorm in the gate|up GEMV's prologue, SwiGLU in the down GEMV's; more: the gated GEMM."""
    H, F, eps = 40, 24, 1e-5
    x, norm_w = rand(rows, H, dtype=dtype, scale=3.0), rand(H, dtype=dtype, seed=2)
    w_gu, w_down = rand(2 * F, H, dtype=dtype, scale=H ** -0.5), rand(H, F, dtype=dtype, scale=F ** -0.5)
    xd = x.double()
    normed = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)).to(dtype).double()
    h = (normed * norm_w.double()).to(dtype)
    gate_up = as_operand(h, precision) @ as_operand(w_gu, precision).T
    gate, up = gate_up[:, :F].to(dtype).double(), gate_up[:, F:].to(dtype).double()
    activated = (torch.nn.functional.silu(gate).to(dtype).double() * up).to(dtype)
    ref = (as_operand(activated, precision) @ as_operand(w_down, precision).T).to(dtype).double() + xd
    out = fast_linear.llama_mlp(x.clone(), norm_w, eps, w_gu, w_down, precision=precision)
    assert rel_err(out, ref) <= TOL[dtype, precision]


def test_gated_gemv_takes_the_gpus_occupancy_hint(monkeypatch):
    """The decode gate|up GEMV runs a copy of gemv_kernel compiled with the GPU's hints
    (KERNEL_HINTS_BY_GPU; here a made-up GPU's), and computes what the plain kernel does; the other
    GEMVs and unlisted GPUs keep gemv_kernel."""
    launched = record_launches(monkeypatch, fast_linear)
    H, F, eps = 40, 24, 1e-5
    x, norm_w = rand(1, H, dtype=torch.bfloat16, scale=3.0), rand(H, dtype=torch.bfloat16, seed=2)
    w_gu, w_down = rand(2 * F, H, dtype=torch.bfloat16, scale=H ** -0.5), rand(H, F, dtype=torch.bfloat16, scale=F ** -0.5)
    plain = fast_linear.llama_mlp(x.clone(), norm_w, eps, w_gu, w_down, precision="tf32")
    assert launched == [fast_linear.gemv_kernel] * 2
    monkeypatch.setattr(fast_linear, "gpu_name", lambda device: "test GPU")
    kind, tile = fast_linear.linear_tiles(1, 2 * F, H, torch.bfloat16)
    monkeypatch.setitem(fast_linear.KERNEL_HINTS_BY_GPU, "test GPU", {("gated " + kind, tile): ((1, {"occupancy": 4}),)})
    launched.clear()
    hinted = fast_linear.llama_mlp(x.clone(), norm_w, eps, w_gu, w_down, precision="tf32")
    gated, down = launched
    assert down is fast_linear.gemv_kernel and gated is not fast_linear.gemv_kernel
    assert gated._pyfunc is fast_linear.gemv_kernel._pyfunc and gated.compiler_options == {"occupancy": 4}
    assert torch.equal(hinted, plain)
    # A prompt's rows take the gated GEMM, with that kind's hints.
    kind, tile = fast_linear.linear_tiles(17, 2 * F, H, torch.bfloat16)
    monkeypatch.setitem(fast_linear.KERNEL_HINTS_BY_GPU, "test GPU", {("gated " + kind, tile): ((1, {"num_ctas": 2}),)})
    launched.clear()
    rows = rand(17, H, dtype=torch.bfloat16, scale=3.0)
    fast_linear.llama_mlp(rows, norm_w, eps, w_gu, w_down, precision="tf32")
    gated_gemm = [k for k in launched if getattr(k, "_pyfunc", None) is fast_linear.gemm_kernel._pyfunc]
    assert [k.compiler_options for k in gated_gemm] == [{"num_ctas": 2}, {}]  # gate|up, then down


def test_kernel_hints_follow_the_row_count(monkeypatch):
    """A launch takes the hints of the last entry whose min_rows it reaches: none below the first,
    the first up to the second, the second from there; other kinds, tiles and GPUs take none."""
    monkeypatch.setitem(fast_linear.KERNEL_HINTS_BY_GPU, "test GPU",
                        {("gemm", (128, 128, 64)): ((3000, {"occupancy": 2}), (12000, {"occupancy": 4}))})
    hints = [fast_linear.kernel_hints("test GPU", "gemm", (128, 128, 64), rows)
             for rows in (1, 1500, 2999, 3000, 11999, 12000, 15000)]
    assert hints == [{}, {}, {}, {"occupancy": 2}, {"occupancy": 2}, {"occupancy": 4}, {"occupancy": 4}]
    assert fast_linear.kernel_hints("test GPU", "gated gemm", (128, 128, 64), 15000) == {}
    assert fast_linear.kernel_hints("test GPU", "gemm", (64, 128, 64), 15000) == {}
    assert fast_linear.kernel_hints("another GPU", "gemm", (128, 128, 64), 15000) == {}


def test_flash_attention_takes_the_gpus_hint_from_its_rows(monkeypatch):
    """Flash attention looks up KERNEL_HINTS_BY_GPU's "flash" entry at its tiles, by B * Tq rows (here a
    made-up GPU's): from min_rows on it runs a copy of its kernel compiled with the hint, and computes
    what the plain kernel does; below, the plain kernel."""
    launched = record_launches(monkeypatch, fast_attention)
    monkeypatch.setattr(fast_attention, "gpu_name", lambda device: "test GPU")
    B, H, T, D = 2, 2, 24, 16
    q, k, v = (rand(B, H, T, D, dtype=torch.bfloat16, seed=seed) for seed in (1, 2, 3))
    tiles = fast_attention._flash_tiles(T, T, D, torch.bfloat16)
    monkeypatch.setitem(fast_linear.KERNEL_HINTS_BY_GPU, "test GPU",
                        {("flash", tiles): ((B * T, {"occupancy": 2}),)})
    hinted = fast_attention.flash_attention(q, k, v, D ** -0.5, torch.empty_like(q), causal=False, precision="tf32")
    plain_rows = fast_attention.flash_attention(q[:1], k[:1], v[:1], D ** -0.5, torch.empty_like(q[:1]), causal=False,
                                                precision="tf32")
    (with_hint,), (without,) = launched[:1], launched[1:]
    assert with_hint._pyfunc is fast_attention.flash_attention_kernel._pyfunc
    assert with_hint.compiler_options == {"occupancy": 2}
    assert without is fast_attention.flash_attention_kernel  # B * Tq = 24 rows, under min_rows 48
    assert torch.equal(hinted[:1], plain_rows)


def test_wide_tiles_come_with_their_worker_warps(monkeypatch):
    """Each WIDE_TILES_BY_GPU shape takes 128 x 256 tiles from its min_rows on, not one row before, and its
    GPU has worker warps for that tile (at the compiler's defaults the tile runs 13x slower); no other GPU
    and no gated launch takes the wide tile."""
    monkeypatch.setattr(fast_linear, "EMULATED", False)
    assert fast_linear.WIDE_TILES_BY_GPU
    for gpu, shapes in fast_linear.WIDE_TILES_BY_GPU.items():
        assert shapes, gpu
        for (N, K, dtype), min_rows in shapes.items():
            kind, tile = fast_linear.linear_tiles(min_rows, N, K, dtype, gpu=gpu)
            assert (kind, tile[:2]) == ("gemm", (128, 256))
            assert "num_worker_warps" in fast_linear.kernel_hints(gpu, kind, tile, min_rows)
            assert fast_linear.linear_tiles(min_rows - 1, N, K, dtype, gpu=gpu)[1][:2] != (128, 256)
            assert fast_linear.linear_tiles(min_rows, N, K, dtype, gpu="another GPU")[1][:2] != (128, 256)
            assert fast_linear.linear_tiles(min_rows, N, K, dtype, gpu=gpu, gated=True)[1][:2] != (128, 256)


def test_a_wide_launch_runs_the_worker_warps_copy(monkeypatch):
    """A launch of a listed shape on its GPU (here a made-up GPU's, on a small shape) runs gemm_kernel's copy
    compiled with the GPU's hint for the wide tile, and computes what torch does."""
    launched = record_launches(monkeypatch, fast_linear)
    monkeypatch.setattr(fast_linear, "EMULATED", False)
    monkeypatch.setattr(fast_linear, "gpu_name", lambda device: "test GPU")
    M, N, K = 80, 40, 64
    monkeypatch.setitem(fast_linear.WIDE_TILES_BY_GPU, "test GPU", {(N, K, BF16): M})
    monkeypatch.setitem(fast_linear.KERNEL_HINTS_BY_GPU, "test GPU",
                        {("gemm", (128, 256, 64)): ((1, {"num_worker_warps": 8}),)})
    x, w, b = rand(M, K, dtype=BF16), rand(N, K, dtype=BF16, scale=K ** -0.5), rand(N, dtype=BF16, seed=3)
    out = fast_linear.linear(x, w, b, gelu=True, precision="tf32")
    (kernel,) = launched
    assert kernel._pyfunc is fast_linear.gemm_kernel._pyfunc and kernel.compiler_options == {"num_worker_warps": 8}
    ref = torch.nn.functional.gelu(x.double() @ w.double().T + b.double())
    assert rel_err(out, ref) <= TOL[BF16, "ieee"]


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("shape", [(1, 40), (3, 100), (2, 17, 40)])
def test_norm_launchers_match_torch(dtype, shape):
    """fast_linear's LayerNorm and RMSNorm launchers (the course kernels, several rows a block) against
    torch, RMSNorm's row rounded to the dtype before the weight as transformers does."""
    x = rand(*shape, dtype=dtype, scale=3.0) + 0.5
    weight, bias = rand(shape[-1], dtype=dtype, seed=1), rand(shape[-1], dtype=dtype, seed=2)
    tol = 2e-6 if dtype == FP32 else 1e-2
    ref = torch.nn.functional.layer_norm(x.double(), shape[-1:], weight.double(), bias.double(), 1e-5)
    assert rel_err(fast_linear.layernorm(x, weight, bias, 1e-5), ref) <= tol
    xd = x.double()
    normed = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype).double()
    assert rel_err(fast_linear.rmsnorm(x, weight, 1e-5), normed * weight.double()) <= tol


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norm_launchers_take_the_gpus_rows_and_hints(monkeypatch, kind):
    """On a GPU a norm takes the GPU's rows a block (NORM_ROWS_BY_GPU, here a made-up GPU's) and the GPU's hints
    at that tile, computing what the plain kernel does; an unlisted GPU keeps the defaults (RMSNorm: the
    course's rows, since one row without its hint is the slowest choice); every norm hint of
    KERNEL_HINTS_BY_GPU is at the rows its GPU launches, and every GPU's own rows come with a hint."""
    from glm_asr_course.runtimes.tile_helpers import rows_per_block

    launched = record_launches(monkeypatch, fast_linear)
    x, weight, bias = rand(5, 40, dtype=BF16, scale=3.0), rand(40, dtype=BF16, seed=1), rand(40, dtype=BF16, seed=2)

    def run():
        if kind == "layernorm":
            return fast_linear.layernorm(x, weight, bias, 1e-5)
        return fast_linear.rmsnorm(x, weight, 1e-5)

    for gpu, rows in fast_linear.NORM_ROWS_BY_GPU.items():
        if kind in rows:
            assert fast_linear.kernel_hints(gpu, kind, (rows[kind], 2048), 3765), (gpu, "rows without their hint")
    plain = run()
    monkeypatch.setattr(fast_linear, "EMULATED", False)
    monkeypatch.setattr(fast_linear, "gpu_name", lambda device: "test GPU")
    monkeypatch.setitem(fast_linear.NORM_ROWS_BY_GPU, "test GPU", {kind: 2})
    monkeypatch.setitem(fast_linear.KERNEL_HINTS_BY_GPU, "test GPU", {(kind, (2, 64)): ((1, {"occupancy": 8}),)})
    launched.clear()
    assert torch.equal(run(), plain)
    kernel = fast_linear.layernorm_kernel if kind == "layernorm" else fast_linear.rmsnorm_kernel
    assert [(k._pyfunc, k.compiler_options) for k in launched] == [(kernel._pyfunc, {"occupancy": 8})]
    default = fast_linear.DEFAULT_NORM_ROWS.get(kind, rows_per_block(3765, 2048))
    assert fast_linear.norm_rows(kind, "another GPU", 3765, 2048) == default
    for gpu, table in fast_linear.KERNEL_HINTS_BY_GPU.items():
        for hinted_kind, tile in table:
            if hinted_kind == kind:
                assert tile[0] == fast_linear.norm_rows(kind, gpu, 3765, tile[1]), (gpu, tile)


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, precision", PRECISIONS)
@pytest.mark.parametrize("Tq, Hq, Hkv, D, causal", [(1, 2, 2, 24, False), (17, 4, 2, 80, True),
                                                     (75, 3, 1, 16, True), (40, 2, 2, 64, False)])
def test_flash_attention_matches_torch(dtype, precision, Tq, Hq, Hkv, D, causal):
    B = 2
    q = rand(B, Tq, Hq, D, dtype=dtype).transpose(1, 2)  # strided (B, H, T, D) views, as in the model
    k, v = (rand(B, Tq, Hkv, D, dtype=dtype, seed=s).transpose(1, 2) for s in (3, 4))
    kv_start = torch.tensor([0, min(5, Tq - 1)], dtype=torch.int32, device=DEV)
    out = torch.full((B, Tq, Hq, D), float("nan"), dtype=dtype, device=DEV).transpose(1, 2)
    fast_attention.flash_attention(q, k, v, D ** -0.5, out, causal=causal, precision=precision, kv_start=kv_start)
    ref = torch_attention(q, k, v, D ** -0.5, causal, kv_start)
    # Rows that see no key (left-padding queries of a causal prompt) are zeros in both.
    assert rel_err(out, ref) <= {FP32: 3e-3 if precision == "tf32" else 2e-6, BF16: 2e-2}[dtype]


@pytest.mark.parametrize("dtype, precision", PRECISIONS)
@pytest.mark.parametrize("D, valid, split", [(24, 1, 16), (80, 37, 16), (128, 48, 64), (64, 20, 8)])
def test_decode_attention_matches_torch(dtype, precision, D, valid, split):
    """Split flash-decoding over a 48-slot cache: splits past the live length and inside the left
    padding are empty; one split covering the cache writes the output directly."""
    B, Hq, Hkv, Tmax = 2, 8, 2, 48
    q = rand(B, Hq, D, dtype=dtype)
    k_cache, v_cache = (rand(B, Hkv, Tmax, D, dtype=dtype, seed=s) for s in (5, 6))
    kv_start = torch.tensor([0, min(valid - 1, 19)], dtype=torch.int32, device=DEV)
    valid_len = torch.tensor([valid], dtype=torch.int32, device=DEV)
    out = torch.full((B, Hq, D), float("nan"), dtype=dtype, device=DEV)
    fast_attention.decode_attention(q, k_cache, v_cache, valid_len, kv_start, D ** -0.5, out, precision=precision,
                                    split_size=split)
    ref = torch_attention(q[:, :, None], k_cache[:, :, :valid], v_cache[:, :, :valid], D ** -0.5,
                                         kv_start=kv_start)[:, :, 0]
    assert rel_err(out, ref) <= {FP32: 3e-3 if precision == "tf32" else 2e-6, BF16: 2e-2}[dtype]


@pytest.mark.parametrize("Tmax, valid, grid, tiles", [(100, 72, (1, 8), (128, 16)), (256, 200, (1, 8), (128, 16)),
                                                      (1024, 600, (32, 8), (32, 4))])
def test_decode_attention_with_the_gpus_defaults(monkeypatch, Tmax, valid, grid, tiles):
    """The split and tiles decode_attention takes on a GPU, run here by the emulator: a short cache (up to 256
    slots) is one split of 128-key steps over the group padded to 16 rows; a longer one, 32 splits of 32 keys
    over the 4 rows of the group, then their merge. Both compute what torch does."""
    launches = record_launch_calls(monkeypatch, fast_attention)
    monkeypatch.setattr(fast_attention, "EMULATED", False)
    B, Hq, Hkv, D = 2, 16, 4, 128
    q = rand(B, Hq, D, dtype=BF16)
    k_cache, v_cache = (rand(B, Hkv, Tmax, D, dtype=BF16, seed=s) for s in (5, 6))
    kv_start = torch.tensor([0, 9], dtype=torch.int32, device=DEV)
    out = torch.full((B, Hq, D), float("nan"), dtype=BF16, device=DEV)
    fast_attention.decode_attention(q, k_cache, v_cache, torch.tensor([valid], dtype=torch.int32, device=DEV),
                                    kv_start, D ** -0.5, out, precision="tf32")
    kernel, launch_grid, args = launches[0]
    block_g, block_n = args[-3:-1]
    assert kernel is fast_attention.decode_attention_kernel
    assert (launch_grid, (block_n, block_g)) == (grid, tiles)
    assert [k for k, _, _ in launches[1:]] == ([fast_attention.decode_combine_kernel] if grid[0] > 1 else [])
    ref = torch_attention(q[:, :, None], k_cache[:, :, :valid], v_cache[:, :, :valid], D ** -0.5,
                          kv_start=kv_start)[:, :, 0]
    assert rel_err(out, ref) <= 2e-2


# ---------------------------------------------------------------------------------------------
# q|k|v + RoPE + KV cache, and the greedy head
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_fused_decode_projection_equals_the_unfused_route(dtype):
    """One launch (GEMV + RoPE + cache write) against the RMSNorm-GEMV, apply_rope and cache-write
    launches it replaces: the same q, k and v, bit for bit."""
    Hq, Hkv, D, H, Tmax, slot, pad = 4, 2, 16, 40, 24, 11, 3
    x, norm_w = rand(1, H, dtype=dtype, scale=3.0), rand(H, dtype=dtype, seed=7)
    weight = rand((Hq + 2 * Hkv) * D, H, dtype=dtype, scale=H ** -0.5)
    cos, sin = torch_rope_tables(torch.arange(Tmax, device=DEV), D, 10000.0)
    cache_pos = torch.tensor([slot], dtype=torch.int32, device=DEV)
    kv_start = torch.tensor([pad], dtype=torch.int32, device=DEV)
    positions = torch.tensor([[slot - pad]], dtype=torch.int32, device=DEV)
    results = []
    for fused in (True, False):
        caches = [torch.zeros(1, Hkv, Tmax, D, dtype=dtype, device=DEV) for _ in range(2)]
        if fused:
            q_buffer = torch.empty(1, 1, Hq, D, dtype=dtype, device=DEV)
            q = fast_rope.project_qkv_into_cache(x, weight, norm_w, 1e-5, Hq, Hkv, D, cos, sin, D, positions, *caches,
                                                 cache_pos, kv_start, q_buffer, precision="ieee")
        else:
            q = _unfused(x, weight, norm_w, Hq, Hkv, D, cos, sin, positions, caches, cache_pos)
        results.append((q.reshape(-1).clone(), caches[0][0, :, slot].clone(), caches[1][0, :, slot].clone()))
    for fused_part, unfused_part in zip(*results):
        assert torch.equal(fused_part, unfused_part)
    # And against transformers' formula.
    xd = x.double()
    h = ((xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype) * norm_w).to(dtype)
    qkv = (h.double() @ weight.double().T).to(dtype).view(1, 1, Hq + 2 * Hkv, D)
    p = slot - pad
    rotated = torch_rope(qkv[:, :, :Hq + Hkv], cos[p:p + 1][None], sin[p:p + 1][None], D)
    assert rel_err(results[0][0], rotated[:, :, :Hq].reshape(-1)) <= (1e-6 if dtype == FP32 else 1e-2)


def _unfused(x, weight, norm_w, Hq, Hkv, D, cos, sin, positions, caches, cache_pos):
    """The route of a prompt or a batch: RMSNorm-GEMV, the course's apply_rope, glue's cache write."""
    from glm_asr_cutile_example.glue import write_kv_cache
    from glm_asr_cutile_example.rope import apply_rope

    qkv = fast_linear.rms_linear(x, norm_w, 1e-5, weight, precision="ieee").view(1, 1, -1, D)
    apply_rope(qkv[:, :, :Hq + Hkv], cos, sin, positions, D)
    write_kv_cache(qkv[:, :, Hq:Hq + Hkv], qkv[:, :, Hq + Hkv:], *caches, cache_pos)
    return qkv[:, :, :Hq]


def test_the_rmsnorm_prologue_reads_its_row_in_one_load(monkeypatch):
    """The q|k|v, gate|up and lm_head launches each take their RMSNorm statistics from one load of the whole
    row (300 values: wider than any of their weight steps here), which the last launch argument sizes; a
    GEMV without the prologue passes its weight step, so that it compiles no new variant. The results
    stay torch's."""
    H, V, Hq, Hkv, D, eps = 300, 40, 2, 1, 16, 1e-5
    x, norm_w = rand(1, H, scale=2.0), rand(H, seed=3)
    calls = {m: record_launch_calls(monkeypatch, m) for m in (fast_linear, fast_rope, fast_head)}
    xd = x.double()
    h = (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)) * norm_w.double()
    gate_up, down = rand(2 * V, H, scale=H ** -0.5), rand(H, V, scale=V ** -0.5)
    out = fast_linear.llama_mlp(x.clone(), norm_w, eps, gate_up, down, precision="ieee")
    gate, up = (h @ gate_up.double().T).split(V, dim=-1)
    assert rel_err(out - x, (torch.nn.functional.silu(gate) * up) @ down.double().T) <= 1e-5
    lm_head = rand(V, H, scale=H ** -0.5)
    ids = torch.zeros(1, dtype=torch.int64, device=DEV)
    fast_head.greedy_head(x, norm_w, eps, lm_head, torch.tensor([V], device=DEV),
                          torch.tensor([0], dtype=torch.int32, device=DEV), ids)
    assert int(ids[0]) == int((h @ lm_head.double().T).argmax())
    cos, sin = torch_rope_tables(torch.arange(8, device=DEV), D, 10000.0)
    q_buffer = torch.empty(1, 1, Hq, D, device=DEV)
    caches = [torch.zeros(1, Hkv, 8, D, device=DEV) for _ in range(2)]
    one = torch.tensor([3], dtype=torch.int32, device=DEV)
    fast_rope.project_qkv_into_cache(x, rand((Hq + 2 * Hkv) * D, H, scale=H ** -0.5), norm_w, eps, Hq, Hkv, D, cos,
                                     sin, D, one[None], *caches, one, one * 0, q_buffer, precision="ieee")
    launched = {kernel: args for module_calls in calls.values() for kernel, _, args in module_calls}
    for kernel in (fast_linear.gemv_kernel, fast_rope.qkv_rope_gemv_kernel, fast_head.lm_head_argmax_kernel):
        assert kernel in launched
    assert launched[fast_head.lm_head_argmax_kernel][-1] == launched[fast_rope.qkv_rope_gemv_kernel][-1] == 512
    gate_up_args, down_args = [args for kernel, _, args in calls[fast_linear] if kernel is fast_linear.gemv_kernel]
    assert gate_up_args[-1] == 512 and down_args[-1] == down_args[-2]


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("ban", [0, 1])
def test_greedy_head_picks_torchs_argmax_with_ties_and_banned_ids(dtype, ban):
    H, V, eps = 40, 300, 1e-5  # 300: the last vocabulary tile is ragged
    x, norm_w = rand(2, H, dtype=dtype, scale=2.0), rand(H, dtype=dtype, seed=8)
    lm_head = rand(V, H, dtype=dtype, scale=H ** -0.5)
    xd = x.double()
    h = ((xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)).to(dtype) * norm_w).to(dtype).double()
    best = (h @ lm_head.double().T).argmax(-1)
    # Ties: the best row of each input copied to a higher and a lower id; the lowest must win.
    lm_head[V - 1] = lm_head[best[0]]
    lm_head[1] = lm_head[best[1]]
    banned = torch.tensor([int(best[0]), 1], device=DEV)
    logits = (h @ lm_head.double().T).to(dtype).double()
    if ban:
        logits[:, banned] = float("-inf")
    expected = logits.argmax(-1)
    ids = torch.full((2,), -7, dtype=torch.int64, device=DEV)
    fast_head.greedy_head(x, norm_w, eps, lm_head, banned, torch.tensor([ban], dtype=torch.int32, device=DEV), ids)
    assert ids.cpu().tolist() == expected.tolist()


# ---------------------------------------------------------------------------------------------
# The real compiler accepts what the tests above launched
# ---------------------------------------------------------------------------------------------


def test_every_fast_path_signature_compiles_for_sm_90(tmp_path):
    if MODE != "emulate":
        pytest.skip("on a GPU the cases above compiled each signature as they launched")
    missing = toolchain_missing()
    if missing:
        pytest.skip(missing)
    prefixes = tuple(f"glm_asr_cutile_example.{m}." for m in FAST_MODULES)
    if not any(s["kernel"].startswith(prefixes) for s in recorded_signatures()):
        pytest.skip("run with the kernel cases above (alone, this test has nothing to compile)")
    # One signature per kernel, argument dtypes and flags, the one with the smallest tiles: tile
    # sizes and shapes change only sizes and the compiler's divisibility hints, not which code is
    # compiled, while tileiras takes minutes over one 128-wide fp32 tile (the model's own tiles
    # compile on the GPU as they launch, gpu_check.sh).
    def tile_elements(signature):
        sizes = [p.get("value") for p in signature["params"] if p["param"].startswith("BLOCK")]
        return math.prod(v for v in sizes if isinstance(v, int))

    chosen = {}
    for s in recorded_signatures():
        if s["kernel"].startswith(prefixes):
            key = json.dumps([s["kernel"], [(p["param"], p.get("dtype"), p.get("value")) for p in s["params"]
                                            if not p["param"].startswith("BLOCK")]])
            if key not in chosen or tile_elements(s) < tile_elements(chosen[key]):
                chosen[key] = s
    signatures = tmp_path / "signatures.json"
    write_signatures(signatures, list(chosen.values()))
    result = subprocess.run([sys.executable, "-m", "glm_asr_lab.cutile_compile_check", "--signatures",
                             str(signatures)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    compiled = {line.split()[1].rsplit(".", 1)[1] for line in result.stdout.splitlines() if line.startswith("PASS")}
    kernels = {name for module in (fast_linear, fast_attention, fast_rope, fast_head) for name in dir(module)
               if name.endswith("_kernel") and getattr(module, name).__module__ == module.__name__}
    assert kernels <= compiled, sorted(kernels - compiled)
