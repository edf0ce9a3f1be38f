"""The Triton example's fast-path layer kernels against plain torch, one op per test: the fast path's
linear and head (fast_linear.py, fast_head.py) and the glue they share (glue.py). The course kernels
(layers.py) are checked by the shared case table: tests/test_course_kernels.py.

Without a GPU the kernels run in the Triton interpreter (set before triton is imported), so shapes
stay small; they still cover one-row launches, odd widths, ragged tiles and split K. Tolerances are
the GPU's: relative to max|reference|, fp32 1e-5, tf32 GEMMs 3e-3, bf16 1e-2. Every input is fresh
random data seeded by the test's id, and outputs are poisoned with NaN first where the API takes out=.
"""

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from cutile_emulator.tf32 import round_to_tf32  # noqa: E402
from glm_asr_triton_example import fast_head, fast_linear, glue, layers  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() and not layers.INTERPRET else "cpu"
BF16, FP32 = torch.bfloat16, torch.float32
ELEMENTWISE_TOL = {FP32: 1e-5, BF16: 1e-2}
GEMM_TOL = {FP32: 3e-3, BF16: 1e-2}  # fp32 inputs go through tf32 (TF32 below)
TF32 = "tf32"


@pytest.fixture
def gen(request):
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def rand(gen, *shape, dtype=FP32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(device=DEVICE, dtype=dtype)


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def assert_close(out, ref, rel):
    assert out.shape == ref.shape
    out = out.double()
    assert torch.isfinite(out).all(), "unwritten (NaN) or non-finite outputs"
    err = (out - ref.double()).abs().max().item() / max(ref.double().abs().max().item(), 1e-30)
    assert err <= rel, f"relative error {err:.3e} > {rel:.0e}"


def bf16_matches(out, ref):
    """bf16 results that round at the same points agree exactly, bar rare accumulation-order flips."""
    same = (out == ref).double().mean().item()
    assert same >= 0.99, f"only {same:.3f} of elements match bit for bit"
    assert_close(out, ref, 1e-2)


# ---------------------------------------------------------------------------------------------
# Production linear: GEMV (M = 1), skinny (M <= 16) and tiled GEMM, with fused epilogues
# ---------------------------------------------------------------------------------------------


def linear_reference(x, w, b, activation, residual):
    y = x.double() @ w.double().T
    if b is not None:
        y = y + b.double()
    if activation == "gelu":
        y = torch.nn.functional.gelu(y)
    if residual is not None:
        y = y + residual.double()
    return y


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("M", [1, 4, 17, 33])
@pytest.mark.parametrize("N, K", [(96, 80), (17, 1280)])
@pytest.mark.parametrize("with_bias, activation, with_residual",
                         [(False, None, False), (True, "gelu", False), (True, None, True)])
def test_linear(gen, dtype, M, N, K, with_bias, activation, with_residual):
    x, w = rand(gen, M, K, dtype=dtype), rand(gen, N, K, dtype=dtype, scale=K**-0.5)
    b = rand(gen, N, dtype=dtype) if with_bias else None
    r = rand(gen, M, N, dtype=dtype) if with_residual else None
    out = nan_like((M, N), dtype)
    y = fast_linear.linear(x, w, b, gelu=activation == "gelu", residual=r, out=out, precision=TF32)
    assert y is out
    assert_close(out, linear_reference(x, w, b, activation, r), GEMM_TOL[dtype])


@pytest.mark.parametrize("M", [1, 3, 20])
def test_linear_strided_rows_no_out(gen, M):
    hidden, w = rand(gen, M, 3, 96), rand(gen, 40, 96, scale=0.1)
    x = hidden[:, 1]  # row stride 3 * 96, unit column stride
    assert_close(fast_linear.linear(x, w, precision=TF32), linear_reference(x, w, None, None, None), GEMM_TOL[FP32])


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("M", [1, 5, 40])
def test_linear_residual_in_place(gen, dtype, M):
    """The model adds sublayer outputs into the residual stream with residual=x, out=x."""
    h, w, b = rand(gen, M, 80, dtype=dtype), rand(gen, 96, 80, dtype=dtype, scale=0.1), rand(gen, 96, dtype=dtype)
    x = rand(gen, M, 96, dtype=dtype)
    ref = linear_reference(h, w, b, None, x)
    assert fast_linear.linear(h, w, b, residual=x, out=x, precision=TF32) is x
    assert_close(x, ref, GEMM_TOL[dtype])


@pytest.mark.parametrize("M", [1, 5, 40])
def test_linear_ieee_is_fp32_exact(gen, M):
    x, w = rand(gen, M, 300), rand(gen, 70, 300)
    assert_close(fast_linear.linear(x, w, precision="ieee"), x.double() @ w.double().T, 1e-5)


@pytest.mark.parametrize("launcher", ["layers.linear_tf32", "fast_linear.linear", "fast_linear tma_linear_kernel"])
@pytest.mark.parametrize("M", [5, 40])
def test_tf32_operands_round_to_nearest(gen, launcher, M):
    """A "tf32" product of operands whose dropped bits round up (1 + 3·2⁻¹² → 1 + 2⁻¹⁰) equals the exact
    product of the operands rounded to nearest, as cuBLAS and cuTile compute it. A plain tl.dot on a GPU
    reads them truncated (1 + 3·2⁻¹² → 1), 2⁻⁹ low a product: that fails here by far."""
    off_grid = 1 + 3 * 2.0 ** -12
    powers = lambda *shape: 2.0 ** torch.randint(-2, 3, shape, generator=gen)
    x, w = ((off_grid * powers(*shape)).to(DEVICE) for shape in ((M, 64), (48, 64)))
    if launcher == "layers.linear_tf32":
        out = layers.linear_tf32(x, w, precision=TF32)
    elif launcher == "fast_linear.linear":
        out = fast_linear.linear(x, w, precision=TF32)
    else:  # the encoder's kernel, at tiles this small shape takes
        config = ("tma", dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=64, GROUP_M=2, SPLIT_K=1, PERSISTENT=False))
        out = fast_linear._launch_linear(x, w, None, None, None, False, False, TF32, config=config)
    nearest = [round_to_tf32(t.cpu(), "nearest_away").double() for t in (x, w)]
    assert_close(out, (nearest[0] @ nearest[1].T).to(DEVICE), 1e-6)


