"""Typical wrong versions of every course kernel, each a small edit of the example's kernel: what a
student's first attempt gets wrong. tests/test_planted_bugs.py applies each to a copy of the track
and requires the kernel's own self-check (glm_asr_common.course.kernel_cases) to flag it FAIL on a CPU.
"""

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Bug:
    kernel: str
    file: str  # the track module that holds the kernel
    what: str
    edits: tuple[tuple[str, str], ...]  # (text of the example's kernel, its replacement), each found once

    @property
    def id(self) -> str:
        return f"{self.kernel}: {self.what}"

    def plant(self, package_dir: Path):
        """Apply the edits to the kernel in a copy of a track (its own source only: its lines, found by
        the parser); each must be found exactly once."""
        path = Path(package_dir) / f"{self.file}.py"
        text = path.read_text()
        kernel = next(node for node in ast.parse(text).body if getattr(node, "name", None) == self.kernel)
        lines = text.splitlines(keepends=True)
        start, end = kernel.lineno - 1, kernel.end_lineno
        source = "".join(lines[start:end])
        for old, new in self.edits:
            assert source.count(old) == 1, f"{self.id}: {old!r} occurs {source.count(old)} times in {self.kernel}"
            source = source.replace(old, new)
        path.write_text("".join(lines[:start]) + source + "".join(lines[end:]))


def bug(kernel, file, what, *edits):
    return Bug(kernel, file, what, tuple(edits))


