"""The course kernels' cases (and the provided glue's): one table, run by every kernel file's
self-check, by the pytest suite and by the grader, for the Triton and the cuTile track alike.

A case is chosen to catch a mistake students make, and says which (``guards``); it is not there to
be quick. On every machine:

* every loop of the reference kernels runs at least twice and ends ragged, under the largest tiles
  any launcher picks (Triton's interpreter takes up to 256 keys / K columns and up to 2^20 elements
  per program; cuTile 64 / 32): K and key counts of 600, 600 rows of 1281 lanes, 2^17 + 1000
  elements, 1500 positions;
* widths that are not powers of two (1281, 300, 80) with padding lanes that are not harmless:
  LayerNorm rows with mean 1000, logits of +-1e4, head channels read from inside a fused q|k|v buffer;
* one fp32 case per kernel at a tolerance that separates exact from approximate (erf and tanh GELU
  differ by ~5e-5 of the largest value here), GEMMs in IEEE fp32;
* bf16 cases judged against a bf16-faithful reference: rounded to bf16 where transformers
  materialises a bf16 tensor, and at no other point. Correct kernels match it bit for bit bar rare
  fp32 accumulation-order flips; a kernel that rounds elsewhere, or not at all, mismatches 20-40 %
  of its elements.

Outputs the launchers allocate start as NaN (self_check.poisoned_outputs), so an element a kernel
never writes fails. Cases marked ``model_size`` run the model's real shapes and run on a GPU only,
where the self-check also times them.

The launchers are the tracks' shared API: ``layers.rmsnorm(x, w, eps)``, ``layers.linear_tf32(x, w,
b, precision=)``, ``attention.attention_scores(q, k, scale, causal, precision=)`` and so on: a case
calls ``ops.rmsnorm``, whichever track ``ops`` holds. References are plain torch in float64,
written here from the formulas, not from either track's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from glm_asr_course.model import course_model
from glm_asr_course.reference import torch_ops

FP32, BF16 = torch.float32, torch.bfloat16
NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------------
# How an output is judged
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    passed: bool
    error: float  # in the unit the judge names (relative, absolute, or the share of mismatching bf16s)
    limit: float
    reason: str = ""  # why a failure failed, when the error alone does not say


def _same_non_finite(out: torch.Tensor, ref: torch.Tensor) -> str:
    """'' when out is finite wherever ref is and equal to it (-inf) wherever ref is not."""
    finite = torch.isfinite(ref)
    if not torch.isfinite(out[finite]).all():
        return "NaN or inf where the reference is finite (an unwritten or overflowing element)"
    if not torch.equal(out[~finite], ref[~finite]):
        return "a masked (-inf) entry differs"
    return ""


@dataclass(frozen=True)
class Close:
    """max |out - ref| <= tol over the finite entries, relative to max |ref| (or absolute: tables of
    cos / sin, within about one fp32 ulp of 1); non-finite entries must match."""

    tol: float
    relative: bool = True

    @property
    def unit(self) -> str:
        return "rel" if self.relative else "abs"

    def __call__(self, out: torch.Tensor, ref: torch.Tensor) -> Verdict:
        out, ref = out.double().cpu(), ref.double().cpu()
        if reason := _same_non_finite(out, ref):
            return Verdict(False, float("inf"), self.tol, reason)
        finite = torch.isfinite(ref)
        if not finite.any():
            return Verdict(True, 0.0, self.tol)
        err = (out[finite] - ref[finite]).abs().max()
        if self.relative:
            err = err / ref[finite].abs().max().clamp_min(1e-30)
        return Verdict(err.item() <= self.tol, err.item(), self.tol)


@dataclass(frozen=True)
class Faithful:
    """bf16 output against a bf16-faithful reference (already rounded to bf16). An element matches
    when it is equal, or off by less than 2^-16 of the largest reference value: fp32 cancellation
    near zero (GELU's 1 + erf(x) at x = -4) leaves errors there that bf16 cannot show at the tensor's
    scale. At most ``share`` of the elements may mismatch (accumulation order can flip a rounding),
    each by at most one bf16 step. The error reported is the share that mismatches."""

    share: float = 0.01
    unit = "mismatch"

    def __call__(self, out: torch.Tensor, ref: torch.Tensor) -> Verdict:
        if out.dtype != BF16:
            return Verdict(False, float("inf"), self.share, f"output is {out.dtype}, expected bfloat16")
        out, ref = out.cpu(), ref.cpu().to(BF16)
        if reason := _same_non_finite(out.double(), ref.double()):
            return Verdict(False, float("inf"), self.share, reason)
        finite = torch.isfinite(ref)
        out64, ref64 = out.double()[finite], ref.double()[finite]
        if not out64.numel():
            return Verdict(True, 0.0, self.share)
        diff = (out64 - ref64).abs()
        mismatch = diff > ref64.abs().max() * 2.0 ** -16
        # One bf16 step at each reference value: 2^-7 of its power-of-two floor.
        step = torch.exp2(torch.floor(torch.log2(ref64.abs().clamp_min(1e-30))) - 7)
        share = mismatch.double().mean().item()
        if (mismatch & (diff > step * 1.0001)).any():
            return Verdict(False, share, self.share, "an element is more than one bf16 step off")
        return Verdict(share <= self.share, share, self.share)


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------


class Inputs:
    """Seeded random inputs on the check's device."""

    def __init__(self, seed: int, device):
        self.gen = torch.Generator().manual_seed(seed)
        self.device = device

    def randn(self, *shape, dtype=FP32, scale=1.0, shift=0.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=self.gen, dtype=torch.float64) * scale + shift).to(self.device, dtype)

    def rows(self, n_rows: int, width: int, dtype=FP32, *, strided=False, scale=1.0, shift=0.0) -> torch.Tensor:
        """(n_rows, width), contiguous or every other row of a larger tensor (row stride 2 * width)."""
        if strided:
            return self.randn(n_rows, 2, width, dtype=dtype, scale=scale, shift=shift)[:, 1]
        return self.randn(n_rows, width, dtype=dtype, scale=scale, shift=shift)

    def heads(self, B: int, H: int, T: int, D: int, dtype=FP32, *, scale=1.0) -> tuple[torch.Tensor, ...]:
        """q, k, v as (B, H, T, D) views of one fused (B, T, 3 * H * D) projection output: strided,
        and a head's padding channels would read its neighbour's values."""
        qkv = self.randn(B, T, 3 * H * D, dtype=dtype, scale=scale)
        return tuple(qkv[..., i * H * D:(i + 1) * H * D].view(B, T, H, D).transpose(1, 2) for i in range(3))


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    kernel: str  # the course kernel it checks (or a composition of them: encoder_attention, ...)
    file: str  # the module of the track that holds the kernel and its launcher
    guards: str  # the mistake it is there to catch, in words
    shape: str  # what it runs
    build: Callable  # build(ops, inputs) -> (launch, reference): two callables returning tensors
    judge: Callable  # (out, reference) -> Verdict
    model_size: bool = False  # the model's real shapes: GPU only

    @property
    def id(self) -> str:
        return f"{self.kernel}[{self.guards}]"