@pytest.fixture
def force_split_k(monkeypatch):
    """Make every linear launch split K three ways, whatever the table would pick."""
    original = fast_linear._linear_config

    def split_three(*args, **options):
        kind, cfg = original(*args, **options)
        return kind, dict(cfg, SPLIT_K=3)

    monkeypatch.setattr(fast_linear, "_linear_config", split_three)


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("M", [1, 6, 20])
def test_linear_split_k(gen, force_split_k, dtype, M):
    K = 3 * 1024 + 40  # several BLOCK_K steps per slice, a ragged last one
    x, w = rand(gen, M, K, dtype=dtype), rand(gen, 33, K, dtype=dtype, scale=K**-0.5)
    b, r = rand(gen, 33, dtype=dtype), rand(gen, M, 33, dtype=dtype)
    out = nan_like((M, 33), dtype)
    fast_linear.linear(x, w, b, gelu=True, residual=r, out=out, precision=TF32)
    assert_close(out, linear_reference(x, w, b, "gelu", r), GEMM_TOL[dtype])


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("M", [1, 4, 17])
@pytest.mark.parametrize("N, K", [(48, 64), (17, 1280)])
def test_swiglu_linear(gen, dtype, M, N, K):
    x, gate_up = rand(gen, M, K, dtype=dtype), rand(gen, 2 * N, K, dtype=dtype, scale=K**-0.5)
    out = nan_like((M, N), dtype)
    assert fast_linear.swiglu_linear(x, gate_up, out=out, precision=TF32) is out
    gate, up = x.double() @ gate_up[:N].double().T, x.double() @ gate_up[N:].double().T
    assert_close(out, torch.nn.functional.silu(gate) * up, GEMM_TOL[dtype])


@pytest.mark.parametrize("M", [1, 4, 17])
def test_swiglu_matches_hf_bf16(gen, M):
    """HF LlamaMLP in bf16: gate and up rounded, silu rounded, product rounded."""
    N, K = 64, 96
    x, gate_up = rand(gen, M, K, dtype=BF16), rand(gen, 2 * N, K, dtype=BF16, scale=K**-0.5)
    gate = (x.float() @ gate_up[:N].float().T).to(BF16)
    up = (x.float() @ gate_up[N:].float().T).to(BF16)
    bf16_matches(fast_linear.swiglu_linear(x, gate_up, precision=TF32), torch.nn.functional.silu(gate) * up)


