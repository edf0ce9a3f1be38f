# Generated from glm_asr_cutile_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""The course's attention kernels for GLM-ASR, in NVIDIA cuTile: the textbook path, three launches,
each above its launcher: attention_scores_kernel (S = Q K^T * scale in fp32, -inf above the
diagonal when causal), softmax_inplace_kernel (P = softmax(S), over S's memory) and
attention_output_kernel (O = P V). The course model (glm_asr_course/model/course_model.py) composes
them: encoder_attention (scores, in-place softmax, P·V over the whole 30 s window) and
decoder_attention (scores, glue.mask_scores, layers.py's softmax_kernel, P·V over the KV cache; GQA
by a 0 head stride, no copies).

q, k and v arrive as (B, H, T, D) views of a fused QKV output or of the cache (any strides,
contiguous head channels); a kernel loads a (1, 1, BLOCK_M, BLOCK_D) tile of such an array and
reshapes it to (BLOCK_M, BLOCK_D).

The (..., Tq, Tk) scores go to memory and come back twice: fused flash attention never writes them.
That difference is worth measuring.

Self-check: python glm_asr_cutile_template/attention.py  (without a GPU: the cuTile emulator)
"""

import torch

from glm_asr_course.model import launch_contracts
from glm_asr_course.runtimes.cutile import ct, launch
from glm_asr_course.kernels.todo_kernels import student_kernel  # noqa: E402
from glm_asr_course.runtimes.tile_helpers import NEG_INF, ZERO, cdiv, next_power_of_2, rows_per_block


@student_kernel("attention_scores_kernel", reference="glm_asr_cutile_example.attention", guide="docs/guide-cutile.md#attention_scores_kernel")
def attention_scores_kernel(q, k, s, scale, CAUSAL: ct.Constant[bool], TF32: ct.Constant[bool],
                            BLOCK_M: ct.Constant[int], BLOCK_N: ct.Constant[int], BLOCK_D: ct.Constant[int]):
    """S = Q K^T * scale for one (batch, head) and BLOCK_M query rows, fp32 scores.

    q: (B, H, Tq, D), k: (B, H, Tk, D) arrays (any strides, last dim contiguous; a stride may be 0,
    e.g. query heads sharing one kv head); s: (B, H, Tq, Tk) fp32; scale: an fp32 scalar.
    Grid: (cdiv(Tq, BLOCK_M), B * H); block (i, bh), b = bh // H, h = bh % H (H = q.shape[1]), keeps
    its q tile (b, h, i, 0) of shape (1, 1, BLOCK_M, BLOCK_D) and sweeps the keys in BLOCK_N blocks,
    storing each (BLOCK_M, BLOCK_N) score tile at (b, h, i, j).
    CAUSAL: query m sees keys n <= m; store -inf above the diagonal (softmax turns it into 0).
    Masking: padding_mode=ZERO: query rows past Tq, keys past Tk and channels past D (BLOCK_D is D
    rounded up to a power of two) read 0.0; the store drops rows >= Tq and keys >= Tk.
    TF32: fp32 q and k meet the tensor cores as tfloat32 (see linear_kernel_tf32); bf16 as they are.
    Hint: ct.mma(q_tile, ct.transpose(k_tile), fp32 zeros) accumulates in fp32; multiply by scale
    after the product. ct.reshape turns the 4-d tiles into matrices and back.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


@student_kernel("softmax_inplace_kernel", reference="glm_asr_cutile_example.attention", guide="docs/guide-cutile.md#softmax_inplace_kernel")
def softmax_inplace_kernel(s, ROWS: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    """Softmax of the fp32 scores, in place, ROWS rows of n_cols keys per block.

    s: (n_rows, n_cols) fp32 array (the (B, H, Tq, Tk) scores seen as B * H * Tq rows of Tk).
    Grid: (cdiv(n_rows, ROWS),); block b reads rows b*ROWS .. b*ROWS + ROWS - 1, each whole in a
    BLOCK_N = next_power_of_2(n_cols) tile, normalises them and stores them back over themselves.
    Masking: padding_mode=NEG_INF: lanes past n_cols read -inf and add exp(-inf) = 0; causal -inf
    entries inside a row come out as exactly 0; rows past n_rows come out NaN and are dropped by
    the store, like the padding lanes.
    Hint: as softmax_kernel: subtract the row max, exponentiate, divide by the sum. A causal row
    always keeps its diagonal key, so its max is finite.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


@student_kernel("attention_output_kernel", reference="glm_asr_cutile_example.attention", guide="docs/guide-cutile.md#attention_output_kernel")
def attention_output_kernel(p, v, o, TF32: ct.Constant[bool], BLOCK_M: ct.Constant[int],
                            BLOCK_N: ct.Constant[int], BLOCK_D: ct.Constant[int]):
    """O = P V for one (batch, head) and BLOCK_M query rows.

    p: (B, H, Tq, Tk) fp32 probabilities; v: (B, H, Tk, D) in the activation dtype; o: (B, H, Tq, D)
    in o's dtype. Any strides, last dims contiguous.
    Grid: (cdiv(Tq, BLOCK_M), B * H), as attention_scores_kernel: walk the keys in BLOCK_N blocks,
    acc (BLOCK_M, BLOCK_D, fp32) = ct.mma(p tile (b, h, i, j), v tile (b, h, j, 0), acc).
    Masking: padding_mode=ZERO: p past (Tq, Tk) and v past (Tk, D) read 0.0, so padded keys add
    nothing; the store drops rows >= Tq and channels >= D.
    Hint: transformers casts the probabilities to v's dtype before the product: ct.astype(p, v.dtype)
    does the same in bf16 (a no-op in fp32, where TF32 then picks tfloat32 operands). Round the
    result once, at the store.
    """
    # TODO: write the body, then replace the @student_kernel(...) line with @ct.kernel.


def _tiles(Tq: int, head_dim: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D): a 16-row query tile for a decode token (Tq <= 16), 64 otherwise;
    64 keys per step; the head's channels padded to a power of two (at least 16, a tensor-core step)."""
    return (16 if Tq <= 16 else 64), 64, max(16, next_power_of_2(head_dim))


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool = False, *,
                     precision: str = "tf32") -> torch.Tensor:
    """S = q k^T * scale as a new fp32 (B, H, Tq, Tk) tensor; causal: -inf where key > query.

    q (B, H, Tq, D), k (B, H, Tk, D), any strides with a contiguous last dim; any head size D.
    """
    B, H, Tq, Tk, D, scores = launch_contracts.attention_scores(q, k, causal)
    block_m, block_n, block_d = _tiles(Tq, D)
    launch((cdiv(Tq, block_m), B * H), attention_scores_kernel, q, k, scores, float(scale), causal,
           precision == "tf32", block_m, block_n, block_d)
    return scores


def softmax_inplace(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a contiguous fp32 tensor, in place."""
    rows = launch_contracts.fp32_rows(scores, "softmax_inplace")
    n_cols = rows.shape[1]
    block = next_power_of_2(n_cols)
    per_block = rows_per_block(rows.shape[0], block)
    launch((cdiv(rows.shape[0], per_block),), softmax_inplace_kernel, rows, per_block, block)
    return scores


def attention_output(p: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None = None, *,
                     precision: str = "tf32") -> torch.Tensor:
    """O = p v into out, allocated when None (shapes: launch_contracts.attention_output); out may be a
    token-major (B, Tq, H, D) buffer seen through permute(0, 2, 1, 3): the next linear reads it as rows."""
    B, H, Tq, Tk, D, out = launch_contracts.attention_output(p, v, out)
    block_m, block_n, block_d = _tiles(Tq, D)
    launch((cdiv(Tq, block_m), B * H), attention_output_kernel, p, v, out, precision == "tf32",
           block_m, block_n, block_d)
    return out


if __name__ == "__main__":  # the self-check: every case of glm_asr_course/kernels/kernel_cases.py
    from glm_asr_course.kernels.self_check import main

    raise SystemExit(main(__file__))