CASES: list[Case] = []


def case(kernel: str, file: str, guards: str, shape: str, judge, *, model_size=False):
    """Register the decorated ``build(ops, inputs)`` as one case of the table."""
    def register(build):
        CASES.append(Case(kernel, file, guards, shape, build, judge, model_size))
        return build
    return register


def fp32_exact(tol=1e-5) -> Close:
    return Close(tol)


TF32_GEMM = Close(3e-3)  # TF32 operands: 10 mantissa bits
BF16_FAITHFUL = Faithful(0.01)


# ---- references, float64 with bf16 rounding only where transformers rounds ----


def rmsnorm_reference(x, w, eps):
    x64 = x.double()
    normed = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    if x.dtype == BF16:  # transformers rounds the normalised row to bf16, then multiplies in bf16
        return (w.double() * normed.to(BF16).double()).to(BF16)
    return w.double() * normed


def layernorm_reference(x, w, b, eps):
    out = torch.nn.functional.layer_norm(x.double(), x.shape[-1:], w.double(), b.double(), eps)
    return out.to(BF16) if x.dtype == BF16 else out


def elementwise_reference(fn, x):
    # transformers applies the op to the bf16 tensor: torch computes it in fp32 and rounds once.
    return fn(x.float()).to(BF16) if x.dtype == BF16 else fn(x.double())


def linear_reference(x, w, b):
    out = x.double() @ w.double().T + (0.0 if b is None else b.double())
    return out.to(BF16) if x.dtype == BF16 else out


def scores_reference(q, k, scale, causal):
    s = q.double() @ k.double().transpose(-1, -2) * scale
    if causal:
        Tq, Tk = s.shape[-2:]
        visible = torch.ones(Tq, Tk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~visible, NEG_INF)
    return s


def output_reference(p, v):
    # transformers casts the probabilities to v's dtype before the product.
    out = p.to(v.dtype).double() @ v.double()
    return out.to(BF16) if v.dtype == BF16 else out


# ---- rmsnorm_kernel ----

def _rmsnorm(n, width, dtype=FP32, *, scale=2.0, strided=False, eps=1e-5):
    def build(ops, inputs):
        x = inputs.rows(n, width, dtype, strided=strided, scale=scale)
        w = inputs.randn(width, dtype=dtype, shift=1.0)
        return lambda: ops.rmsnorm(x, w, eps), lambda: rmsnorm_reference(x, w, eps)
    return build


case("rmsnorm_kernel", "layers", "padding lanes: the mean divides by N, not the block", "5x1281 fp32",
     fp32_exact())(_rmsnorm(5, 1281))