@pytest.mark.parametrize("M", [1, 17])
def test_swiglu_split_k(gen, force_split_k, M):
    N, K = 40, 2100
    x, gate_up = rand(gen, M, K), rand(gen, 2 * N, K, scale=K**-0.5)
    gate, up = x.double() @ gate_up[:N].double().T, x.double() @ gate_up[N:].double().T
    assert_close(fast_linear.swiglu_linear(x, gate_up, precision=TF32), torch.nn.functional.silu(gate) * up, GEMM_TOL[FP32])


def hf_rmsnorm(x, weight, eps):
    """transformers' LlamaRMSNorm: fp32 statistics, normalised row rounded to x's dtype, times weight."""
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def hf_llama_mlp(x, norm_weight, eps, gate_up, down):
    """HF's post-attention half with the rounding points of its bf16 modules (plain in fp32)."""
    h = hf_rmsnorm(x, norm_weight, eps)
    n = gate_up.shape[0] // 2
    gate = (h.double() @ gate_up[:n].double().T).to(x.dtype)
    up = (h.double() @ gate_up[n:].double().T).to(x.dtype)
    activated = torch.nn.functional.silu(gate) * up
    return (x.double() + (activated.double() @ down.double().T).to(x.dtype).double()).to(x.dtype)


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("M", [1, 3, 20])  # 1: RMSNorm in the GEMV's prologue; more: its own launch
@pytest.mark.parametrize("N, K", [(96, 80), (17, 1280)])
def test_linear_rms_norm_prologue(gen, dtype, M, N, K):
    x, w = rand(gen, M, K, dtype=dtype, scale=3.0), rand(gen, N, K, dtype=dtype, scale=K**-0.5)
    norm_weight = rand(gen, K, dtype=dtype)
    out = nan_like((M, N), dtype)
    assert fast_linear.linear(x, w, rms_norm=(norm_weight, 1e-5), out=out, precision=TF32) is out
    assert_close(out, linear_reference(hf_rmsnorm(x, norm_weight, 1e-5), w, None, None, None), GEMM_TOL[dtype])


def test_gemv_rms_norm_prologue_matches_rmsnorm_kernel_bf16(gen):
    """The fused prologue rounds where rmsnorm_kernel does: same inputs to the weight, bit for bit."""
    K = 2048
    x, norm_weight = rand(gen, 1, K, dtype=BF16, scale=3.0), rand(gen, K, dtype=BF16)
    eye = torch.eye(K, dtype=BF16, device=DEVICE)[:300]  # picks the normalised values themselves
    fused = fast_linear.linear(x, eye, rms_norm=(norm_weight, 1e-6), precision=TF32)
    assert torch.equal(fused, layers.rmsnorm(x, norm_weight, 1e-6)[:, :300])


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("M", [1, 4, 17])  # 1: two GEMVs with prologues; more: the gated GEMM
@pytest.mark.parametrize("H, N", [(48, 64), (80, 1280)])
def test_llama_mlp(gen, dtype, M, H, N):
    x, norm_weight = rand(gen, M, H, dtype=dtype, scale=2.0), rand(gen, H, dtype=dtype)
    gate_up, down = rand(gen, 2 * N, H, dtype=dtype, scale=H**-0.5), rand(gen, H, N, dtype=dtype, scale=N**-0.5)
    ref = hf_llama_mlp(x, norm_weight, 1e-5, gate_up, down)
    assert fast_linear.llama_mlp(x, norm_weight, 1e-5, gate_up, down, precision=TF32) is x
    if dtype == BF16:
        bf16_matches(x, ref)
    else:
        assert_close(x, ref, GEMM_TOL[dtype])


@pytest.mark.parametrize("M", [1, 17])
def test_llama_mlp_split_k(gen, force_split_k, M):
    H, N = 40, 2100
    x, norm_weight = rand(gen, M, H), rand(gen, H)
    gate_up, down = rand(gen, 2 * N, H, scale=H**-0.5), rand(gen, H, N, scale=N**-0.5)
    ref = hf_llama_mlp(x, norm_weight, 1e-5, gate_up, down)
    assert_close(fast_linear.llama_mlp(x, norm_weight, 1e-5, gate_up, down, precision=TF32), ref, GEMM_TOL[FP32])


