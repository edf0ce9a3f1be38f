"""The Whisper-style conv1d stem of the GLM-ASR audio encoder, in cuTile (provided code).

    h1 = gelu(conv1(mel))    128 -> 1280 channels, kernel 3, padding 1, stride 1: 3000 frames
    h2 = gelu(conv2(h1))     1280 -> 1280 channels, kernel 3, padding 1, stride 2: 1500 frames

A conv with kernel 3 is a GEMM over unfolded input: row t of the unfolded matrix holds the three
input frames that output frame t reads, [x[:, 2t-1], x[:, 2t], x[:, 2t+1]] for stride 2 (frames -1
and T_in are the zero padding), and the weight (C_out, C_in, 3) seen tap-major as (C_out, 3 * C_in)
(weight_loader.py lays it out once at load). conv_unfold_kernel writes that matrix; the course's
linear_kernel_tf32 multiplies it and adds the bias, in the model's precision, time-major
(B, T_out, C_out): the layout the transformer layers read. The model applies GELU afterwards with
the course's gelu_kernel. Unfolding costs one extra write and read of 3x the input, which a fused
implicit GEMM (the Triton track's conv.py) avoids.

Self-check: python glm_asr_cutile_example/conv.py  (without a GPU: the cuTile emulator)
"""

import math

import torch

from glm_asr_course.runtimes.cutile import MODE, ct, launch
from glm_asr_course.runtimes.tile_helpers import cdiv, next_power_of_2


TAPS = 3


@ct.kernel
def conv_unfold_kernel(x, unfolded, STRIDE: ct.Constant[int], BLOCK_T: ct.Constant[int], BLOCK_C: ct.Constant[int]):
    """unfolded[b, t, k, c] = x[b, c, t * STRIDE + k - 1], 0 where that frame is outside [0, T_in).

    x: (B, C_in, T_in), any strides; unfolded: (B, T_out, 3, C_in). Grid (cdiv(T_out, BLOCK_T),
    cdiv(C_in, BLOCK_C), B). The frames are computed, so the reads are gathers; out-of-range frames
    and channels read the gather's zero padding, and the store drops what lies past the output.
    """
    block_t, block_c, b = ct.bid(0), ct.bid(1), ct.bid(2)
    frames = (block_t * BLOCK_T + ct.arange(BLOCK_T, dtype=ct.int32)) * STRIDE
    channels = (block_c * BLOCK_C + ct.arange(BLOCK_C, dtype=ct.int32))[None, :]
    for tap in range(TAPS):
        taps = ct.gather(x, (b, channels, (frames + tap - 1)[:, None]))
        ct.store(unfolded, (b, block_t, tap, block_c), ct.reshape(taps, (1, BLOCK_T, 1, BLOCK_C)))


def conv_weight_as_matrix(weight: torch.Tensor) -> torch.Tensor:
    """(C_out, C_in, 3) conv weight -> (C_out, 3 * C_in), tap-major: the unfolded GEMM's weight."""
    return weight.permute(0, 2, 1).reshape(weight.shape[0], -1).contiguous()


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int, *, precision: str) -> torch.Tensor:
    """conv1d(x, w, bias, stride, padding=1) with kernel 3, as (B, T_out, C_out), time-major.

    x is logically (B, C_in, T_in) with any strides: pass the mel features (B, C, T) as they are and
    a time-major activation h (B, T, C) as ``h.transpose(1, 2)`` (a free view). weight: the
    (C_out, 3 * C_in) matrix of conv_weight_as_matrix; bias: (C_out,). T_out = (T_in - 1) // stride + 1.
    precision: "tf32" or "ieee" for fp32 operands (linear_tf32's).
    """
    B, C_in, T_in = x.shape
    C_out = weight.shape[0]
    if weight.shape != (C_out, TAPS * C_in) or bias.shape != (C_out,) or weight.dtype != x.dtype:
        raise ValueError(f"conv1d: input {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} {weight.dtype}, "
                         f"bias {tuple(bias.shape)} do not fit a kernel-3 conv")
    T_out = (T_in - 1) // stride + 1
    unfolded = torch.empty((B, T_out, TAPS, C_in), dtype=x.dtype, device=x.device)
    block_c = min(next_power_of_2(C_in), 128)
    block_t = min(next_power_of_2(T_out), 4096 // block_c)
    launch((cdiv(T_out, block_t), cdiv(C_in, block_c), B), conv_unfold_kernel, x, unfolded, stride, block_t, block_c)
    from .layers import linear_tf32  # the track's own GEMM: a student's copy of the folder uses its own

    out = linear_tf32(unfolded.view(B * T_out, TAPS * C_in), weight, bias, precision=precision)
    return out.view(B, T_out, C_out)


# --------------------------------------------------------------------------------------------------
# Self-check: python glm_asr_cutile_example/conv.py  (without a GPU: the cuTile emulator)
# --------------------------------------------------------------------------------------------------


def _self_check():
    from glm_asr_course.kernels.self_check import SelfCheck

    check = SelfCheck("conv.py", MODE != "gpu", cpu_runner="cuTile emulator", decorator="@ct.kernel")
    on_gpu, dev = check.on_gpu, check.device
    torch.manual_seed(0)
    # Real stem sizes on a GPU; a scaled-down stem in the emulator.
    mel, width, frames = (128, 1280, 3000) if on_gpu else (32, 48, 41)
    F = torch.nn.functional
    for dtype, name, tol in ((torch.float32, "fp32", 1e-5), (torch.bfloat16, "bf16", 1e-2)):
        x = torch.randn(1, mel, frames, device=dev).to(dtype)
        w1 = (torch.randn(width, mel, 3, device=dev) / math.sqrt(3 * mel)).to(dtype)
        b1 = (0.1 * torch.randn(width, device=dev)).to(dtype)
        # conv2 reads a time-major activation (1, frames, width) through a transposed view.
        h = torch.randn(1, frames, width, device=dev).to(dtype)
        w2 = (torch.randn(width, width, 3, device=dev) / math.sqrt(3 * width)).to(dtype)
        b2 = (0.1 * torch.randn(width, device=dev)).to(dtype)
        w1_matrix, w2_matrix = conv_weight_as_matrix(w1), conv_weight_as_matrix(w2)
        # float64 references on the same (rounded) inputs: time-major outputs.
        check.check(f"conv_unfold_kernel[conv1 {name}]", lambda: conv1d(x, w1_matrix, b1, 1, precision="ieee"),
                    lambda: F.conv1d(x.double(), w1.double(), b1.double(), padding=1).transpose(1, 2),
                    f"{mel}->{width}, T={frames}", tol)
        check.check(f"conv_unfold_kernel[conv2 {name}]",
                    lambda: conv1d(h.transpose(1, 2), w2_matrix, b2, 2, precision="ieee"),
                    lambda: F.conv1d(h.transpose(1, 2).double(), w2.double(), b2.double(), stride=2,
                                     padding=1).transpose(1, 2),
                    f"{width}->{width}, s=2", tol)
    check.finish()


if __name__ == "__main__":
    from glm_asr_course.kernels.self_check import package_module

    # Run as a script, this file is __main__, outside its package, where conv1d cannot reach layers.py.
    package_module(__file__)._self_check()