case("rmsnorm_kernel", "layers", "rows past one program, ragged last one", "600x1281 fp32", fp32_exact())(
    _rmsnorm(600, 1281))
case("rmsnorm_kernel", "layers", "eps from the argument: rows of size 1e-3", "4x64 fp32, eps 1e-5",
     fp32_exact())(_rmsnorm(4, 64, scale=1e-3))
case("rmsnorm_kernel", "layers", "row stride: every other row of a tensor", "7x300 fp32 strided",
     fp32_exact())(_rmsnorm(7, 300, strided=True))
case("rmsnorm_kernel", "layers", "bf16: rounded before the weight, like transformers", "64x1281 bf16",
     BF16_FAITHFUL)(_rmsnorm(64, 1281, BF16))
case("rmsnorm_kernel", "layers", "smallest: one row of one element", "1x1 fp32", fp32_exact())(_rmsnorm(1, 1))
case("rmsnorm_kernel", "layers", "decoder size", "512x2048 bf16", BF16_FAITHFUL, model_size=True)(
    _rmsnorm(512, 2048, BF16))


# ---- layernorm_kernel ----


def _layernorm(n, width, dtype=FP32, *, shift=0.5, strided=False, eps=1e-5):
    def build(ops, inputs):
        x = inputs.rows(n, width, dtype, strided=strided, scale=2.0, shift=shift)
        w, b = inputs.randn(width, dtype=dtype, shift=1.0), inputs.randn(width, dtype=dtype)
        return lambda: ops.layernorm(x, w, b, eps), lambda: layernorm_reference(x, w, b, eps)
    return build


# With mean 1000, fp32 itself leaves ~1e-5 of error in x - mean; E[x^2] - mean^2 leaves ~1e-2.
case("layernorm_kernel", "layers", "padding lanes zeroed; variance not E[x^2]-mean^2: mean 1000",
     "9x1281 fp32, mean 1000", Close(1e-4))(_layernorm(9, 1281, shift=1000.0))
case("layernorm_kernel", "layers", "biased variance (/N), eps, bias", "6x17 fp32", fp32_exact())(_layernorm(6, 17))
case("layernorm_kernel", "layers", "rows past one program, ragged last one", "600x1281 fp32",
     fp32_exact())(_layernorm(600, 1281))
case("layernorm_kernel", "layers", "row stride: every other row of a tensor", "7x300 fp32 strided",
     fp32_exact())(_layernorm(7, 300, strided=True))
case("layernorm_kernel", "layers", "bf16: one rounding, at the store", "64x1281 bf16, mean 3",
     BF16_FAITHFUL)(_layernorm(64, 1281, BF16, shift=3.0))
case("layernorm_kernel", "layers", "smallest: rows of one element (variance 0)", "2x1 fp32", fp32_exact())(
    _layernorm(2, 1))
case("layernorm_kernel", "layers", "encoder size", "1500x1280 bf16", BF16_FAITHFUL,
     model_size=True)(_layernorm(1500, 1280, BF16))


# ---- gelu_kernel, silu_kernel ----

ACTIVATIONS = {
    "gelu_kernel": ("gelu", torch.nn.functional.gelu),
    "silu_kernel": ("silu", torch.nn.functional.silu),
}


def _activation(kernel, shape, dtype=FP32, *, scale=3.0, shift=0.0, extremes=False):
    launcher, reference = ACTIVATIONS[kernel]

    def build(ops, inputs):
        x = inputs.randn(*shape, dtype=dtype, scale=scale, shift=shift)
        if extremes:  # exp(-x) overflows at one end and vanishes at the other
            x.view(-1)[:6] = torch.tensor([-1e4, -120.0, -20.0, 20.0, 90.0, 1e4], dtype=dtype)
        return lambda: getattr(ops, launcher)(x), lambda: elementwise_reference(reference, x)
    return build


# Each activation's own first case, then the ones both share; the model-size case at the MLP each serves.
ACTIVATION_CASES = (
    ("gelu_kernel", "erf, not the tanh approximation", {}, "encoder MLP size", (1500, 5120)),
    ("silu_kernel", "overflow: x = +-1e4, -120, 90", {"extremes": True}, "decoder MLP size", (512, 6144)),
)
for _kernel, _first_guard, _first_options, _model_guard, _model_shape in ACTIVATION_CASES:
    case(_kernel, "layers", _first_guard, "3x1281 fp32", fp32_exact())(_activation(_kernel, (3, 1281), **_first_options))
    case(_kernel, "layers", "blocks past the first, ragged last one", "2^17+1000 fp32", fp32_exact())(
        _activation(_kernel, (2 ** 17 + 1000,)))
    case(_kernel, "layers", "bf16: one rounding, at the store", "64x1281 bf16", BF16_FAITHFUL)(
        _activation(_kernel, (64, 1281), BF16))
    # One element near 1: alone, it is its own scale, and GELU's negative tail cancels in fp32.
    case(_kernel, "layers", "smallest: one element", "1 fp32", fp32_exact())(
        _activation(_kernel, (1,), scale=0.5, shift=1.0))
    case(_kernel, "layers", _model_guard, "x".join(map(str, _model_shape)) + " bf16", BF16_FAITHFUL, model_size=True)(
        _activation(_kernel, _model_shape, BF16))