@pytest.mark.parametrize("M, config", [
    (1, ("gemv", dict(BLOCK_N=8, BLOCK_K=64, SPLIT_K=3))),  # small tiles: several K steps per slice
    (1, ("gemv", dict(BLOCK_N=2, BLOCK_K=512, SPLIT_K=1))),  # one step covers K
    (5, ("gemm", dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=1, SPLIT_K=2))),
    (1, ("gemm", dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=64, GROUP_M=1, SPLIT_K=2))),  # one row on a 16-row tile
    (1, ("tma", dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, PERSISTENT=True))),
])
def test_linear_explicit_config(gen, M, config):
    """glm_asr_lab/tuning/sweep_linear.py hands _launch_linear its candidates: every one must compute the same."""
    K, N = 300, 40
    x, w = rand(gen, M, K, dtype=BF16, scale=2.0), rand(gen, N, K, dtype=BF16, scale=K**-0.5)
    norm_weight, r = rand(gen, K, dtype=BF16), rand(gen, M, N, dtype=BF16)
    out = fast_linear._launch_linear(x, w, None, r, None, False, False, "tf32", prologue="rmsnorm",
                                norm_weight=norm_weight, eps=1e-5, config=config)
    ref = linear_reference(hf_rmsnorm(x, norm_weight, 1e-5), w, None, None, r)
    assert_close(out, ref, GEMM_TOL[BF16])


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("epilogue", ["bias", "gelu", "residual"])
def test_tma_linear(gen, dtype, persistent, epilogue):
    """The TMA kernel: ragged M, N and K (the descriptors fill the edges with zeros), every epilogue,
    one program per tile or a few persistent programs walking them all."""
    M, N, K = 70, 40, 200
    x, w, b = rand(gen, M, K, dtype=dtype), rand(gen, N, K, dtype=dtype, scale=K**-0.5), rand(gen, N, dtype=dtype)
    r = rand(gen, M, N, dtype=dtype) if epilogue == "residual" else None
    config = ("tma", dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=64, GROUP_M=2, SPLIT_K=1, PERSISTENT=persistent))
    out = nan_like((M, N), dtype)
    fast_linear._launch_linear(x, w, b, r, out, epilogue == "gelu", False, "ieee", config=config)
    assert_close(out, linear_reference(x, w, b, "gelu" if epilogue == "gelu" else None, r), GEMM_TOL[dtype])


@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_gpu_table_sends_only_plain_tiles_to_tma(monkeypatch, dtype):
    """The GPU table (read here without a GPU): the encoder's GEMMs take the TMA kernel, and a gated or
    split-K launch, which tma_linear_kernel does not take, never does."""
    monkeypatch.setattr(fast_linear, "INTERPRET", False)
    sms = 132
    for N, K in ((3840, 1280), (1280, 1280), (5120, 1280), (1280, 5120)):  # encoder q|k|v, o, fc1, fc2
        kind, cfg = fast_linear._linear_config(1500, N, K, dtype, False, sms)
        assert kind == "tma" and cfg["SPLIT_K"] == 1 and cfg["BLOCK_K"] * dtype.itemsize == 128
    kind, cfg = fast_linear._linear_config(1500, 6144, 2048, dtype, True, sms)  # a long prompt's gate|up
    assert kind == "gemm"
    kind, cfg = fast_linear._linear_config(100, 2048, 6144, dtype, False, sms)  # a 100-token prompt's down: split K
    assert kind == "gemm" and cfg["SPLIT_K"] > 1


@pytest.mark.parametrize("fma", [False, True])
def test_gpu_table_gives_a_launchable_config_at_every_shape(monkeypatch, fma):
    """The GPU table (read here without a GPU) at the shapes of the kernel tests and awkward checkpoints too,
    not only the model's: a known kernel and at least one K slice. (K under 512 once gave SPLIT_K = 0 for
    M from 17 to 64, a division by zero on the GPU: the awkward checkpoints' Triton fast path.)"""
    monkeypatch.setattr(fast_linear, "INTERPRET", False)
    for M in (1, 2, 16, 17, 40, 64, 65, 300, 1500):
        for N in (8, 80, 96, 2048, 59264):
            for K in (16, 17, 24, 96, 511, 1280, 6144):
                for dtype in (FP32, BF16):
                    for gated in ((False, True) if M > 1 else (False,)):
                        kind, cfg = fast_linear._linear_config(M, N, K, dtype, gated, 132, fma=fma and dtype == FP32)
                        assert cfg["SPLIT_K"] >= 1, (M, N, K, dtype, gated, kind, cfg)
                        assert kind in ("gemv", "gemm", "tma"), kind