TRITON = [
    # rmsnorm_kernel
    bug("rmsnorm_kernel", "layers", "mean over the padded block",
        ("tl.sum(x * x, axis=1) / N + eps", "tl.sum(x * x, axis=1) / BLOCK_N + eps")),
    bug("rmsnorm_kernel", "layers", "eps left out", ("tl.sum(x * x, axis=1) / N + eps)", "tl.sum(x * x, axis=1) / N)")),
    bug("rmsnorm_kernel", "layers", "no bf16 rounding before the weight",
        ("normed = round_to(x * inv_rms, y_ptr.dtype.element_ty).to(tl.float32)", "normed = x * inv_rms")),
    bug("rmsnorm_kernel", "layers", "program offset not scaled by ROWS",
        ("rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]",
         "rows = tl.program_id(0) + tl.arange(0, ROWS)[:, None]")),
    bug("rmsnorm_kernel", "layers", "row stride taken as N",
        ("tl.load(x_ptr + rows * x_row_stride + cols", "tl.load(x_ptr + rows * N + cols")),
    # layernorm_kernel
    bug("layernorm_kernel", "layers", "padding lanes not zeroed",
        ("centered = tl.where(mask, x - mean, 0.0)", "centered = x - mean")),
    bug("layernorm_kernel", "layers", "variance as E[x^2] - mean^2",
        ("inv_std = tl.math.rsqrt(tl.sum(centered * centered, axis=1) / N + eps)[:, None]",
         "inv_std = tl.math.rsqrt(tl.sum(x * x, axis=1)[:, None] / N - mean * mean + eps)")),
    bug("layernorm_kernel", "layers", "unbiased variance (N - 1)",
        ("tl.sum(centered * centered, axis=1) / N + eps", "tl.sum(centered * centered, axis=1) / (N - 1) + eps")),
    bug("layernorm_kernel", "layers", "bias left out", ("y = centered * inv_std * weight + bias", "y = centered * inv_std * weight")),
    bug("layernorm_kernel", "layers", "program offset not scaled by ROWS",
        ("rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]",
         "rows = tl.program_id(0) + tl.arange(0, ROWS)[:, None]")),
    # gelu_kernel
    bug("gelu_kernel", "layers", "tanh approximation",
        ("y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))",
         "y = 0.5 * x * (2.0 / (1.0 + tl.exp(-1.5957691216057308 * (x + 0.044715 * x * x * x))))")),
    bug("gelu_kernel", "layers", "sigmoid approximation x * sigmoid(1.702 x)",
        ("y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))", "y = x / (1.0 + tl.exp(-1.702 * x))")),
    bug("gelu_kernel", "layers", "every program on the first block",
        ("offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)", "offsets = tl.arange(0, BLOCK_SIZE)")),
    bug("gelu_kernel", "layers", "tail mask off by one", ("mask = offsets < n_elements", "mask = offsets < n_elements - 1")),
    # silu_kernel
    bug("silu_kernel", "layers", "sign of the exponent", ("y = x / (1.0 + tl.exp(-x))", "y = x / (1.0 + tl.exp(x))")),
    bug("silu_kernel", "layers", "sigmoid as exp(x) / (1 + exp(x)): overflows",
        ("y = x / (1.0 + tl.exp(-x))", "y = x * tl.exp(x) / (1.0 + tl.exp(x))")),
    bug("silu_kernel", "layers", "every program on the first block",
        ("offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)", "offsets = tl.arange(0, BLOCK_SIZE)")),
    bug("silu_kernel", "layers", "tail mask off by one", ("mask = offsets < n_elements", "mask = offsets < n_elements - 1")),
    # linear_kernel_tf32
    bug("linear_kernel_tf32", "layers", "K loop never advances", ("k = k_start + offs_k", "k = offs_k")),
    bug("linear_kernel_tf32", "layers", "x's row stride taken as K",
        ("x_ptr + offs_m[:, None] * stride_xm + k[None, :]", "x_ptr + offs_m[:, None] * K + k[None, :]")),
    bug("linear_kernel_tf32", "layers", "weight read as (K, N)",
        ("w_ptr + offs_n[:, None] * stride_wn + k[None, :]", "w_ptr + k[None, :] * N + offs_n[:, None]")),
    bug("linear_kernel_tf32", "layers", "bias left out",
        ("acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]", "acc += 0.0")),
    # Caught on a CPU because glm_asr_common.runtimes.triton_interpreter rounds a "tf32" dot's operands as a GPU does.
    bug("linear_kernel_tf32", "layers", "input_precision ignored (always tf32)",
        ("acc = tl.dot(x_tile, tl.trans(w_tile), acc, input_precision=INPUT_PRECISION)",
         "acc = tl.dot(x_tile, tl.trans(w_tile), acc, input_precision=\"tf32\")")),
    # softmax_kernel
    bug("softmax_kernel", "layers", "row max not subtracted",
        ("numerator = tl.exp(x - tl.max(x, axis=1)[:, None])", "numerator = tl.exp(x)")),
    bug("softmax_kernel", "layers", "padding lanes read 0", ("other=float(\"-inf\")).to(tl.float32)", "other=0.0).to(tl.float32)")),
    bug("softmax_kernel", "layers", "program offset not scaled by ROWS",
        ("rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]",
         "rows = tl.program_id(0) + tl.arange(0, ROWS)[:, None]")),
    bug("softmax_kernel", "layers", "row stride taken as N",
        ("tl.load(x_ptr + rows * x_row_stride + cols", "tl.load(x_ptr + rows * N + cols")),
    # attention_scores_kernel
    bug("attention_scores_kernel", "attention", "key loop never advances", ("n = start_n + offs_n", "n = offs_n")),
    bug("attention_scores_kernel", "attention", "causal mask off by one (n < m)",
        ("n[None, :] <= offs_m[:, None]", "n[None, :] < offs_m[:, None]")),
    bug("attention_scores_kernel", "attention", "scale left out",
        ("s = dot(q, tl.trans(k), None, INPUT_PRECISION) * scale", "s = dot(q, tl.trans(k), None, INPUT_PRECISION)")),
    bug("attention_scores_kernel", "attention", "head channels past HEAD_DIM read",
        ("d_ok = offs_d[None, :] < HEAD_DIM", "d_ok = offs_d[None, :] < BLOCK_D")),
    bug("attention_scores_kernel", "attention", "every program on the first query rows",
        ("offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)", "offs_m = tl.arange(0, BLOCK_M)")),
    # softmax_inplace_kernel
    bug("softmax_inplace_kernel", "attention", "row max not subtracted",
        ("e = tl.exp(x - tl.max(x, axis=1)[:, None])", "e = tl.exp(x)")),
    bug("softmax_inplace_kernel", "attention", "padding lanes read 0",
        ("x = tl.load(ptrs, mask=mask, other=float(\"-inf\"))", "x = tl.load(ptrs, mask=mask, other=0.0)")),
    bug("softmax_inplace_kernel", "attention", "program offset not scaled by ROWS",
        ("rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]",
         "rows = tl.program_id(0) + tl.arange(0, ROWS)[:, None]")),
    # attention_output_kernel
    bug("attention_output_kernel", "attention", "key loop never advances", ("n = start_n + offs_n", "n = offs_n")),
    bug("attention_output_kernel", "attention", "probabilities not cast to v's dtype",
        ("acc = dot(round_to(p, v.dtype), v, acc, INPUT_PRECISION)", "acc = dot(p, v.to(tl.float32), acc, INPUT_PRECISION)")),
    bug("attention_output_kernel", "attention", "output row stride taken as HEAD_DIM",
        ("offs_m[:, None] * stride_ot + offs_d[None, :]", "offs_m[:, None] * HEAD_DIM + offs_d[None, :]")),
    bug("attention_output_kernel", "attention", "every program on the first query rows",
        ("offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)", "offs_m = tl.arange(0, BLOCK_M)")),
    # compute_freqs_kernel
    bug("compute_freqs_kernel", "rope", "exponent i / dim instead of 2i / dim",
        ("exponent = tl.math.div_rn((2 * i).to(tl.float32)", "exponent = tl.math.div_rn(i.to(tl.float32)")),
    bug("compute_freqs_kernel", "rope", "theta fixed at 10000",
        ("tl.full([BLOCK_HALF], theta, tl.float64)", "tl.full([BLOCK_HALF], 10000.0, tl.float64)")),
    bug("compute_freqs_kernel", "rope", "every program on the first positions",
        ("pos = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)", "pos = tl.arange(0, BLOCK_P)")),
    bug("compute_freqs_kernel", "rope", "angle in fp64, not transformers' fp32 product",
        ("angle = pos.to(tl.float32)[:, None] * inv_freq[None, :]",
         "angle = pos.to(tl.float64)[:, None] * inv_freq.to(tl.float64)[None, :]")),
    # apply_rope_kernel
    bug("apply_rope_kernel", "rope", "rotation sign",
        ("out1 = round_to(x1 * c, dtype).to(tl.float32) - round_to(x2 * s, dtype).to(tl.float32)",
         "out1 = round_to(x1 * c, dtype).to(tl.float32) + round_to(x2 * s, dtype).to(tl.float32)")),
    bug("apply_rope_kernel", "rope", "row positions ignored (row 0's for all)",
        ("pos = tl.load(pos_ptr + b * stride_pb + t * stride_pt", "pos = tl.load(pos_ptr + t * stride_pt")),
    bug("apply_rope_kernel", "rope", "products not rounded to bf16 one by one",
        ("out1 = round_to(x1 * c, dtype).to(tl.float32) - round_to(x2 * s, dtype).to(tl.float32)",
         "out1 = x1 * c - x2 * s"),
        ("out2 = round_to(x2 * c, dtype).to(tl.float32) + round_to(x1 * s, dtype).to(tl.float32)",
         "out2 = x2 * c + x1 * s")),
    bug("apply_rope_kernel", "rope", "interleaved pairs instead of rotate-half",
        ("x2 = tl.load(first + HALF, mask=mask, other=0.0)", "x2 = tl.load(first + 1, mask=mask, other=0.0)")),
    bug("apply_rope_kernel", "rope", "every program on the first tokens",
        ("t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)[:, None, None]",
         "t = tl.arange(0, BLOCK_T)[:, None, None]")),
]

