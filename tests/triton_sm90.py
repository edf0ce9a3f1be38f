"""Registers and spills of Triton fast-path kernels compiled for an H100 (sm_90a) on any machine.

    python tests/triton_sm90.py        (prints one JSON object: {launch: {"registers": n, "spill_bytes": n}})
    python tests/triton_sm90.py --tf32-rounding
                                       (prints {"kernel dtype precision": n}: the cvt.rna.tf32.f32 in its PTX)

Run without TRITON_INTERPRET (the interpreter's kernels cannot be compiled): triton.compile lowers a
kernel for the target named here, and ptxas -v, the assembler Triton itself runs, reports what each
thread gets. Each launch is compiled with the tiles its launcher picks on a GPU at the model's shapes,
in IEEE fp32, where tl.dot runs as FMAs and holds its operand slices in registers (triton_helpers.fma_dot).
"""

import inspect
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.compiler import get_ptxas  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from glm_asr_triton_example import conv, fast_attention, fast_head, fast_linear, layers  # noqa: E402

H100 = GPUTarget("cuda", 90, 32)
FP32 = torch.float32


def compile_ptx(kernel, constexprs: dict, *, num_warps: int, num_stages: int, floats=(), int_ptrs=(),
                data="*fp32") -> str:
    """The PTX of ``kernel`` compiled for the H100 with ``constexprs``; every other argument named *_ptr is a
    ``data`` pointer (int32 where in ``int_ptrs``), every one in ``floats`` an fp32 scalar, the rest int32."""
    signature = {}
    for name in inspect.signature(kernel.fn).parameters:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name] = "*i32" if name in int_ptrs else data
        else:
            signature[name] = "fp32" if name in floats else "i32"
    compiled = triton.compile(ASTSource(kernel, signature, constexprs), target=H100,
                              options=dict(num_warps=num_warps, num_stages=num_stages))
    return compiled.asm["ptx"]


def compile_stats(kernel, constexprs: dict, *, num_warps: int, num_stages: int, floats=(), int_ptrs=()) -> dict:
    """Registers and spill bytes a thread of ``kernel`` (compile_ptx's arguments) gets from ptxas."""
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_text(compile_ptx(kernel, constexprs, num_warps=num_warps, num_stages=num_stages, floats=floats,
                                   int_ptrs=int_ptrs))
        report = subprocess.run([get_ptxas(H100.arch).path, "-v", "--gpu-name=sm_90a", str(ptx), "-o",
                                 str(ptx.with_suffix(".cubin"))], capture_output=True, text=True, check=True).stderr
    return {"registers": int(re.search(r"Used (\d+) registers", report).group(1)),
            "spill_bytes": int(re.search(r"(\d+) bytes spill stores", report).group(1))}


def linear_stats(M: int, N: int, K: int, *, gated=False, gelu=False) -> dict:
    kind, cfg = fast_linear._linear_config(M, N, K, FP32, gated, 132, fma=True)
    assert kind == "gemm", kind
    cfg = dict(cfg)
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    return compile_stats(fast_linear.fused_linear_kernel, dict(cfg, APPLY_GELU=gelu, GATED=gated,
                                                               INPUT_PRECISION="ieee", PDL=True),
                         num_warps=warps, num_stages=stages)


def flash_stats(head_dim: int, causal: bool) -> dict:
    block_m, block_n, warps, stages = fast_attention._flash_config(head_dim, FP32, "ieee")
    return compile_stats(fast_attention.flash_attention_kernel,
                         dict(CAUSAL=causal, HAS_KV_START=causal, HEAD_DIM=head_dim, BLOCK_D=head_dim,
                              BLOCK_M=block_m, BLOCK_N=block_n, INPUT_PRECISION="ieee", PDL=True),
                         num_warps=warps, num_stages=stages, floats=("qk_scale",), int_ptrs=("kv_start_ptr",))


def lm_head_stats() -> dict:
    cfg = dict(fast_head._lm_head_config(FP32, "ieee"))
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    return compile_stats(fast_head.lm_head_argmax_kernel, dict(cfg, INPUT_PRECISION="ieee", PDL=True, BLOCK_BANNED=4),
                         num_warps=warps, num_stages=stages, int_ptrs=("banned_ptr", "suppress_ptr", "idx_ptr"))


def conv_stats(stride: int) -> dict:
    block_t, block_co, block_ci, warps, stages = conv._conv_config(FP32, "ieee")
    return compile_stats(conv.conv1d_kernel, dict(STRIDE=stride, APPLY_GELU=True, INPUT_PRECISION="ieee",
                                                  BLOCK_T=block_t, BLOCK_CO=block_co, BLOCK_CI=block_ci, PDL=True),
                         num_warps=warps, num_stages=stages)


# The IEEE fp32 launches of one transcription whose tiles hold the most registers.
LAUNCHES = {
    "encoder fc1 (1500 x 1280 -> 5120, GELU)": lambda: linear_stats(1500, 5120, 1280, gelu=True),
    "encoder fc2 (1500 x 5120 -> 1280)": lambda: linear_stats(1500, 1280, 5120),
    "prefill gate|up (59 x 2048 -> 2 x 6144)": lambda: linear_stats(59, 6144, 2048, gated=True),
    "long prompt gate|up (3765 x 2048 -> 2 x 6144)": lambda: linear_stats(3765, 6144, 2048, gated=True),
    "encoder flash attention (head 64)": lambda: flash_stats(64, causal=False),
    "prefill flash attention (head 128, causal)": lambda: flash_stats(128, causal=True),
    "greedy head (lm_head + argmax)": lm_head_stats,
    "conv2 (stride 2, GELU)": lambda: conv_stats(2),
}


def tf32_roundings() -> dict:
    """How many cvt.rna.tf32.f32 the PTX of the course GEMM, the fast GEMM and the fast flash attention holds
    for fp32 at "tf32" (their operands rounded to nearest: a plain tl.dot would truncate them), fp32 at
    "ieee" and bf16 (none)."""
    counts = {}
    for data, precision in (("*fp32", "tf32"), ("*fp32", "ieee"), ("*bf16", "tf32")):
        tag = f"{data[1:]} {precision}"
        counts[f"linear_kernel_tf32 {tag}"] = compile_ptx(
            layers.linear_kernel_tf32, dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, INPUT_PRECISION=precision),
            num_warps=4, num_stages=3, data=data).count("cvt.rna.tf32.f32")
        counts[f"fused_linear_kernel {tag}"] = compile_ptx(
            fast_linear.fused_linear_kernel, dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, SPLIT_K=1,
                                                  APPLY_GELU=False, GATED=False, INPUT_PRECISION=precision, PDL=True),
            num_warps=4, num_stages=3, data=data).count("cvt.rna.tf32.f32")
        counts[f"flash_attention_kernel {tag}"] = compile_ptx(
            fast_attention.flash_attention_kernel, dict(CAUSAL=False, HAS_KV_START=False, HEAD_DIM=64, BLOCK_D=64,
                                                        BLOCK_M=64, BLOCK_N=64, INPUT_PRECISION=precision, PDL=True),
            num_warps=4, num_stages=2, floats=("qk_scale",), int_ptrs=("kv_start_ptr",), data=data
        ).count("cvt.rna.tf32.f32")
    return counts


if __name__ == "__main__":
    if sys.argv[1:] == ["--tf32-rounding"]:
        print(json.dumps(tf32_roundings()))
    else:
        print(json.dumps({name: stats() for name, stats in LAUNCHES.items()}))