def test_gpu_table_takes_a_gpus_own_gemv_tiles_only_for_that_gpu(monkeypatch):
    """GEMV_TILES_BY_GPU (read here without a GPU): each entry is what its GPU gets at its shape and dtype,
    and differs from the rule, which every other GPU, dtype and shape keeps."""
    monkeypatch.setattr(fast_linear, "INTERPRET", False)
    assert fast_linear.GEMV_TILES_BY_GPU
    for gpu, tiles in fast_linear.GEMV_TILES_BY_GPU.items():
        for (N, K, dtype), (block_n, k_bytes, warps, stages) in tiles.items():
            kind, cfg = fast_linear._linear_config(1, N, K, dtype, False, 132, gpu=gpu)
            assert kind == "gemv"
            assert (cfg["BLOCK_N"], cfg["BLOCK_K"] * dtype.itemsize, cfg["num_warps"], cfg["num_stages"]) == (
                block_n, k_bytes, warps, stages)
            rule = fast_linear._linear_config(1, N, K, dtype, False, 132)
            assert rule != (kind, cfg)
            assert fast_linear._linear_config(1, N, K, dtype, False, 132, gpu="another GPU") == rule
            other_dtype = FP32 if dtype == BF16 else BF16
            assert fast_linear._linear_config(1, N, K, other_dtype, False, 132, gpu=gpu) == fast_linear._linear_config(
                1, N, K, other_dtype, False, 132)
            assert fast_linear._linear_config(1, N + 8, K, dtype, False, 132, gpu=gpu) == fast_linear._linear_config(
                1, N + 8, K, dtype, False, 132)


@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_one_row_linear_launches_the_gpus_tuned_tile(monkeypatch, launch_grids, gen, dtype):
    """A GPU's tile from GEMV_TILES_BY_GPU (here a made-up GPU's, at a small shape) is the one launched, and
    computes the same row: 4 output rows a program instead of the rule's 8, 32-element K steps."""
    monkeypatch.setattr(fast_linear, "INTERPRET", False)
    monkeypatch.setattr(fast_linear, "gpu_name", lambda device: "test GPU")
    monkeypatch.setitem(fast_linear.GEMV_TILES_BY_GPU, "test GPU", {(96, 80, dtype): (4, 32 * dtype.itemsize, 4, 4)})
    grids = launch_grids(fast_linear, "gemv_kernel")
    x, w = rand(gen, 1, 80, dtype=dtype, scale=3.0), rand(gen, 96, 80, dtype=dtype, scale=80**-0.5)
    norm_weight = rand(gen, 80, dtype=dtype)
    out = fast_linear.linear(x, w, rms_norm=(norm_weight, 1e-5), precision=TF32)
    assert grids.grids == [(24, 1)]
    assert_close(out, linear_reference(hf_rmsnorm(x, norm_weight, 1e-5), w, None, None, None), GEMM_TOL[dtype])


def test_gpu_table_gives_ieee_fp32_plain_tiles_of_the_course_size(monkeypatch):
    """IEEE fp32 (an FMA dot): the encoder's GEMMs on plain loads at the course kernel's 128 x 128 x 32 tile,
    never the TMA kernel, never a wider tile."""
    monkeypatch.setattr(fast_linear, "INTERPRET", False)
    for M, N, K, gated in ((1500, 3840, 1280, False), (1500, 5120, 1280, False), (1500, 1280, 5120, False),
                           (3765, 6144, 2048, True), (59, 6144, 2048, True), (4, 2048, 6144, False)):
        kind, cfg = fast_linear._linear_config(M, N, K, FP32, gated, 132, fma=True)
        assert kind == "gemm" and cfg["BLOCK_K"] == 32
        assert cfg["BLOCK_M"] * cfg["BLOCK_N"] * (2 if gated else 1) <= 128 * 128
    assert fast_linear._linear_config(1500, 5120, 1280, FP32, False, 132, fma=True)[1]["BLOCK_N"] == 128


def sm_90_compile(*args: str) -> dict:
    """The JSON tests/triton_sm90.py prints with ``args``: kernels compiled for sm_90a in a process of their
    own, without the interpreter (whose kernels cannot be compiled)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("triton_sm90.py")
    out = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_sm_90_ieee_fp32_tiles_fit_the_registers():
    """The IEEE fp32 launches with the largest tiles, compiled for sm_90a without a GPU (tests/triton_sm90.py:
    ptxas, as Triton runs it): tens of bytes of spill a thread at most. The tensor-core tiles they ran on
    before spilled kilobytes (the TMA GEMM 10 KB, flash attention at head 128 2.4 KB)."""
    stats = sm_90_compile()
    assert stats and all(s["spill_bytes"] <= 64 for s in stats.values()), stats


def test_sm_90_tf32_dots_round_their_operands():
    """Compiled for sm_90a without a GPU (tests/triton_sm90.py --tf32-rounding): the course GEMM, the fast GEMM
    and flash attention round fp32 operands of a "tf32" dot with cvt.rna.tf32.f32 (a plain tl.dot hands them
    to the tensor cores, which truncate); nothing is rounded at "ieee" or for bf16. The CPU tests of the
    rounding itself run the interpreter's fix, not this PTX."""
    counts = sm_90_compile("--tf32-rounding")
    assert len(counts) == 9, counts
    for kernel_and_case, roundings in counts.items():
        assert (roundings > 0) == kernel_and_case.endswith("fp32 tf32"), counts


