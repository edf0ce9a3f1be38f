# Generated from glm_asr_triton_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""The course's RoPE kernels for GLM-ASR, in Triton: the rotary tables and the rotation, each above
its launcher.

    compute_freqs_kernel / rope_tables   cos[p, i] = cos(p * inv_freq[i]), sin likewise,
                                         inv_freq[i] = 1 / theta^(2i / rotary_dim)
    apply_rope_kernel / apply_rope       q and k heads rotated in place by their positions' rows

The tables are made once when the model loads: the encoder's (1500 positions x 16, rotary_dim 32:
the first half of each 64-wide head, "partial rotary") and the decoder's (max positions x 64, the
whole 128-wide head). The rotation runs in every layer, on the q and k heads inside the fused q|k|v
projection output, transformers' "rotate_half" convention: for each head, x1 = channels [0, half),
x2 = channels [half, rotary_dim), out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin, channels past
rotary_dim untouched.

Self-check: python glm_asr_triton_template/rope.py  (without a GPU: the Triton interpreter)
"""


import torch
import triton
import triton.language as tl
from glm_asr_course.kernels.todo_kernels import student_kernel  # noqa: E402

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.triton_helpers import INTERPRET, round_to, rows_per_program


@student_kernel("compute_freqs_kernel", reference="glm_asr_triton_example.rope", guide="docs/guide-triton.md#compute_freqs_kernel")
def compute_freqs_kernel(cos_ptr, sin_ptr, max_positions, theta, stride_table,
                         ROTARY_DIM: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_P: tl.constexpr):
    """RoPE tables: cos[p, i] = cos(p * inv_freq[i]), sin[p, i] = sin(p * inv_freq[i]),
    inv_freq[i] = 1 / theta^(2i / ROTARY_DIM), for i < ROTARY_DIM / 2.

    cos_ptr, sin_ptr: (max_positions, ROTARY_DIM // 2) fp32 tables, row stride stride_table.
    Grid: (cdiv(max_positions, BLOCK_P),); program p fills rows p*BLOCK_P .. p*BLOCK_P + BLOCK_P - 1,
    BLOCK_HALF = next_power_of_2(ROTARY_DIM // 2) frequency lanes each: a (BLOCK_P, BLOCK_HALF) tile.
    Masking: positions >= max_positions and lanes >= ROTARY_DIM // 2 are not stored.
    Hint: transformers builds inv_freq in fp32 and the angle as one fp32 product position * inv_freq;
    match those roundings, then take cos/sin of that fp32 angle (fp32 cos/sin pass the check; cos/sin
    in fp64 rounded once to fp32 land closer to torch's). theta arrives as a Python float
    under the interpreter: build a tensor from it (tl.full), don't call .to() on it
    (docs/guide-triton.md#interpreter-traps).
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @triton.jit.


def rope_tables(max_positions: int, rotary_dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables, each (max_positions, rotary_dim // 2) fp32: angle = pos / theta^(2i/rotary_dim)."""
    cos, sin = launch_contracts.rope_tables(max_positions, rotary_dim, device)
    half = rotary_dim // 2
    block_p = 1024 if INTERPRET else 32  # the interpreter pays per program: few, large ones
    compute_freqs_kernel[(triton.cdiv(max_positions, block_p),)](
        cos, sin, max_positions, float(theta), cos.stride(0),
        ROTARY_DIM=rotary_dim, BLOCK_HALF=triton.next_power_of_2(half), BLOCK_P=block_p,
    )
    return cos, sin


@student_kernel("apply_rope_kernel", reference="glm_asr_triton_example.rope", guide="docs/guide-triton.md#apply_rope_kernel")
def apply_rope_kernel(x_ptr, cos_ptr, sin_ptr, pos_ptr, n_heads, T,
                      stride_xb, stride_xt, stride_xh, stride_pb, stride_pt, stride_table,
                      HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr):
    """Rotate-half RoPE, in place, on channels [0, 2 * HALF) of every head of x:
    x1' = x1 * cos - x2 * sin,  x2' = x2 * cos + x1 * sin,  x1 = channels [0, HALF),
    x2 = channels [HALF, 2 * HALF), cos / sin = the table rows of each token's position.

    x: (B, T, n_heads, D) given by its b / t / h strides, last dim contiguous (e.g. the q and k heads
    of a fused q|k|v output), rotated in place, channels >= 2 * HALF untouched; cos_ptr, sin_ptr:
    (max_positions, HALF) fp32 tables, row stride stride_table; pos_ptr: integer positions of token t
    of row b at pos_ptr + b * stride_pb + t * stride_pt (stride_pb is 0 when every row shares them).
    Grid: (cdiv(T, BLOCK_T), B); program (i, b) rotates tokens i*BLOCK_T .. i*BLOCK_T + BLOCK_T - 1 of
    row b, all heads at once: a (BLOCK_T, BLOCK_H, BLOCK_HALF) tile of each half.
    Masking: tokens >= T, heads >= n_heads and lanes >= HALF neither load nor store.
    Hint: the positions are data: load each token's position, then its table row at
    cos_ptr + pos * stride_table. Round like transformers in bf16 (round_to): the tables cast to x's
    dtype, each of the four products rounded to it, then the difference / sum
    (docs/guide-triton.md#interpreter-traps). On a GPU a small tile is held by several threads at once, so put
    tl.debug_barrier() between the loads and the in-place stores.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @triton.jit.


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
               rotary_dim: int) -> torch.Tensor:
    """Rotate x (B, T, H, D) in place and return it (shapes: launch_contracts.apply_rope); x may be the
    q and k heads of a fused QKV output, ``qkv[..., :2*H*D].view(B, T, 2*H, D)``: one launch for both."""
    B, T, H, half, positions = launch_contracts.apply_rope(x, cos, sin, positions, rotary_dim)
    block_h, block_half = triton.next_power_of_2(H), triton.next_power_of_2(half)
    block_t = rows_per_program(T, block_h * block_half)  # tokens per program, all heads of each
    # No fused multiply-adds: "round(x1*c) - round(x2*s)" contracted into one FMA would skip a
    # rounding that torch performs.
    apply_rope_kernel[(triton.cdiv(T, block_t), B)](
        x, cos, sin, positions, H, T, x.stride(0), x.stride(1), x.stride(2), positions.stride(0),
        positions.stride(1), cos.stride(0), HALF=half, BLOCK_HALF=block_half, BLOCK_H=block_h, BLOCK_T=block_t,
        num_warps=4 if block_h * rotary_dim >= 2048 else 2, enable_fp_fusion=False,
    )
    return x


if __name__ == "__main__":  # the self-check: every case of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))

