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

Self-check: python glm_asr_triton_example/rope.py  (without a GPU: the Triton interpreter)
"""


import torch
import triton
import triton.language as tl

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.triton_helpers import INTERPRET, round_to, rows_per_program


# >>> STUDENT KERNEL compute_freqs_kernel
@triton.jit
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
    pos = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    i = tl.arange(0, BLOCK_HALF)
    # inv_freq exactly as transformers builds it in fp32: 1 / theta ** (arange(0, dim, 2) / dim).
    # div_rn keeps the divisions correctly rounded (Triton's "/" may be approximate on the GPU); the
    # power goes through fp64 so that its fp32 result is the correctly rounded one, like torch's.
    exponent = tl.math.div_rn((2 * i).to(tl.float32), tl.full([BLOCK_HALF], ROTARY_DIM, tl.float32))
    log2_theta = tl.log2(tl.full([BLOCK_HALF], theta, tl.float64))
    power = tl.exp2(exponent.to(tl.float64) * log2_theta).to(tl.float32)
    inv_freq = tl.math.div_rn(tl.full([BLOCK_HALF], 1.0, tl.float32), power)
    # transformers multiplies fp32 positions by fp32 inv_freq (a K=1 matmul): one rounded product.
    angle = pos.to(tl.float32)[:, None] * inv_freq[None, :]
    # cos/sin of that fp32 angle in fp64, rounded once: the correctly rounded value. Measured on an H100
    # up to 8191 radians: 3.0e-8 from torch's tables this way, 8.4e-8 (about an ulp) with fp32 cos/sin.
    angle64 = angle.to(tl.float64)
    mask = (pos[:, None] < max_positions) & (i[None, :] < ROTARY_DIM // 2)
    offs = pos[:, None] * stride_table + i[None, :]
    tl.store(cos_ptr + offs, tl.cos(angle64).to(tl.float32), mask=mask)
    tl.store(sin_ptr + offs, tl.sin(angle64).to(tl.float32), mask=mask)
# <<< STUDENT KERNEL


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


# >>> STUDENT KERNEL apply_rope_kernel
@triton.jit
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
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)[:, None, None]
    b = tl.program_id(1)
    h = tl.arange(0, BLOCK_H)[None, :, None]
    d = tl.arange(0, BLOCK_HALF)[None, None, :]
    token_ok = t < T
    pos = tl.load(pos_ptr + b * stride_pb + t * stride_pt, mask=token_ok, other=0)
    dtype = x_ptr.dtype.element_ty
    # transformers casts the fp32 tables to the activation dtype before multiplying.
    table_mask = token_ok & (d < HALF)
    c = round_to(tl.load(cos_ptr + pos * stride_table + d, mask=table_mask, other=0.0), dtype).to(tl.float32)
    s = round_to(tl.load(sin_ptr + pos * stride_table + d, mask=table_mask, other=0.0), dtype).to(tl.float32)
    first = x_ptr + b * stride_xb + t * stride_xt + h * stride_xh + d
    mask = table_mask & (h < n_heads)
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    # Threads sharing a replicated tile must all have loaded before any stores over it.
    tl.debug_barrier()
    # Each product is its own tensor op in torch, so it is rounded to the dtype before the add
    # (rotate_half negates x2 first; negation is exact, so x1*c + (-x2)*s == x1*c - x2*s).
    out1 = round_to(x1 * c, dtype).to(tl.float32) - round_to(x2 * s, dtype).to(tl.float32)
    out2 = round_to(x2 * c, dtype).to(tl.float32) + round_to(x1 * s, dtype).to(tl.float32)
    tl.store(first, round_to(out1, dtype), mask=mask)
    tl.store(first + HALF, round_to(out2, dtype), mask=mask)
# <<< STUDENT KERNEL


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