@pytest.mark.skipif(DEVICE == "cuda", reason="records the launches of interpreted runs")
def test_every_launch_of_a_transcription_compiles_for_sm_90(monkeypatch, tmp_path, tiny_ckpt, clips):
    """The Triton example's launches in a transcription, recorded in the interpreter and lowered for sm_90a
    without a GPU (tests/triton_sm90.py --launches: Triton IR, then the GPU IR with the Hopper passes). The
    interpreter runs kernels as Python and lets through what the compiler rejects: a name reused with
    another type cost a GPU call on 2026-11-27 (i, call 4).

    Recorded: the fast path in bf16, tf32 and IEEE fp32 and the course path in bf16 and IEEE fp32, one clip and
    a batch of two, prompt and decode; then the fast path in bf16 with the tiles a GPU takes (an H100's: its
    TMA GEMMs and GEMV tiles, decode attention's split), still run by the interpreter."""
    from parity import inputs_for, track_model
    from triton_sm90 import record_launches

    from glm_asr_course.model.audio import load_audio
    from glm_asr_triton_example import attention, conv, fast_attention, fast_head, fast_rope, rope

    audio = [load_audio(clips["short"]), load_audio(clips["other"])]
    launches = []
    record_launches(monkeypatch, launches)
    for track, precisions, batches in (("fast", ("bf16", "tf32", "fp32"), (audio[:1], audio)),
                                       ("course", ("bf16", "fp32"), (audio,))):
        for precision in precisions:
            model, ckpt = track_model(f"glm_asr_triton_example:{track}", tiny_ckpt, precision)
            for batch in batches:
                model.generate(inputs_for(ckpt, batch), 2, 2)
    for module in (fast_linear, fast_attention, fast_head, fast_rope, conv, layers, glue, attention, rope):
        monkeypatch.setattr(module, "INTERPRET", False)
    monkeypatch.setattr(fast_linear, "gpu_name", lambda device: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(fast_linear, "_sm_count", lambda device: 132)
    model, ckpt = track_model("glm_asr_triton_example:fast", tiny_ckpt, "bf16")
    model.generate(inputs_for(ckpt, audio[:1]), 2, 2)

    kernels = {launch["kernel"] for launch in launches}
    assert {"qkv_rope_gemv_kernel", "gemv_kernel", "decode_attention_split_kernel", "lm_head_argmax_kernel",
            "tma_linear_kernel", "flash_attention_kernel", "linear_kernel_tf32", "softmax_kernel"} <= kernels
    (tmp_path / "launches.json").write_text(json.dumps(launches))
    result = sm_90_compile("--launches", str(tmp_path / "launches.json"))
    assert not result["failed"], result["failed"]
    assert result["lowered"] >= len(kernels)


def test_tma_linear_falls_back_to_plain_loads(gen):
    """A row stride of 300 bf16 (600 bytes) is not TMA-addressable: the same tiles run with plain loads."""
    assert not fast_linear._tma_addressable(torch.empty(2, 300, dtype=BF16))
    x, w = rand(gen, 20, 300, dtype=BF16), rand(gen, 24, 300, dtype=BF16, scale=300**-0.5)
    config = ("tma", dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=64, GROUP_M=1, SPLIT_K=1, PERSISTENT=True))
    out = fast_linear._launch_linear(x, w, None, None, None, False, False, "ieee", config=config)
    assert_close(out, linear_reference(x, w, None, None, None), GEMM_TOL[BF16])


def test_swiglu_prologue_needs_one_row(gen):
    with pytest.raises(ValueError, match="swiglu prologue needs the one-row GEMV"):
        fast_linear._launch_linear(rand(gen, 3, 64), rand(gen, 16, 32), None, None, None, False, False, "ieee",
                              prologue="swiglu")


