"""Registers and spills of Triton fast-path kernels compiled for an H100 (sm_90a) on any machine.

    python tests/triton_sm90.py        (prints one JSON object: {launch: {"registers": n, "spill_bytes": n}})
    python tests/triton_sm90.py --tf32-rounding
                                       (prints {"kernel dtype precision": n}: the cvt.rna.tf32.f32 in its PTX)
    python tests/triton_sm90.py --launches FILE
                                       (lowers for sm_90a the launches record_launches() noted in FILE;
                                        prints {"lowered": n, "failed": {"module.kernel key": error}})

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
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

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


# ---- every launch of a run, lowered as the GPU's compiler would lower it ----------------------------
# The interpreter runs kernels as Python: a name reused with another type, a constexpr default or an
# operation the compiler rejects passes there and fails only on the GPU. record_launches() notes, in an
# interpreted run, each launch's kernel, argument types, constexprs and options; compile_launches() then
# lowers each distinct one for sm_90a in a process without the interpreter.

TRITON_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int64: "i64",
                torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}


def describe(value):
    """A launch argument as JSON: a pointer's or descriptor's element type, a scalar's type, a constexpr."""
    if isinstance(value, torch.Tensor):
        return {"pointer": TRITON_TYPES[value.dtype]}
    if isinstance(value, TensorDescriptor):
        return {"descriptor": TRITON_TYPES[value.base.dtype], "block": list(value.block_shape)}
    if isinstance(value, triton.language.dtype):
        return {"tl_dtype": value.name}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"no description of a launch argument of type {type(value).__name__}")


def record_launches(monkeypatch, launches: list) -> None:
    """From now on (the interpreter on), append each kernel launch to ``launches`` as JSON-ready dicts."""
    from triton.runtime.interpreter import InterpretedFunction

    run = InterpretedFunction.run

    def recorded(self, *args, grid, warmup, **kwargs):
        named = dict(zip(self.arg_names, args)) | {k: v for k, v in kwargs.items() if k in self.arg_names}
        launches.append({"module": self.fn.__module__, "kernel": self.fn.__name__,
                         "args": {name: describe(value) for name, value in named.items()},
                         "options": {k: v for k, v in kwargs.items() if k not in self.arg_names}})
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", recorded)


COMPILE_OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion", "maxnreg", "num_ctas")


def lower_to_ttgir(src: ASTSource, options: dict) -> None:
    """triton.compile's first stages for the H100: the kernel's AST to Triton IR, then to the sm_90a GPU IR
    (layouts, pipelining, the Hopper passes). Where the interpreter and the compiler disagree, this is
    where it shows; LLVM, PTX and ptxas, which take most of a compilation's time, are left out."""
    from triton._C.libtriton import ir
    from triton.compiler.compiler import make_backend

    backend = make_backend(H100)
    parsed = backend.parse_options(options)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(H100, parsed, backend.get_codegen_implementation(parsed), backend.get_module_map(),
                         context)
    stages = {}
    backend.add_stages(stages, parsed, src.language)
    metadata = {"target": H100, **parsed.__dict__}
    for stage in ("ttir", "ttgir"):
        module = stages[stage](module, metadata)


def compile_key(launch: dict):
    """(kernel, signature, constexprs, options) of a recorded launch: what its compilation depends on (a
    scalar's type, not its value). PDL on where the kernel has it, as a GPU launches it."""
    import importlib

    kernel = getattr(importlib.import_module(launch["module"]), launch["kernel"])
    signature, constexprs = {}, {}
    for param in kernel.params:
        given = launch["args"].get(param.name, {"value": getattr(param.default, "value", param.default)})
        if param.name == "PDL":
            given = {"value": True}
        value = given.get("value")
        if param.is_constexpr or ("value" in given and (value is None or isinstance(value, str))):
            signature[param.name] = "constexpr"
            constexprs[param.name] = triton.language.dtype(given["tl_dtype"]) if "tl_dtype" in given else value
        elif "pointer" in given:
            signature[param.name] = "*" + given["pointer"]
        elif "descriptor" in given:
            signature[param.name] = f"tensordesc<{given['descriptor']}{given['block']}>"
        elif isinstance(value, bool):
            signature[param.name] = "i1"
        elif isinstance(value, int):
            signature[param.name] = "i32" if -2**31 <= value < 2**31 else "i64"
        else:
            signature[param.name] = "fp32"
    options = {k: v for k, v in launch["options"].items() if k in COMPILE_OPTIONS}
    return kernel, signature, constexprs, options


def compile_launches(path: str) -> dict:
    """Lower for sm_90a (lower_to_ttgir) each distinct launch of the JSON list at ``path``. Returns how many
    lowered and, for each that failed, the compiler's last line."""
    distinct = {}
    for launch in json.loads(Path(path).read_text()):
        kernel, signature, constexprs, options = compile_key(launch)
        key = (f"{launch['module']}.{launch['kernel']}", json.dumps([signature, constexprs, options], default=str))
        distinct.setdefault(key, (kernel, signature, constexprs, options))
    lowered, failed = 0, {}
    for (name, described), (kernel, signature, constexprs, options) in distinct.items():
        try:
            lower_to_ttgir(ASTSource(kernel, signature, constexprs), options)
            lowered += 1
        except Exception as error:  # noqa: BLE001 - every failure is reported, with the launch it came from
            failed[f"{name} {described}"] = (str(error).strip().splitlines() or [type(error).__name__])[-1][:300]
    return {"lowered": lowered, "failed": failed}


if __name__ == "__main__":
    if sys.argv[1:] == ["--tf32-rounding"]:
        print(json.dumps(tf32_roundings()))
    elif sys.argv[1:2] == ["--launches"]:
        print(json.dumps(compile_launches(sys.argv[2])))
    else:
        print(json.dumps({name: stats() for name, stats in LAUNCHES.items()}))
