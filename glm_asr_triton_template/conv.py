# Generated from glm_asr_triton_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""The Whisper-style conv1d stem of the GLM-ASR audio encoder, in Triton (provided code).

    h1 = gelu(conv1(mel))    128 -> 1280 channels, kernel 3, padding 1, stride 1: 3000 frames
    h2 = gelu(conv2(h1))     1280 -> 1280 channels, kernel 3, padding 1, stride 2: 1500 frames

Each conv is an implicit GEMM: output tile (time, out channel) = sum over the 3 taps k and the input
channels ci of x[ci, t*stride + k - 1] * w[co, ci, k]. No im2col buffer is built; the shifted input
rows are gathered straight from memory, and the zero padding is a load mask. The bias is added in the
epilogue and the result is stored time-major (B, T_out, C_out), the layout the transformer layers
read, so the encoder needs no transpose. The course path applies GELU afterwards with the course's
gelu_kernel; the fast path fuses the exact (erf) GELU into this epilogue (APPLY_GELU).
"""

import math

import torch
import triton
import triton.language as tl

from glm_asr_course.runtimes.triton_helpers import (INTERPRET, dot, fma_dot, pdl_options, release_consumer, round_to,
                                                    wait_for_producer)


@triton.jit
def conv1d_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, C_in, T_in, C_out, T_out,
                       stride_xb, stride_xc, stride_xt, stride_wo, stride_wi, stride_wk,
                       stride_ob, stride_ot, stride_oc,
                       STRIDE: tl.constexpr, APPLY_GELU: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                       BLOCK_T: tl.constexpr, BLOCK_CO: tl.constexpr, BLOCK_CI: tl.constexpr,
                       PDL: tl.constexpr):
    release_consumer(PDL)
    wait_for_producer(PDL)
    # Time tiles vary fastest, so programs running together share one weight tile in L2.
    pid_t = tl.program_id(0)
    pid_co = tl.program_id(1)
    b = tl.program_id(2)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    co = pid_co * BLOCK_CO + tl.arange(0, BLOCK_CO)
    ci = tl.arange(0, BLOCK_CI)
    x_b = x_ptr + b * stride_xb
    acc = tl.zeros((BLOCK_T, BLOCK_CO), dtype=tl.float32)
    for k in tl.static_range(3):
        # Input frame read by tap k; frames -1 and T_in are the zero padding.
        t_in = t * STRIDE + (k - 1)
        t_ok = (t_in >= 0) & (t_in < T_in)
        x_rows = x_b + t_in[:, None] * stride_xt
        w_cols = w_ptr + co[None, :] * stride_wo + k * stride_wk
        for c0 in range(0, C_in, BLOCK_CI):
            c = c0 + ci
            a = tl.load(x_rows + c[None, :] * stride_xc, mask=t_ok[:, None] & (c[None, :] < C_in), other=0.0)
            w = tl.load(w_cols + c[:, None] * stride_wi, mask=(c[:, None] < C_in) & (co[None, :] < C_out), other=0.0)
            acc = dot(a, w, acc, INPUT_PRECISION)
    acc += tl.load(bias_ptr + co, mask=co < C_out, other=0.0).to(tl.float32)[None, :]
    y = acc
    if APPLY_GELU:
        # transformers materialises conv's output in the model dtype before GELU: round there too.
        y = round_to(y, out_ptr.dtype.element_ty).to(tl.float32)
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    mask = (t[:, None] < T_out) & (co[None, :] < C_out)
    out = out_ptr + b * stride_ob + t[:, None] * stride_ot + co[None, :] * stride_oc
    tl.store(out, round_to(y, out_ptr.dtype.element_ty), mask=mask)


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int, *, precision: str,
           gelu: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
    """conv1d(x, weight, bias, stride, padding=1), then GELU if ``gelu``, written time-major as
    (B, T_out, C_out). precision: "tf32" or "ieee" for fp32 operands.

    x is logically (B, C_in, T_in) with any strides: pass the mel features (B, C, T) as they are,
    and a time-major activation h (B, T, C) as ``h.transpose(1, 2)`` (a free view).
    weight (C_out, C_in, 3), bias (C_out,). T_out = (T_in - 1) // stride + 1.
    """
    B, C_in, T_in = x.shape
    C_out, C_in_w, K = weight.shape
    assert K == 3 and C_in_w == C_in and bias.shape == (C_out,) and weight.dtype == x.dtype
    T_out = (T_in + 2 - 3) // stride + 1
    if out is None:
        out = torch.empty((B, T_out, C_out), dtype=x.dtype, device=x.device)
    assert out.shape == (B, T_out, C_out)
    block_t, block_co, block_ci, num_warps, num_stages = _conv_config(x.dtype, precision)
    if INTERPRET:
        # The interpreter pays per program and per loop step, not per element: take big tiles.
        block_t, block_co, block_ci = 512, triton.next_power_of_2(C_out), min(128, triton.next_power_of_2(C_in))
    grid = (triton.cdiv(T_out, block_t), triton.cdiv(C_out, block_co), B)
    conv1d_kernel[grid](
        x, weight, bias, out, C_in, T_in, C_out, T_out,
        x.stride(0), x.stride(1), x.stride(2), weight.stride(0), weight.stride(1), weight.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        STRIDE=stride, APPLY_GELU=gelu, INPUT_PRECISION=precision, BLOCK_T=block_t, BLOCK_CO=block_co, BLOCK_CI=block_ci,
        num_warps=num_warps, num_stages=num_stages, **pdl_options(x.device),
    )
    return out


def _conv_config(dtype: torch.dtype, precision: str) -> tuple[int, int, int, int, int]:
    """(BLOCK_T, BLOCK_CO, BLOCK_CI, num_warps, num_stages), the fastest of a sweep on an H200
    (docs/performance.md). fp32 reads half as many channels per step: the same bytes per stage. IEEE
    fp32 spreads the tile over 8 warps: its FMA dot holds the operand slices in registers, and on 4
    warps spills 580 bytes a thread (ptxas on sm_90a; 52 on 8)."""
    if dtype == torch.float32:
        return 128, 64, 32, 8 if fma_dot(dtype, precision) else 4, 3
    return 128, 64, 64, 4, 3


# --------------------------------------------------------------------------------------------------
# Self-check: python glm_asr_triton_template/conv.py  (without a GPU: the Triton interpreter)
# --------------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck

    check = SelfCheck("conv.py", INTERPRET)
    on_gpu, dev = check.on_gpu, check.device
    torch.manual_seed(0)
    # Real stem sizes on a GPU; a scaled-down stem in the interpreter.
    mel, width, frames = (128, 1280, 3000) if on_gpu else (32, 48, 40)
    for dtype, name, tol in ((torch.float32, "fp32", 1e-5), (torch.bfloat16, "bf16", 1e-2)):
        x = torch.randn(1, mel, frames, device=dev).to(dtype)
        w1 = (torch.randn(width, mel, 3, device=dev) / math.sqrt(3 * mel)).to(dtype)
        b1 = (0.1 * torch.randn(width, device=dev)).to(dtype)
        w2 = (torch.randn(width, width, 3, device=dev) / math.sqrt(3 * width)).to(dtype)
        b2 = (0.1 * torch.randn(width, device=dev)).to(dtype)
        h1 = conv1d(x, w1, b1, 1, gelu=True, precision="ieee")
        # float64 references on the same (rounded) inputs: time-major outputs.
        check.check(f"conv1d_kernel[conv1+gelu {name}]", lambda: conv1d(x, w1, b1, 1, gelu=True, precision="ieee"),
                    lambda: torch.nn.functional.gelu(torch.nn.functional.conv1d(
                        x.double(), w1.double(), b1.double(), padding=1)).transpose(1, 2),
                    f"{mel}->{width}, T={frames}", tol)
        check.check(f"conv1d_kernel[conv2 {name}]",
                    lambda: conv1d(h1.transpose(1, 2), w2, b2, 2, gelu=False, precision="ieee"),
                    lambda: torch.nn.functional.conv1d(h1.transpose(1, 2).double(), w2.double(), b2.double(),
                                                       stride=2, padding=1).transpose(1, 2),
                    f"{width}->{width}, s=2", tol)
    check.finish()


if __name__ == "__main__":
    _self_check()