# ---------------------------------------------------------------------------------------------
# Embedding gather
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("n_audio", [0, 5])
@pytest.mark.parametrize("H", [17, 64, 2048 + 96])
def test_embed_tokens(gen, dtype, n_audio, H):
    V, M = 50, 12
    table, audio = rand(gen, V, H, dtype=dtype), rand(gen, n_audio, H, dtype=dtype)
    ids = torch.randint(0, V, (M,), generator=gen).to(DEVICE)
    audio_index = torch.full((M,), -1, dtype=torch.int64)
    audio_index[4:4 + n_audio] = torch.randperm(n_audio, generator=gen)
    audio_index = audio_index.to(DEVICE)
    out = nan_like((M, H), dtype)
    assert glue.embed_tokens(ids, table, audio, audio_index, out=out) is out
    ref = table[ids].clone()
    ref[audio_index >= 0] = audio[audio_index[audio_index >= 0]]
    assert torch.equal(out, ref)


def test_embed_tokens_casts_audio_to_table_dtype(gen):
    table, audio = rand(gen, 20, 64, dtype=BF16), rand(gen, 2, 64, dtype=FP32)
    ids = torch.tensor([3, 7, 7, 1], device=DEVICE)
    audio_index = torch.tensor([-1, 1, 0, -1], device=DEVICE)
    out = glue.embed_tokens(ids, table, audio, audio_index)
    assert out.dtype == BF16
    assert torch.equal(out, torch.stack([table[3], audio[1].to(BF16), audio[0].to(BF16), table[1]]))


# ---------------------------------------------------------------------------------------------
# Greedy head and argmax: lowest index on ties, banned ids only while suppress[0] != 0
# ---------------------------------------------------------------------------------------------


def flag(value):
    return torch.tensor([value], dtype=torch.int32, device=DEVICE)


def ids_tensor(values):
    return torch.tensor(values, dtype=torch.int64, device=DEVICE)


def rms_normed(x, w, eps):
    x32 = x.double()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def assert_argmax_ok(chosen, logits, rel=1e-2):
    """The chosen id's logit is the row maximum, up to rounding (bf16 can reorder near-ties)."""
    best = logits.max(-1).values
    short = best - logits.gather(1, chosen[:, None])[:, 0]
    assert (short <= rel * logits.abs().max()).all(), f"picked logits fall short by {short.tolist()}"


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("B", [1, 3, 17])
@pytest.mark.parametrize("V, H", [(257, 64), (300, 96)])
def test_greedy_head(gen, dtype, B, V, H):
    x, norm_w = rand(gen, B, H, dtype=dtype), rand(gen, H, dtype=dtype)
    w_lm = rand(gen, V, H, dtype=dtype, scale=H**-0.5)
    out = torch.full((B,), -7, dtype=torch.int64, device=DEVICE)
    assert fast_head.greedy_head(x, norm_w, 1e-5, w_lm, ids_tensor([V - 1]), flag(0), out, precision=TF32) is out
    assert_argmax_ok(out, rms_normed(x, norm_w, 1e-5) @ w_lm.double().T)


@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_greedy_head_ties_pick_lowest_index(gen, dtype):
    B, V, H = 2, 300, 64
    x, norm_w = rand(gen, B, H, dtype=dtype), torch.ones(H, dtype=dtype, device=DEVICE)
    w_lm = rand(gen, V, H, dtype=dtype, scale=0.01)
    # Identical rows give identical logits; the largest sit in one block (5, 7) and in later ones.
    top = (x[0].float().sign() * 0.5).to(dtype)
    for v in (250, 130, 7, 5):
        w_lm[v] = top
    out = torch.empty(B, dtype=torch.int64, device=DEVICE)
    fast_head.greedy_head(x[:1].expand(B, H), norm_w, 1e-5, w_lm, ids_tensor([]), flag(1), out, precision=TF32)
    assert out.tolist() == [5, 5]


@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_greedy_head_suppress(gen, dtype):
    B, V, H = 3, 200, 32
    x, norm_w = rand(gen, B, H, dtype=dtype), rand(gen, H, dtype=dtype)
    w_lm = rand(gen, V, H, dtype=dtype, scale=0.1)
    logits = rms_normed(x, norm_w, 1e-5) @ w_lm.double().T
    first = logits.argmax(-1)
    banned = ids_tensor(sorted(set(first.tolist())) + [V - 1])
    out = torch.empty(B, dtype=torch.int64, device=DEVICE)
    fast_head.greedy_head(x, norm_w, 1e-5, w_lm, banned, flag(0), out, precision=TF32)
    assert_argmax_ok(out, logits)
    fast_head.greedy_head(x, norm_w, 1e-5, w_lm, banned, flag(1), out, precision=TF32)
    assert not torch.isin(out, banned).any()
    assert_argmax_ok(out, logits.index_fill(1, banned, float("-inf")))