# ---- linear_kernel_tf32 ----


def _linear(M, N, K, dtype=FP32, *, bias=True, precision="ieee", strided=False):
    def build(ops, inputs):
        x = inputs.rows(M, K, dtype, strided=strided)
        w = inputs.randn(N, K, dtype=dtype, scale=K ** -0.5)
        b = inputs.randn(N, dtype=dtype) if bias else None
        return (lambda: ops.linear_tf32(x, w, b, precision=precision),
                lambda: linear_reference(x, w, b))
    return build


case("linear_kernel_tf32", "layers", "K loop: K = 600, 3+ steps, ragged end", "37x600 -> 48 fp32 ieee",
     fp32_exact())(_linear(37, 48, 600))
case("linear_kernel_tf32", "layers", "output tiles past the first, both ways", "300x96 -> 300 fp32 ieee",
     fp32_exact())(_linear(300, 300, 96))
case("linear_kernel_tf32", "layers", "bias per output column", "5x40 -> 70 fp32 ieee", fp32_exact())(
    _linear(5, 70, 40))
case("linear_kernel_tf32", "layers", "no bias (None)", "5x40 -> 70 fp32 ieee", fp32_exact())(
    _linear(5, 70, 40, bias=False))
case("linear_kernel_tf32", "layers", "row stride of x", "9x72 -> 40 fp32 ieee strided", fp32_exact())(
    _linear(9, 40, 72, strided=True))
case("linear_kernel_tf32", "layers", "TF32 operands where asked", "33x600 -> 40 fp32 tf32", TF32_GEMM)(
    _linear(33, 40, 600, precision="tf32"))
case("linear_kernel_tf32", "layers", "bf16: fp32 accumulation, one rounding", "300x600 -> 300 bf16",
     BF16_FAITHFUL)(_linear(300, 300, 600, BF16))
case("linear_kernel_tf32", "layers", "decode: one row", "1x600 -> 300 bf16", BF16_FAITHFUL)(
    _linear(1, 300, 600, BF16, bias=False))
case("linear_kernel_tf32", "layers", "smallest: 1x1 -> 1", "1x1 -> 1 fp32 ieee", fp32_exact())(_linear(1, 1, 1))
case("linear_kernel_tf32", "layers", "encoder q|k|v size", "1500x1280 -> 3840 bf16", BF16_FAITHFUL,
     model_size=True)(_linear(1500, 3840, 1280, BF16))
case("linear_kernel_tf32", "layers", "encoder size in tf32", "1500x1280 -> 1280 tf32", TF32_GEMM,
     model_size=True)(_linear(1500, 1280, 1280, precision="tf32"))
case("linear_kernel_tf32", "layers", "decode gate|up size", "1x2048 -> 12288 bf16", BF16_FAITHFUL,
     model_size=True)(_linear(1, 12288, 2048, BF16, bias=False))


# ---- softmax_kernel ----


def _softmax(n, width, dtype=FP32, *, scale=3.0, strided=False):
    def build(ops, inputs):
        x = inputs.rows(n, width, dtype, strided=strided, scale=scale)
        return lambda: ops.softmax(x), lambda: elementwise_reference(lambda t: torch.softmax(t, -1), x)
    return build


case("softmax_kernel", "layers", "row max subtracted: logits of +-1e4", "9x300 fp32", fp32_exact())(
    _softmax(9, 300, scale=1e4))
case("softmax_kernel", "layers", "padding lanes read -inf", "5x1281 fp32", fp32_exact())(_softmax(5, 1281))
case("softmax_kernel", "layers", "rows past one program, ragged last one", "600x1281 fp32", fp32_exact())(
    _softmax(600, 1281))
case("softmax_kernel", "layers", "row stride: every other row of a tensor", "7x300 fp32 strided",
     fp32_exact())(_softmax(7, 300, strided=True))
case("softmax_kernel", "layers", "bf16: one rounding, at the store", "64x1281 bf16", BF16_FAITHFUL)(
    _softmax(64, 1281, BF16))
case("softmax_kernel", "layers", "smallest: one row of one logit", "1x1 fp32", fp32_exact())(_softmax(1, 1))
case("softmax_kernel", "layers", "decoder prefill scores size", "2400x1024 fp32", fp32_exact(),
     model_size=True)(_softmax(2400, 1024))


# ---- attention_scores_kernel ----


