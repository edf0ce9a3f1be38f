"""The eleven cuTile course kernels (glm_asr_cutile_example) against plain torch, at many shapes.

Shapes include the awkward ones: 1, 17, widths that are not powers of two (96, 100, 1280, 1281),
sequence lengths 1 / 17 / 75, head sizes 16 / 24 / 64 / 80, fp32 and bf16, and inputs that are
strided views (rows of a larger tensor, q / k / v heads inside a fused QKV output). Outputs the
launchers allocate start as NaN, so an element a kernel forgets to write fails. Without a GPU the
kernels run in the cuTile emulator; the last test then compiles, for sm_90 with the real compiler,
every kernel signature the other tests launched (utils/cutile_compile_check.py).
"""

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from glm_asr_common.cutile_runtime import MODE, recorded_signatures, write_signatures
from glm_asr_cutile_example import STUDENT_KERNELS, attention, layers, rope

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path(layers.__file__).resolve().parent
DEV = "cuda" if MODE == "gpu" else "cpu"
FP32, BF16 = torch.float32, torch.bfloat16
# max |out - ref| / max |ref|. fp32 GEMMs use tf32; bf16 allows a few ulps of the largest value.
ELEMENTWISE_TOL = {FP32: 1e-5, BF16: 1e-2}
GEMM_TOL = {FP32: 3e-3, BF16: 1e-2}


@contextmanager
def poisoned_outputs():
    """Float tensors that the kernel package's launchers allocate start as NaN: unwritten elements fail."""
    empty, empty_like = torch.empty, torch.empty_like

    def from_package():
        return Path(sys._getframe(2).f_code.co_filename).resolve().parent == PACKAGE_DIR

    def poison(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    torch.empty = lambda *a, **k: poison(empty(*a, **k)) if from_package() else empty(*a, **k)
    torch.empty_like = lambda *a, **k: poison(empty_like(*a, **k)) if from_package() else empty_like(*a, **k)
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def rel_err(out, ref) -> float:
    """max |out - ref| / max |ref| over the finite reference entries; the -inf entries must match."""
    out, ref = out.double().cpu(), ref.double().cpu()
    assert out.shape == ref.shape, (tuple(out.shape), tuple(ref.shape))
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(out), finite), "NaN/inf where the reference is finite (or the reverse)"
    assert torch.equal(out[~finite], ref[~finite]), "masked (-inf) entries differ"
    if not finite.any():
        return 0.0
    return ((out[finite] - ref[finite]).abs().max() / ref[finite].abs().max().clamp_min(1e-30)).item()


def rand(gen, *shape, dtype=FP32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(device=DEV, dtype=dtype)


def rows_view(gen, n_rows, width, dtype, strided, scale=1.0, shift=0.0):
    """(n_rows, width) input: contiguous, or every other row of a larger tensor (row stride 2 * width)."""
    if strided:
        return (rand(gen, n_rows, 2, width, scale=scale) + shift).to(dtype)[:, 1]
    return (rand(gen, n_rows, width, scale=scale) + shift).to(dtype)


def case_rmsnorm(gen, dtype, shape):
    n_rows, width, strided = shape
    x, w = rows_view(gen, n_rows, width, dtype, strided, scale=2.0), rand(gen, width, dtype=dtype)
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)
    # transformers rounds the normalised row to the activation dtype before the weight multiply.
    return lambda: layers.rmsnorm(x, w, 1e-5), lambda: w.float() * normed.to(dtype).float(), ELEMENTWISE_TOL[dtype]


def case_layernorm(gen, dtype, shape):
    n_rows, width, strided = shape
    # A non-zero mean: padding lanes that are not zeroed add mean^2 to the variance.
    x = rows_view(gen, n_rows, width, dtype, strided, scale=2.0, shift=0.5)
    w, b = rand(gen, width, dtype=dtype), rand(gen, width, dtype=dtype)
    return (lambda: layers.layernorm(x, w, b, 1e-5),
            lambda: torch.nn.functional.layer_norm(x.float(), (width,), w.float(), b.float(), 1e-5),
            ELEMENTWISE_TOL[dtype])


