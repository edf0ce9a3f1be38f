# Generated from glm_asr_cutile_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""The course's RoPE kernels for GLM-ASR, in NVIDIA cuTile: the rotary tables and the rotation.

    compute_freqs_kernel / rope_tables   cos[p, i] = cos(p * inv_freq[i]), sin likewise,
                                         inv_freq[i] = 1 / theta^(2i / rotary_dim)
    apply_rope_kernel / apply_rope       rotate-half RoPE on the first rotary_dim channels of each
                                         head of x (B, T, H, D), in place, positions per token

The tables are built once when the model loads: the encoder's (1500 positions x 16, rotary_dim 32:
the first half of each 64-wide head, "partial rotary") and the decoder's (max positions x 64, the
whole 128-wide head). The rotation runs on q and k inside the fused QKV output of every layer.

Self-check: python glm_asr_cutile_template/rope.py  (without a GPU: the cuTile emulator)
"""

import torch

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.cutile import ct, launch
from glm_asr_course.kernels.todo_kernels import student_kernel  # noqa: E402
from glm_asr_course.runtimes.tile_helpers import ZERO, cdiv, next_power_of_2, round_as, rows_per_block


@student_kernel("compute_freqs_kernel", reference="glm_asr_cutile_example.rope", guide="docs/guide-cutile.md#compute_freqs_kernel")
def compute_freqs_kernel(cos, sin, theta, ROTARY_DIM: ct.Constant[int], BLOCK_P: ct.Constant[int],
                         BLOCK_HALF: ct.Constant[int]):
    """RoPE tables: cos[p, i] = cos(p * inv_freq[i]), sin[p, i] = sin(p * inv_freq[i]),
    inv_freq[i] = 1 / theta^(2i / ROTARY_DIM), for i < ROTARY_DIM / 2.

    cos, sin: (max_positions, ROTARY_DIM // 2) fp32 arrays; theta: an fp32 scalar.
    Grid: (cdiv(max_positions, BLOCK_P),); block b fills rows b*BLOCK_P .. b*BLOCK_P + BLOCK_P - 1,
    BLOCK_HALF = next_power_of_2(ROTARY_DIM // 2) frequency lanes each: tile (b, 0) of shape
    (BLOCK_P, BLOCK_HALF).
    Masking: nothing to load; the store drops positions >= max_positions and lanes >= ROTARY_DIM // 2.
    Hint: transformers builds inv_freq in fp32 (the exponent 2i / ROTARY_DIM one rounded division,
    the power correctly rounded) and the angle as one fp32 product position * inv_freq; match those
    roundings, then take cos/sin of that fp32 angle (fp32 cos/sin pass the check; cos/sin in fp64,
    ct.astype(angle, ct.float64), rounded once to fp32 land closer to torch's).
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def rope_tables(max_positions: int, rotary_dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables, each (max_positions, rotary_dim // 2) fp32: angle = pos / theta^(2i/rotary_dim)."""
    cos, sin = launch_contracts.rope_tables(max_positions, rotary_dim, device)
    half = rotary_dim // 2
    block_half = next_power_of_2(half)
    block_p = rows_per_block(max_positions, block_half)
    launch((cdiv(max_positions, block_p),), compute_freqs_kernel, cos, sin, float(theta), rotary_dim,
           block_p, block_half)
    return cos, sin


@student_kernel("apply_rope_kernel", reference="glm_asr_cutile_example.rope", guide="docs/guide-cutile.md#apply_rope_kernel")
def apply_rope_kernel(x, cos, sin, positions, HALF: ct.Constant[int], BLOCK_T: ct.Constant[int],
                      BLOCK_H: ct.Constant[int], BLOCK_HALF: ct.Constant[int]):
    """Rotate-half RoPE, in place, on channels [0, 2 * HALF) of every head of x:
    x1' = x1 * cos - x2 * sin,  x2' = x2 * cos + x1 * sin,  x1 = channels [0, HALF),
    x2 = channels [HALF, 2 * HALF), cos / sin = the table rows of each token's position.

    x: (B, T, H, D) array (any strides, last dim contiguous; e.g. the q and k heads of a fused QKV
    output), rotated in place, channels >= 2 * HALF untouched; cos, sin: (max_positions, HALF) fp32;
    positions: (B, T) integers (the launcher broadcasts a shared (T,) row with a 0 stride).
    Grid: (cdiv(T, BLOCK_T), B); block (t, b) rotates tokens t*BLOCK_T .. t*BLOCK_T + BLOCK_T - 1 of
    row b, all heads at once: (1, BLOCK_T, BLOCK_H, BLOCK_HALF) tiles of x.slice(3, 0, HALF) and
    x.slice(3, HALF, 2 * HALF) (Array.slice: views of the two halves, no copy).
    Masking: padding_mode=ZERO on every load and ct.gather's zero padding: tokens past T, heads past H
    and lanes past HALF read 0 and the stores drop them (the slices end at HALF, so the padded lanes
    of the first half never spill into the second).
    Hint: read each token's table row with ct.gather(cos, (pos[:, None], lane[None, :])): positions
    are data, not tile indices. Round like transformers in bf16: the tables cast to x's dtype, each
    of the four products rounded to it, then the difference / sum (round_as; the rule:
    docs/guide-cutile.md#interpreter-traps).
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
               rotary_dim: int) -> torch.Tensor:
    """Rotate x (B, T, H, D) in place and return it (shapes: launch_contracts.apply_rope); x may be the
    q and k heads of a fused QKV output, ``qkv[..., :2*H*D].view(B, T, 2*H, D)``: one launch for both."""
    B, T, H, half, positions = launch_contracts.apply_rope(x, cos, sin, positions, rotary_dim)
    block_h, block_half = next_power_of_2(H), next_power_of_2(half)
    block_t = rows_per_block(T, block_h * block_half)  # tokens per block, all heads of each
    launch((cdiv(T, block_t), B), apply_rope_kernel, x, cos, sin, positions, half, block_t, block_h, block_half)
    return x


if __name__ == "__main__":  # the self-check: every case of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))