def _scores(B, H, Tq, Tk, D, dtype=FP32, *, causal=False, kv_heads=None, precision="ieee"):
    """kv_heads: k has this many heads, each shared by H // kv_heads query heads through a 0 stride."""
    def build(ops, inputs):
        q = inputs.heads(B, H, Tq, D, dtype)[0]
        if kv_heads is None:
            k = inputs.heads(B, H, Tk, D, dtype)[1]
        else:
            shared = inputs.heads(B, kv_heads, Tk, D, dtype)[1]
            k = shared[:, :, None].expand(B, kv_heads, H // kv_heads, Tk, D).flatten(1, 2)
        scale = D ** -0.5
        return (lambda: ops.attention_scores(q, k, scale, causal, precision=precision),
                lambda: scores_reference(q, k, scale, causal))
    return build


case("attention_scores_kernel", "attention", "key loop: 600 keys, 3+ blocks, ragged end", "(1, 2, 40, 600) D 64 fp32",
     fp32_exact())(_scores(1, 2, 40, 600, 64))
case("attention_scores_kernel", "attention", "causal: key n <= query m, -inf above", "(1, 2, 300, 300) D 32 causal",
     fp32_exact())(_scores(1, 2, 300, 300, 32, causal=True))
case("attention_scores_kernel", "attention", "head channels past D = 80 masked (fused q|k|v)",
     "(2, 3, 17, 33) D 80 bf16", fp32_exact())(_scores(2, 3, 17, 33, 80, BF16))
case("attention_scores_kernel", "attention", "GQA: kv heads shared through a 0 stride",
     "(2, 4 on 1, 33, 70) D 64 fp32", fp32_exact())(_scores(2, 4, 33, 70, 64, kv_heads=1))
case("attention_scores_kernel", "attention", "TF32 operands where asked", "(1, 2, 17, 300) D 64 tf32",
     TF32_GEMM)(_scores(1, 2, 17, 300, 64, precision="tf32"))
case("attention_scores_kernel", "attention", "smallest: one query, one key", "(1, 1, 1, 1) D 16 fp32 causal",
     fp32_exact())(_scores(1, 1, 1, 1, 16, causal=True))
case("attention_scores_kernel", "attention", "encoder window", "(1, 20, 1500, 1500) D 64 bf16", fp32_exact(),
     model_size=True)(_scores(1, 20, 1500, 1500, 64, BF16))


# ---- softmax_inplace_kernel ----


def _softmax_inplace(B, H, Tq, Tk, *, scale=3.0, causal=False):
    def build(ops, inputs):
        s = inputs.randn(B, H, Tq, Tk, scale=scale)
        if causal:
            s = s.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool, device=s.device).tril(), NEG_INF)
        work = torch.empty_like(s)
        return lambda: ops.softmax_inplace(work.copy_(s)), lambda: torch.softmax(s.double(), -1)
    return build


case("softmax_inplace_kernel", "attention", "row max subtracted: scores of +-1e4", "(2, 3, 40, 600) fp32",
     fp32_exact())(_softmax_inplace(2, 3, 40, 600, scale=1e4))
case("softmax_inplace_kernel", "attention", "causal rows: -inf entries come out 0", "(1, 2, 75, 75) fp32 causal",
     fp32_exact())(_softmax_inplace(1, 2, 75, 75, causal=True))
case("softmax_inplace_kernel", "attention", "padding lanes read -inf: 1501 keys", "(1, 1, 5, 1501) fp32",
     fp32_exact())(_softmax_inplace(1, 1, 5, 1501))
case("softmax_inplace_kernel", "attention", "rows past one program, ragged last one", "(1, 2, 300, 1501) fp32",
     fp32_exact())(_softmax_inplace(1, 2, 300, 1501))
case("softmax_inplace_kernel", "attention", "smallest: one key", "(1, 1, 1, 1) fp32", fp32_exact())(
    _softmax_inplace(1, 1, 1, 1))
case("softmax_inplace_kernel", "attention", "encoder window", "(1, 20, 1500, 1500) fp32", fp32_exact(),
     model_size=True)(_softmax_inplace(1, 20, 1500, 1500))


# ---- attention_output_kernel ----


def _output(B, H, Tq, Tk, D, dtype=FP32, *, token_major=False, precision="ieee"):
    def build(ops, inputs):
        p = torch.softmax(inputs.randn(B, H, Tq, Tk, scale=3.0), -1)
        v = inputs.heads(B, H, Tk, D, dtype)[2]
        # The model writes into a token-major (B, Tq, H, D) buffer seen as (B, H, Tq, D).
        out = (torch.full((B, Tq, H, D), float("nan"), dtype=dtype, device=v.device).permute(0, 2, 1, 3)
               if token_major else None)
        return (lambda: ops.attention_output(p, v, out, precision=precision),
                lambda: output_reference(p, v))
    return build