CUTILE = [
    # rmsnorm_kernel
    bug("rmsnorm_kernel", "layers", "mean over the padded block", ("/ x.shape[1] + eps)", "/ BLOCK_N + eps)")),
    bug("rmsnorm_kernel", "layers", "eps left out", ("/ x.shape[1] + eps)", "/ x.shape[1])")),
    bug("rmsnorm_kernel", "layers", "no bf16 rounding before the weight",
        ("normed = round_as(rows * inv_rms, y.dtype)", "normed = rows * inv_rms")),
    bug("rmsnorm_kernel", "layers", "tile index counted in rows",
        ("ct.load(x, (block, 0), (ROWS, BLOCK_N)", "ct.load(x, (block * ROWS, 0), (ROWS, BLOCK_N)"),
        ("ct.store(y, (block, 0),", "ct.store(y, (block * ROWS, 0),")),
    # layernorm_kernel
    bug("layernorm_kernel", "layers", "padding lanes not zeroed",
        ("centered = ct.where(ct.arange(BLOCK_N, dtype=ct.int32) < width, rows - mean, 0.0)", "centered = rows - mean")),
    bug("layernorm_kernel", "layers", "variance as E[x^2] - mean^2",
        ("inv_std = ct.rsqrt(ct.sum(centered * centered, axis=1, keepdims=True) / width + eps)",
         "inv_std = ct.rsqrt(ct.sum(rows * rows, axis=1, keepdims=True) / width - mean * mean + eps)")),
    bug("layernorm_kernel", "layers", "unbiased variance (N - 1)",
        ("ct.sum(centered * centered, axis=1, keepdims=True) / width + eps",
         "ct.sum(centered * centered, axis=1, keepdims=True) / (width - 1) + eps")),
    bug("layernorm_kernel", "layers", "bias left out", ("centered * inv_std * w + b", "centered * inv_std * w")),
    # gelu_kernel
    bug("gelu_kernel", "layers", "tanh approximation",
        ("(1.0 + erf(v * 0.7071067811865476))", "(1.0 + ct.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))")),
    bug("gelu_kernel", "layers", "sigmoid approximation x * sigmoid(1.702 x)",
        ("0.5 * v * (1.0 + erf(v * 0.7071067811865476))", "v / (1.0 + ct.exp(-1.702 * v))")),
    bug("gelu_kernel", "layers", "tile index counted in elements",
        ("ct.load(x, (block,), (BLOCK,)", "ct.load(x, (block * BLOCK,), (BLOCK,)"),
        ("ct.store(y, (block,),", "ct.store(y, (block * BLOCK,),")),
    # silu_kernel
    bug("silu_kernel", "layers", "sign of the exponent", ("v / (1.0 + ct.exp(-v))", "v / (1.0 + ct.exp(v))")),
    bug("silu_kernel", "layers", "sigmoid as exp(x) / (1 + exp(x)): overflows",
        ("v / (1.0 + ct.exp(-v))", "v * ct.exp(v) / (1.0 + ct.exp(v))")),
    bug("silu_kernel", "layers", "tile index counted in elements",
        ("ct.load(x, (block,), (BLOCK,)", "ct.load(x, (block * BLOCK,), (BLOCK,)"),
        ("ct.store(y, (block,),", "ct.store(y, (block * BLOCK,),")),
    # linear_kernel_tf32
    bug("linear_kernel_tf32", "layers", "K loop never advances",
        ("ct.load(x, (block_m, k),", "ct.load(x, (block_m, 0),"), ("ct.load(w, (block_n, k),", "ct.load(w, (block_n, 0),")),
    bug("linear_kernel_tf32", "layers", "bias indexed by the row tile",
        ("ct.load(bias, (block_n,), (BLOCK_N,)", "ct.load(bias, (block_m,), (BLOCK_N,)")),
    bug("linear_kernel_tf32", "layers", "TF32 whatever the precision",
        ("operand_dtype = ct.tfloat32 if TF32 and x.dtype == ct.float32 else x.dtype",
         "operand_dtype = ct.tfloat32 if x.dtype == ct.float32 else x.dtype")),
    bug("linear_kernel_tf32", "layers", "accumulator rounded to the input dtype each step",
        ("acc = ct.mma(ct.astype(x_tile, operand_dtype), ct.transpose(ct.astype(w_tile, operand_dtype)), acc)",
         "acc = round_as(ct.mma(ct.astype(x_tile, operand_dtype), ct.transpose(ct.astype(w_tile, operand_dtype)), "
         "acc), x.dtype)")),
    # softmax_kernel
    bug("softmax_kernel", "layers", "row max not subtracted",
        ("numerator = ct.exp(rows - ct.max(rows, axis=1, keepdims=True))", "numerator = ct.exp(rows)")),
    bug("softmax_kernel", "layers", "padding lanes read 0",
        ("padding_mode=NEG_INF), ct.float32)", "padding_mode=ZERO), ct.float32)")),
    bug("softmax_kernel", "layers", "sum over the wrong axis",
        ("numerator / ct.sum(numerator, axis=1, keepdims=True)", "numerator / ct.sum(numerator, axis=0, keepdims=True)")),
    # attention_scores_kernel
    bug("attention_scores_kernel", "attention", "key loop never advances",
        ("k_tile = ct.load(k, (b, h, j, 0)", "k_tile = ct.load(k, (b, h, 0, 0)")),
    bug("attention_scores_kernel", "attention", "causal mask off by one (n < m)",
        ("keys[None, :] <= rows[:, None]", "keys[None, :] < rows[:, None]")),
    bug("attention_scores_kernel", "attention", "scale left out",
        ("ct.zeros((BLOCK_M, BLOCK_N), ct.float32)) * scale", "ct.zeros((BLOCK_M, BLOCK_N), ct.float32))")),
    bug("attention_scores_kernel", "attention", "TF32 whatever the precision",
        ("operand_dtype = ct.tfloat32 if TF32 and q.dtype == ct.float32 else q.dtype",
         "operand_dtype = ct.tfloat32 if q.dtype == ct.float32 else q.dtype")),
    # softmax_inplace_kernel
    bug("softmax_inplace_kernel", "attention", "row max not subtracted",
        ("e = ct.exp(rows - ct.max(rows, axis=1, keepdims=True))", "e = ct.exp(rows)")),
    bug("softmax_inplace_kernel", "attention", "padding lanes read 0",
        ("(ROWS, BLOCK_N), padding_mode=NEG_INF)", "(ROWS, BLOCK_N), padding_mode=ZERO)")),
    # attention_output_kernel
    bug("attention_output_kernel", "attention", "key loop never advances",
        ("ct.load(p, (b, h, block_m, j),", "ct.load(p, (b, h, block_m, 0),"), ("ct.load(v, (b, h, j, 0),", "ct.load(v, (b, h, 0, 0),")),
    bug("attention_output_kernel", "attention", "probabilities not cast to v's dtype",
        ("p_tile = ct.astype(ct.astype(p_tile, v.dtype), operand_dtype)", "p_tile = ct.astype(p_tile, ct.float32)"),
        ("acc = ct.mma(p_tile, ct.astype(v_tile, operand_dtype), acc)", "acc = ct.mma(p_tile, ct.astype(v_tile, ct.float32), acc)")),
    bug("attention_output_kernel", "attention", "TF32 whatever the precision",
        ("operand_dtype = ct.tfloat32 if TF32 and v.dtype == ct.float32 else v.dtype",
         "operand_dtype = ct.tfloat32 if v.dtype == ct.float32 else v.dtype")),
    # compute_freqs_kernel
    bug("compute_freqs_kernel", "rope", "exponent i / dim instead of 2i / dim",
        ("exponent = ct.astype(2 * lanes, ct.float32) / ROTARY_DIM", "exponent = ct.astype(lanes, ct.float32) / ROTARY_DIM")),
    bug("compute_freqs_kernel", "rope", "theta fixed at 10000",
        ("log2_theta = ct.log2(ct.astype(theta, ct.float64))", "log2_theta = ct.log2(ct.astype(theta * 0.0 + 10000.0, ct.float64))")),
    bug("compute_freqs_kernel", "rope", "angle in fp64, not transformers' fp32 product",
        ("angle = ct.astype(positions, ct.float32)[:, None] * inv_freq[None, :]",
         "angle = ct.astype(positions, ct.float64)[:, None] * ct.astype(inv_freq, ct.float64)[None, :]")),
    # apply_rope_kernel
    bug("apply_rope_kernel", "rope", "rotation sign", ("out1 = round_as(x1 * c, x.dtype) - round_as(x2 * s, x.dtype)",
                                                      "out1 = round_as(x1 * c, x.dtype) + round_as(x2 * s, x.dtype)")),
    bug("apply_rope_kernel", "rope", "row positions ignored (row 0's for all)",
        ("ct.load(positions, (b, block_t), (1, BLOCK_T)", "ct.load(positions, (0, block_t), (1, BLOCK_T)")),
    bug("apply_rope_kernel", "rope", "products not rounded to bf16 one by one",
        ("out1 = round_as(x1 * c, x.dtype) - round_as(x2 * s, x.dtype)", "out1 = x1 * c - x2 * s"),
        ("out2 = round_as(x2 * c, x.dtype) + round_as(x1 * s, x.dtype)", "out2 = x2 * c + x1 * s")),
    bug("apply_rope_kernel", "rope", "interleaved pairs instead of rotate-half",
        ("first = x.slice(3, 0, HALF)", "first = x.slice(3, 0, 2 * HALF).slice(3, 0, HALF)"),
        ("second = x.slice(3, HALF, 2 * HALF)", "second = x.slice(3, 1, HALF + 1)")),
]

PLANTED = {"triton": TRITON, "cutile": CUTILE}