def case_softmax(gen, dtype, shape):
    n_rows, width, strided = shape
    x = rows_view(gen, n_rows, width, dtype, strided, scale=4.0)
    return lambda: layers.softmax(x), lambda: torch.softmax(x.double(), -1), ELEMENTWISE_TOL[dtype]


def case_gelu(gen, dtype, shape):
    x = rand(gen, *shape, dtype=dtype, scale=3.0)
    return lambda: layers.gelu(x), lambda: torch.nn.functional.gelu(x.double()), ELEMENTWISE_TOL[dtype]


def case_silu(gen, dtype, shape):
    x = rand(gen, *shape, dtype=dtype, scale=3.0)
    if x.numel() > 2:
        x.view(-1)[:2] = torch.tensor([-120.0, 90.0], dtype=dtype)  # exp overflow / underflow ends
    return lambda: layers.silu(x), lambda: torch.nn.functional.silu(x.double()), ELEMENTWISE_TOL[dtype]


def case_linear_tf32(gen, dtype, shape):
    M, K, N, has_bias, precision = shape
    x, w = rand(gen, M, K, dtype=dtype), rand(gen, N, K, dtype=dtype, scale=K ** -0.5)
    b = rand(gen, N, dtype=dtype) if has_bias else None
    ref = x.double() @ w.double().T + (b.double() if has_bias else 0.0)
    # IEEE fp32 operands leave only the fp32 accumulation error.
    tol = 1e-5 if precision == "ieee" else GEMM_TOL[dtype]
    return lambda: layers.linear_tf32(x, w, b, precision=precision), lambda: ref, tol


def qkv_heads(gen, B, H, T, D, dtype):
    """q, k, v as (B, H, T, D) views of one fused (B, T, 3 * H * D) projection output."""
    qkv = rand(gen, B, T, 3 * H * D, dtype=dtype)
    return tuple(qkv[..., i * H * D:(i + 1) * H * D].view(B, T, H, D).transpose(1, 2) for i in range(3))


def case_attention_scores(gen, dtype, shape):
    B, H, Tq, Tk, D, causal = shape
    q = qkv_heads(gen, B, H, Tq, D, dtype)[0]
    k = qkv_heads(gen, B, H, Tk, D, dtype)[1]
    ref = q.double() @ k.double().transpose(-1, -2) * D ** -0.5
    if causal:
        ref = ref.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool, device=DEV).tril(), float("-inf"))
    return lambda: attention.attention_scores(q, k, D ** -0.5, causal), lambda: ref, GEMM_TOL[FP32]


def case_softmax_inplace(gen, dtype, shape):
    B, H, Tq, Tk, causal = shape
    s = rand(gen, B, H, Tq, Tk, scale=4.0)
    if causal:
        s = s.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool, device=DEV).tril(), float("-inf"))
    ref = torch.softmax(s.double(), -1)
    work = torch.empty_like(s)
    return lambda: attention.softmax_inplace(work.copy_(s)), lambda: ref, ELEMENTWISE_TOL[FP32]


def case_attention_output(gen, dtype, shape):
    B, H, Tq, Tk, D = shape
    p = torch.softmax(rand(gen, B, H, Tq, Tk, scale=3.0), -1)
    v = qkv_heads(gen, B, H, Tk, D, dtype)[2]
    # The output lands in a token-major buffer seen as (B, H, Tq, D), as the model's next linear wants.
    out = torch.full((B, Tq, H, D), float("nan"), dtype=dtype, device=DEV).permute(0, 2, 1, 3)
    # transformers casts the probabilities to v's dtype before the product.
    return (lambda: attention.attention_output(p, v, out), lambda: p.to(dtype).double() @ v.double(),
            GEMM_TOL[dtype])