case("attention_output_kernel", "attention", "key loop: 600 keys, 3+ blocks, ragged end", "(1, 2, 40, 600) D 64 fp32",
     fp32_exact())(_output(1, 2, 40, 600, 64))
case("attention_output_kernel", "attention", "query tiles past the first; out a token-major view",
     "(1, 2, 300, 75) D 64 fp32", fp32_exact())(_output(1, 2, 300, 75, 64, token_major=True))
case("attention_output_kernel", "attention", "head channels past D = 80 (v inside a fused q|k|v)",
     "(2, 3, 17, 33) D 80 fp32", fp32_exact())(_output(2, 3, 17, 33, 80))
case("attention_output_kernel", "attention", "bf16: p cast to v's dtype, one rounding", "(1, 2, 40, 600) D 64 bf16",
     BF16_FAITHFUL)(_output(1, 2, 40, 600, 64, BF16))
case("attention_output_kernel", "attention", "smallest: one query, one key", "(1, 1, 1, 1) D 16 fp32",
     fp32_exact())(_output(1, 1, 1, 1, 16))
case("attention_output_kernel", "attention", "encoder window", "(1, 20, 1500, 1500) D 64 bf16", BF16_FAITHFUL,
     model_size=True)(_output(1, 20, 1500, 1500, 64, BF16, token_major=True))


# ---- the model's attention, from the three kernels (attention.py) ----


def _encoder_attention(H, T, D, dtype, precision):
    def build(ops, inputs):
        q, k, v = inputs.heads(1, H, T, D, dtype)
        out = torch.full((1, T, H, D), float("nan"), dtype=dtype, device=q.device).permute(0, 2, 1, 3)
        return (lambda: course_model.encoder_attention(ops, q, k, v, D ** -0.5, out, precision=precision),
                lambda: torch_ops.attention(q, k, v, D ** -0.5))
    return build


case("encoder_attention", "attention", "the three kernels composed, no mask", "(1, 3, 75, 64) bf16",
     Close(2e-2))(_encoder_attention(3, 75, 64, BF16, "tf32"))
case("encoder_attention", "attention", "composed, a head size that is not a power of two", "(1, 2, 33, 80) fp32",
     fp32_exact())(_encoder_attention(2, 33, 80, FP32, "ieee"))