@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("B, V", [(1, 1), (3, 17), (2, 5000), (5, 4096)])
def test_argmax_rows(gen, dtype, B, V):
    logits = rand(gen, B, V, dtype=dtype)
    out = torch.full((B,), -7, dtype=torch.int64, device=DEVICE)
    assert glue.argmax_rows(logits, ids_tensor([]), flag(1), out) is out
    assert torch.equal(out, logits.float().argmax(-1))


@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_argmax_rows_ties_and_suppress(dtype):
    V = 5000  # two 4096-wide blocks
    logits = torch.zeros(3, V, dtype=dtype, device=DEVICE)
    logits[0, [4500, 17, 4095, 4096]] = 2.0  # tie across blocks: 17 wins
    logits[1, [4999, 4097]] = 3.0  # tie inside the second block: 4097 wins
    logits[2, [0, 1]] = 5.0
    logits[2, 3000] = 4.0
    banned = ids_tensor([0, 1, 4097])
    out = torch.empty(3, dtype=torch.int64, device=DEVICE)
    glue.argmax_rows(logits, banned, flag(0), out)
    assert out.tolist() == [17, 4097, 0]
    glue.argmax_rows(logits, banned, flag(1), out)
    assert out.tolist() == [17, 4999, 3000]


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                INPUT_PRECISION: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b, input_precision=INPUT_PRECISION))


def tf32_by_frexp(x: torch.Tensor) -> torch.Tensor:
    """x rounded to 11 significant bits (TF32), to nearest with ties away from zero, by mantissa and exponent."""
    mantissa, exponent = torch.frexp(x.double())  # |mantissa| in [0.5, 1): 11 bits are multiples of 2^-11
    scaled = mantissa * 2.0**11
    return (torch.sign(scaled) * torch.floor(scaled.abs() + 0.5) * 2.0**-11 * 2.0**exponent.double()).float()


@pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's dot; on a GPU, test_tf32_operands_round_to_nearest")
def test_interpreter_tf32_dot_rounds_its_operands_and_ieee_does_not(gen):
    """Under the interpreter a plain "tf32" tl.dot multiplies operands rounded to TF32 to nearest (as the course's
    dot does on a GPU), an "ieee" one exact fp32."""
    a, b = rand(gen, 16, 32), rand(gen, 32, 16)
    a[0, :4] = torch.tensor([1 + 2**-11, 1 + 3 * 2**-12, -(1 + 2**-11), 2**-140])  # ties, near-tie, a denormal
    results = {}
    for precision in ("tf32", "ieee"):
        results[precision] = torch.full((16, 16), float("nan"))
        _dot_kernel[(1,)](a, b, results[precision], 16, 16, 32, precision)
    assert torch.allclose(results["ieee"], (a.double() @ b.double()).float(), rtol=1e-6, atol=1e-6)
    expected_tf32 = tf32_by_frexp(a).double() @ tf32_by_frexp(b).double()
    assert torch.allclose(results["tf32"].double(), expected_tf32, rtol=1e-6, atol=1e-6)
    assert (results["tf32"] - results["ieee"]).abs().max() > 1e-4  # visibly not IEEE


def test_interpreter_fixes_apply_once_however_often_a_run_starts():
    """apply_fixes runs wherever a CPU run starts (every self-check, every --device cpu): a second call must
    leave the interpreter's patched functions as the first left them, not wrap them again (nested wrappers
    ran the suite into RecursionError after a few hundred self-checks)."""
    from triton.runtime import interpreter

    from glm_asr_course.runtimes import triton_interpreter

    triton_interpreter.apply_fixes()
    patched = (interpreter._patch_lang_tensor, interpreter.InterpretedFunction.__call__,
               interpreter.InterpreterBuilder.create_dot, interpreter.GridExecutor.__call__)
    for _ in range(3):
        triton_interpreter.apply_fixes()
    assert (interpreter._patch_lang_tensor, interpreter.InterpretedFunction.__call__,
            interpreter.InterpreterBuilder.create_dot, interpreter.GridExecutor.__call__) == patched