def fp32_angles(positions: int, rotary_dim: int, theta: float) -> torch.Tensor:
    """transformers' rotary angles: fp32 inv_freq = 1 / theta^(2i / dim), times fp32 positions."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    return torch.arange(positions, dtype=torch.float)[:, None] * inv_freq[None, :]


def case_compute_freqs(gen, dtype, shape):
    positions, rotary_dim, theta = shape
    angle = fp32_angles(positions, rotary_dim, theta).double()
    # transformers' fp32 angles; cos / sin of each within about one fp32 ulp (checked as abs error).
    return (lambda: torch.cat(rope.rope_tables(positions, rotary_dim, theta, DEV)),
            lambda: torch.cat([angle.cos(), angle.sin()]), 2.5e-7)


def case_apply_rope(gen, dtype, shape):
    B, T, H, D, rotary_dim, per_row = shape
    half = rotary_dim // 2
    qkv = rand(gen, B, T, 3 * H * D, dtype=dtype)
    before = qkv.clone()
    qk = qkv[..., :2 * H * D].view(B, T, 2 * H, D)  # q and k heads, rotated by one launch
    angle = fp32_angles(T + 9, rotary_dim, 10000.0)
    cos, sin = angle.cos().to(DEV), angle.sin().to(DEV)
    # Per-row positions: the second row starts at position 9.
    positions = torch.arange(T, device=DEV)
    if per_row:
        positions = positions[None, :] + torch.tensor([[0], [9]], device=DEV)[:B]
    row_positions = positions.expand(B, T)
    # transformers: tables cast to the dtype, x * cos + rotate_half(x) * sin with each product rounded.
    c = torch.cat([cos, cos], -1)[row_positions].to(dtype)[:, :, None, :]
    s = torch.cat([sin, sin], -1)[row_positions].to(dtype)[:, :, None, :]
    rot = before[..., :2 * H * D].view(B, T, 2 * H, D)[..., :rotary_dim]
    rotated = rot * c + torch.cat([-rot[..., half:], rot[..., :half]], -1) * s
    expected = before.clone()
    expected[..., :2 * H * D].view(B, T, 2 * H, D)[..., :rotary_dim] = rotated

    def launch():
        rope.apply_rope(qk, cos, sin, positions, rotary_dim)
        return qkv  # the whole buffer: v and the channels past rotary_dim must come back untouched

    return launch, lambda: expected, 0.0 if dtype == BF16 else ELEMENTWISE_TOL[FP32]


CASES = []  # (kernel, case builder, dtype, shape)
for _dtype in (FP32, BF16):
    for _shape in ((1, 1, False), (1, 17, False), (17, 1280, False), (5, 100, True), (3, 1281, False), (2, 96, True)):
        CASES += [("rmsnorm_kernel", case_rmsnorm, _dtype, _shape),
                  ("layernorm_kernel", case_layernorm, _dtype, _shape), ("softmax_kernel", case_softmax, _dtype, _shape)]
    CASES.append(("softmax_kernel", case_softmax, _dtype, (3, 1500, False)))
    for _shape in ((1,), (17,), (3, 1281), (75, 96)):
        CASES += [("gelu_kernel", case_gelu, _dtype, _shape), ("silu_kernel", case_silu, _dtype, _shape)]
    for _shape in ((1, 17, 5, True, "tf32"), (17, 64, 33, False, "tf32"), (33, 1280, 40, True, "tf32"),
                   (75, 100, 96, True, "tf32")):
        CASES.append(("linear_kernel_tf32", case_linear_tf32, _dtype, _shape))
    for _shape in ((1, 1, 1, 1, 16, False), (2, 3, 17, 17, 64, True), (1, 2, 33, 75, 24, False),
                   (1, 2, 75, 75, 80, True)):
        CASES.append(("attention_scores_kernel", case_attention_scores, _dtype, _shape))
    for _shape in ((1, 1, 1, 1, 16), (2, 3, 17, 17, 64), (1, 2, 33, 75, 24), (1, 2, 75, 75, 80)):
        CASES.append(("attention_output_kernel", case_attention_output, _dtype, _shape))
    for _shape in ((1, 1, 1, 16, 16, False), (1, 17, 3, 64, 32, False), (2, 17, 2, 128, 128, True),
                   (1, 75, 2, 24, 24, False), (2, 7, 3, 80, 80, True), (2, 5, 2, 80, 40, True)):
        CASES.append(("apply_rope_kernel", case_apply_rope, _dtype, _shape))
for _shape in ((17, 64, 33, False, "ieee"), (33, 1280, 40, True, "ieee")):
    CASES.append(("linear_kernel_tf32", case_linear_tf32, FP32, _shape))
for _shape in ((1, 1, 1, 1, False), (2, 3, 17, 17, True), (1, 2, 33, 75, False), (1, 2, 5, 1281, False)):
    CASES.append(("softmax_inplace_kernel", case_softmax_inplace, FP32, _shape))
for _shape in ((1, 32, 10000.0), (17, 128, 10000.0), (1500, 32, 10000.0), (75, 64, 500000.0), (8192, 128, 10000.0)):
    CASES.append(("compute_freqs_kernel", case_compute_freqs, FP32, _shape))
assert {c[0] for c in CASES} == set(STUDENT_KERNELS)


def _case_id(case):
    kernel, _, dtype, shape = case
    return f"{kernel}-{str(dtype)[6:]}-{'x'.join(str(s) for s in shape)}"


def run_case(case, seed_text: str):
    kernel, build, dtype, shape = case
    gen = torch.Generator().manual_seed(zlib.crc32(seed_text.encode()))
    launch, reference, tol = build(gen, dtype, shape)
    with poisoned_outputs():
        out = launch()
    return out, reference, tol


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_cutile_course_kernel(case, request):
    kernel, _, dtype, shape = case
    out, reference, tol = run_case(case, request.node.nodeid)
    if kernel == "compute_freqs_kernel":  # tables of cos / sin: within about one fp32 ulp, absolute
        assert torch.isfinite(out).all()
        err = (out.double().cpu() - reference().double().cpu()).abs().max().item()
    else:
        err = rel_err(out, reference())
    assert err <= tol, f"{kernel} {dtype} {shape}: error {err:.3e} > {tol:.0e}"


def _compile_toolchain_missing() -> str | None:
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.tile") is None:
        return "cuda-tile is not installed (source utils/setup-cutile.sh installs it)"
    for package in ("nvidia-cuda-tileiras", "nvidia-cuda-nvcc", "nvidia-nvvm"):
        try:
            importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return f"{package} is not installed (source utils/setup-cutile.sh installs it)"
    return None


def course_signatures() -> list[dict]:
    """The recorded launches of the course kernels (other test files launch kernels of their own,
    the provided glue and the fast path's among them)."""
    return [s for s in recorded_signatures() if s["kernel"].startswith(f"{PACKAGE_DIR.name}.")
            and s["kernel"].rsplit(".", 1)[1] in STUDENT_KERNELS]


def test_every_launched_signature_compiles_for_sm_90(tmp_path):
    """The real compiler accepts every signature the cases above launched (emulated runs only: on a
    GPU, every launch above was compiled by cuTile already)."""
    if MODE != "emulate":
        pytest.skip("on a GPU the kernel cases compile each signature as they launch")
    missing = _compile_toolchain_missing()
    if missing:
        pytest.skip(missing)
    for case in CASES:  # run alone (-k compile), the cases have not launched yet
        if case[0] not in {s["kernel"].rsplit(".", 1)[1] for s in course_signatures()}:
            run_case(case, _case_id(case))
    signatures = tmp_path / "signatures.json"
    write_signatures(signatures, course_signatures())
    result = subprocess.run([sys.executable, str(REPO / "utils" / "cutile_compile_check.py"), "--signatures",
                             str(signatures)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    passed = {line.split()[1].rsplit(".", 1)[1] for line in result.stdout.splitlines() if line.startswith("PASS")}
    assert passed == set(STUDENT_KERNELS), result.stdout
    assert len(json.loads(signatures.read_text())) >= len(STUDENT_KERNELS)