def _decoder_attention(B, Hq, Hkv, D, T, dtype, *, decode: bool, kv_start: list[int], precision: str):
    """Decode: one query at slot valid - 1 against every slot of a T-slot cache (the slots at or past
    valid hold stale values). Prefill: T causal queries at slots 0 .. T - 1. Row b's keys below
    kv_start[b] are left padding; a padding query sees only itself."""
    def build(ops, inputs):
        Tq, valid = (1, T // 2) if decode else (T, T)
        q = inputs.heads(B, Hq, Tq, D, dtype)[0]
        k_cache, v_cache = inputs.randn(B, Hkv, T, D, dtype=dtype), inputs.randn(B, Hkv, T, D, dtype=dtype)
        starts = torch.tensor(kv_start, dtype=torch.int32, device=q.device)
        counters = torch.tensor([valid - Tq, valid], dtype=torch.int32, device=q.device)  # cache_pos, valid_len
        out = torch.full((B, Tq, Hq, D), float("nan"), dtype=dtype, device=q.device).permute(0, 2, 1, 3)

        def reference():
            ref = torch_ops.attention(q, k_cache, v_cache, D ** -0.5, not decode, starts, n_valid=valid)
            for b, start in enumerate(kv_start):  # a padding query (prefill only) sees its own slot
                if not decode and start:
                    own = v_cache[b, :, :start].double().repeat_interleave(Hq // Hkv, 0)
                    ref[b, :, :start] = own
            return ref

        return (lambda: course_model.decoder_attention(
                    ops, q, k_cache, v_cache, D ** -0.5, causal=not decode, n_keys=T if decode else Tq,
                    kv_start=starts, cache_pos=counters[:1], valid_len=counters[1:], precision=precision, out=out),
                reference)
    return build


case("decoder_attention", "attention", "decode: GQA 16/4 over a left-padded cache, stale slots masked",
     "(2, 16 on 4, 48 slots) D 128 bf16", Close(2e-2))(
    _decoder_attention(2, 16, 4, 128, 48, BF16, decode=True, kv_start=[0, 7], precision="tf32"))
case("decoder_attention", "attention", "prefill: causal, GQA, left padding sees only itself",
     "(2, 8 on 2, 33) D 24 fp32", fp32_exact())(
    _decoder_attention(2, 8, 2, 24, 33, FP32, decode=False, kv_start=[3, 0], precision="ieee"))


# ---- compute_freqs_kernel ----


def _tables(positions, rotary_dim, theta):
    def build(ops, inputs):
        angle = torch_ops.rope_angles(torch.arange(positions), rotary_dim, theta).double()
        return (lambda: torch.cat(ops.rope_tables(positions, rotary_dim, theta, inputs.device)),
                lambda: torch.cat([angle.cos(), angle.sin()]))
    return build


# fp32 angles as transformers makes them; cos / sin of each within about one fp32 ulp of 1.
ROPE_TABLE = Close(2.5e-7, relative=False)
case("compute_freqs_kernel", "rope", "positions past one program, ragged last one", "1500 x rotary 32",
     ROPE_TABLE)(_tables(1500, 32, 10000.0))
case("compute_freqs_kernel", "rope", "theta from the argument", "75 x rotary 64, theta 500000",
     ROPE_TABLE)(_tables(75, 64, 500000.0))
case("compute_freqs_kernel", "rope", "inv_freq = theta^(-2i/dim), lanes past dim/2", "17 x rotary 40",
     ROPE_TABLE)(_tables(17, 40, 10000.0))
case("compute_freqs_kernel", "rope", "large angles: cos/sin of the fp32 angle", "8192 x rotary 128",
     ROPE_TABLE)(_tables(8192, 128, 10000.0))
case("compute_freqs_kernel", "rope", "smallest: one position, one frequency", "1 x rotary 2",
     ROPE_TABLE)(_tables(1, 2, 10000.0))


# ---- apply_rope_kernel ----


def _apply_rope(B, T, H, D, rotary_dim, dtype=FP32, *, per_row=False):
    def build(ops, inputs):
        qkv = inputs.randn(B, T, 3 * H * D, dtype=dtype)
        before = qkv.clone()
        qk = qkv[..., :2 * H * D].view(B, T, 2 * H, D)  # q and k heads, rotated by one launch
        cos, sin = torch_ops.rope_tables(torch.arange(T + 9, device=inputs.device), rotary_dim, 10000.0)
        positions = torch.arange(T, device=inputs.device)
        if per_row:  # row b starts at position 9 * b: left padding shifts a row's positions
            positions = positions[None, :] + 9 * torch.arange(B, device=inputs.device)[:, None]

        def reference():
            rows = positions.expand(B, T)
            expected = before.clone()
            heads = expected[..., :2 * H * D].view(B, T, 2 * H, D)
            heads.copy_(torch_ops.rope(heads.clone(), cos[rows], sin[rows], rotary_dim))
            return expected

        def launch():
            ops.apply_rope(qk, cos, sin, positions, rotary_dim)
            return qkv  # the whole buffer: v and the channels past rotary_dim must come back untouched
        return launch, reference
    return build


case("apply_rope_kernel", "rope", "rotate-half, partial: channels past rotary_dim untouched",
     "(1, 17, 3+3, 64) rotary 32 fp32", fp32_exact())(_apply_rope(1, 17, 3, 64, 32))
case("apply_rope_kernel", "rope", "per-row positions (left padding)", "(2, 7, 3+3, 80) rotary 80 fp32",
     fp32_exact())(_apply_rope(2, 7, 3, 80, 80, per_row=True))
case("apply_rope_kernel", "rope", "tokens past one block; bf16 rounding of each product",
     "(1, 75, 2+2, 128) rotary 128 bf16", Close(0.0))(_apply_rope(1, 75, 2, 128, 128, BF16))
# 8 + 8 heads of 64 lane pairs: the interpreter's launcher takes 1024 tokens a program.
case("apply_rope_kernel", "rope", "tokens past one program, ragged last one", "(1, 1100, 8+8, 128) rotary 128 fp32",
     fp32_exact())(_apply_rope(1, 1100, 8, 128, 128))
case("apply_rope_kernel", "rope", "smallest: one token, one head pair", "(1, 1, 1+1, 16) rotary 16 fp32",
     fp32_exact())(_apply_rope(1, 1, 1, 16, 16))
case("apply_rope_kernel", "rope", "encoder size", "(1, 1500, 20+20, 64) rotary 32 bf16", Close(0.0),
     model_size=True)(_apply_rope(1, 1500, 20, 64, 32, BF16))


# ---- the provided glue (glue.py): exact, whatever the track ----

EXACT = Close(0.0)


def _elementwise_glue(name, rows, width):
    def build(ops, inputs):
        a, b = inputs.randn(rows, width, dtype=BF16), inputs.randn(rows, width, dtype=BF16)
        if name == "residual_add":  # in place on the residual stream
            return lambda: ops.residual_add(a.clone(), b), lambda: (a.double() + b.double()).to(BF16)
        return lambda: ops.mul(a, b), lambda: (a.double() * b.double()).to(BF16)
    return build


for _name in ("residual_add", "mul"):
    case(_name, "glue", "one rounding of the exact result, blocks past the first", "600x300 bf16", EXACT)(
        _elementwise_glue(_name, 600, 300))
    case(_name, "glue", "decoder size", "512x2048 bf16", EXACT, model_size=True)(_elementwise_glue(_name, 512, 2048))


def _embed_tokens(rows, width, vocab):
    def build(ops, inputs):
        table, audio = inputs.randn(vocab, width, dtype=BF16), inputs.randn(rows // 2, width, dtype=BF16)
        ids = torch.randint(0, vocab, (rows,), generator=inputs.gen).to(inputs.device)
        audio_index = torch.full((rows,), -1, dtype=torch.int64)
        audio_index[3:3 + rows // 2] = torch.arange(rows // 2)
        audio_index = audio_index.to(inputs.device)
        return (lambda: ops.embed_tokens(ids, table, audio, audio_index),
                lambda: torch.where(audio_index[:, None] >= 0, audio[audio_index.clamp(min=0)], table[ids]))
    return build


case("embed_tokens", "glue", "audio rows replace the placeholders, table rows elsewhere", "17 x 300 of 301 ids bf16",
     EXACT)(_embed_tokens(17, 300, 301))
case("embed_tokens", "glue", "prompt size", "75 x 2048 of 59264 ids bf16", EXACT, model_size=True)(
    _embed_tokens(75, 2048, 59264))


@case("token_positions", "glue", "cache slot minus the row's left padding, clamped at 0", "(2, 12) int32", EXACT)
def _token_positions(ops, inputs):
    first = torch.tensor([5], dtype=torch.int32, device=inputs.device)
    start = torch.tensor([0, 7], dtype=torch.int32, device=inputs.device)
    return (lambda: ops.token_positions(first, start, 12),
            lambda: (5 + torch.arange(12, device=inputs.device)[None, :] - start[:, None].long()).clamp(min=0))


def _write_kv_cache(T, Hkv, D, slots):
    def build(ops, inputs):
        qkv = inputs.randn(2, T, 3 * Hkv, D, dtype=BF16)
        k, v = qkv[:, :, Hkv:2 * Hkv], qkv[:, :, 2 * Hkv:]
        first = torch.tensor([5], dtype=torch.int32, device=inputs.device)
        caches = torch.zeros(2, 2, Hkv, slots, D, dtype=BF16, device=inputs.device)

        def written():
            ops.write_kv_cache(k, v, caches[0], caches[1], first)
            return caches

        def expected():
            out = torch.zeros_like(caches)
            out[0, :, :, 5:5 + T], out[1, :, :, 5:5 + T] = k.transpose(1, 2), v.transpose(1, 2)
            return out
        return written, expected
    return build


case("write_kv_cache", "glue", "heads of the fused q|k|v into their slots, nothing else", "(2, 12, 4, 128) bf16",
     EXACT)(_write_kv_cache(12, 4, 128, 32))
case("write_kv_cache", "glue", "prompt size", "(2, 400, 4, 128) bf16", EXACT, model_size=True)(
    _write_kv_cache(400, 4, 128, 1024))


@case("mask_scores", "glue", "left padding and stale slots -inf, a query's own slot kept", "(4, 4, 3, 32) fp32",
      EXACT)
def _mask_scores(ops, inputs):
    scores = inputs.randn(4, 4, 3, 32)
    row_start = torch.tensor([5], dtype=torch.int32, device=inputs.device)
    counters = torch.tensor([9, 12], dtype=torch.int32, device=inputs.device)  # first slot, valid length

    def reference():
        j = torch.arange(32, device=inputs.device)
        own = (9 + torch.arange(3, device=inputs.device))[:, None]
        return scores.masked_fill(((j < 5) | (j >= 12)) & (j != own), NEG_INF)
    return lambda: ops.mask_scores(scores.clone(), row_start, counters[:1], counters[1:]), reference


def _argmax_rows(rows, vocab):
    def build(ops, inputs):
        logits = inputs.randn(rows, vocab)
        logits[1, vocab - 1] = 100.0  # a banned id holding the row's maximum
        logits[2, 7] = logits[2, 9] = 50.0  # a tie: the lowest index wins, as torch.argmax picks it
        banned = torch.tensor([vocab - 2, vocab - 1], device=inputs.device)
        suppress = torch.ones(1, dtype=torch.int32, device=inputs.device)
        chosen = torch.empty(rows, dtype=torch.int64, device=inputs.device)
        keep = ~torch.isin(torch.arange(vocab, device=inputs.device), banned)
        def launch():
            ops.argmax_rows(logits.clone(), banned, suppress, chosen)
            return chosen.double()
        return launch, lambda: logits.masked_fill(~keep, NEG_INF).argmax(-1).double()
    return build


case("argmax_rows", "glue", "banned ids skipped, ties to the lowest index", "4 x 5000 fp32", EXACT)(
    _argmax_rows(4, 5000))
case("argmax_rows", "glue", "vocabulary size", "3 x 59264 fp32", EXACT, model_size=True)(_argmax_rows(3, 59264))
