"""Compile every cuTile kernel signature for sm_90 with the real compiler, on a machine without a GPU.

cuTile has no CPU interpreter, and the CPU emulator (cutile_emulator/emulator.py) accepts some
code the real compiler rejects. This check closes that gap: the kernel signatures come from launches
recorded while an emulated run executed (GLM_ASR_CUTILE_RECORD, see glm_asr_course/runtimes/cutile.py),
and each distinct one is compiled here by cuda.tile's ahead-of-time path
(``cuda.tile.compilation.export_kernel``, output cubin), one line per signature:

    PASS  glm_asr_cutile_example.layers.rmsnorm_kernel  x=bfloat16[17,96] ... ROWS=32 BLOCK_N=128  0.41 s
    FAIL  <kernel>  <arguments>  <the compiler's message>

Usage:
    python -m glm_asr_lab.cutile_compile_check                      # record the self-checks, compile all
    python -m glm_asr_lab.cutile_compile_check --module glm_asr_cutile_example.layers
    python -m glm_asr_lab.cutile_compile_check --signatures FILE    # compile what a recorded run launched

Without --signatures the self-checks of the modules (default: every kernel file of
glm_asr_cutile_example) run first, emulated, in a subprocess that records their launches. Each
signature is built the way cuTile's launcher specialises a kernel for its arguments (dtype, rank,
unit strides and sizes, 16-byte divisibility, base alignment, aliasing), so what compiles here is
what a GPU launch of the same tensors compiles. Compiled cubins are cached by cuda.tile itself
(~/.cache/cutile-python, keyed by the kernel's bytecode and the compiler version): a repeated check
of unchanged kernels only re-runs the Python front end. Exits 1 when any signature fails.
Needs cuda-tile and the tileiras / nvcc / nvvm 13.4.92 packages (source utils/setup-cutile.sh).
"""

import argparse
import importlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from glm_asr_course.tracks import REPO_ROOT as REPO
DEFAULT_MODULES = ("glm_asr_cutile_example.layers", "glm_asr_cutile_example.attention",
                   "glm_asr_cutile_example.rope", "glm_asr_cutile_example.glue", "glm_asr_cutile_example.conv")
# cuTile specialises strides, sizes and divisibility only for arrays of up to this many dimensions.
SPECIALISED_NDIM = 5


def record_self_checks(modules, path: Path) -> list[str]:
    """Run each module's self-check (the file as a script) emulated, recording its launches into
    ``path``; the failures. A kernel the script defines itself (conv.py's, run as ``__main__``) is
    recorded under the module's name, which is how the compiler imports it."""
    failures, signatures = [], []
    for module in modules:
        own = path.with_name(f"{module}.json")
        env = dict(os.environ, GLM_ASR_CUTILE="emulate", GLM_ASR_CUTILE_RECORD=str(own), PYTHONPATH=str(REPO))
        script = REPO / (module.replace(".", "/") + ".py")
        result = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            failures.append(f"self-check of {module} exited {result.returncode}:\n{result.stdout}{result.stderr}")
        for signature in json.loads(own.read_text()) if own.exists() else []:
            if signature["kernel"].startswith("__main__."):
                signature["kernel"] = module + signature["kernel"][len("__main__"):]
            signatures.append(signature)
    path.write_text(json.dumps(signatures, indent=1) + "\n")
    return failures


def toolchain_missing() -> str | None:
    """Why the sm_90 compiler cannot run here (a package missing), or None."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.tile") is None:
        return "cuda-tile is not installed (source utils/setup-cutile.sh installs it)"
    for package in ("nvidia-cuda-tileiras", "nvidia-cuda-nvcc", "nvidia-nvvm"):
        try:
            importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return f"{package} is not installed (source utils/setup-cutile.sh installs it)"
    return None


def _disjoint(shape, strides) -> bool:
    """No two in-bounds indices share an element (cuTile's test: sorted strides grow past extents)."""
    pairs = sorted(zip(strides, shape))
    if not pairs:
        return True
    ok = pairs[0][0] > 0
    for (stride, size), (next_stride, _) in zip(pairs, pairs[1:]):
        ok &= next_stride > 0 and next_stride >= stride * size
    return ok


def array_constraint(ct, compilation, param: dict):
    """The ArrayConstraint cuTile's launcher derives for a tensor of this dtype, shape and strides."""
    dtype = getattr(ct, param["dtype"])
    shape, strides = param["shape"], param["strides"]
    bits = dtype.bitwidth
    specialise = len(shape) <= SPECIALISED_NDIM
    stride_divisor = 128 // bits if 128 % bits == 0 else 1

    def stride_16_bytes(stride):
        return stride * bits % 8 == 0 and stride * bits // 8 % 16 == 0

    return compilation.ArrayConstraint(
        dtype, len(shape), index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
        may_alias_internally=not _disjoint(shape, strides),
        stride_constant=[1 if specialise and s == 1 else None for s in strides],
        shape_constant=[1 if specialise and n == 1 else None for n in shape],
        stride_divisible_by=[stride_divisor if specialise and stride_16_bytes(s) else 1 for s in strides],
        shape_divisible_by=[16 if specialise and n % 16 == 0 else 1 for n in shape],
        base_addr_divisible_by=16 if param["aligned16"] else 1,
    )


def kernel_signature(ct, compilation, params: list[dict]):
    constraints = []
    for param in params:
        if param["kind"] == "array":
            constraints.append(array_constraint(ct, compilation, param))
        elif param["kind"] == "scalar":
            constraints.append(compilation.ScalarConstraint(getattr(ct, param["dtype"])))
        else:
            constraints.append(param["value"])
    return compilation.KernelSignature(constraints, compilation.CallingConvention.cutile_python_v2())


def describe(params: list[dict]) -> str:
    parts = []
    for param in params:
        if param["kind"] == "array":
            parts.append(f"{param['param']}={param['dtype']}[{','.join(map(str, param['shape']))}]")
        elif param["kind"] == "scalar":
            parts.append(f"{param['param']}:{param['dtype']}")
        else:
            parts.append(f"{param['param']}={param['value']}")
    return " ".join(parts)


def _import_compiler():
    """The real cuda.tile, with kernel modules bound to it (they read GLM_ASR_CUTILE when imported)."""
    os.environ["GLM_ASR_CUTILE"] = "compile"
    import cuda.tile as ct
    from cuda.tile import compilation

    return ct, compilation


def _kernel(qualified_name: str):
    module_name, kernel_name = qualified_name.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), kernel_name)


def compile_signatures(signatures: list[dict], gpu_code: str) -> tuple[int, int]:
    """Compile each distinct signature, one line per signature in recorded order; (distinct, failed).
    (One process: on the 2-core CI machine two compilers in parallel took as long as one after the
    other.)"""
    ct, compilation = _import_compiler()
    from glm_asr_course.kernels.todo_kernels import TodoKernel

    seen, failed = set(), 0
    for entry in signatures:
        label = f"{entry['kernel']}  {describe(entry['params'])}"
        kernel = _kernel(entry["kernel"])
        if isinstance(kernel, TodoKernel):
            print(f"TODO  {label}  (not written yet)", flush=True)
            continue
        signature = kernel_signature(ct, compilation, entry["params"])
        key = (entry["kernel"], repr(signature.parameters))
        if key in seen:  # another shape that specialises the same way needs no second compile
            continue
        seen.add(key)
        start = time.perf_counter()
        try:
            compilation.export_kernel(kernel, [signature], io.BytesIO(), gpu_code=gpu_code, output_format="cubin")
        except Exception as error:  # the compiler's own error types vary; each is reported as it is
            failed += 1
            message = " | ".join(line.strip() for line in str(error).strip().splitlines() if line.strip())
            print(f"FAIL  {label}  {type(error).__name__}: {message}", flush=True)
            continue
        print(f"PASS  {label}  {time.perf_counter() - start:.2f} s", flush=True)
    return len(seen), failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signatures", type=Path, help="JSON written by a run with GLM_ASR_CUTILE_RECORD")
    parser.add_argument("--module", action="append", help="only kernels of this module (repeatable)")
    parser.add_argument("--gpu-code", default="sm_90", help="target architecture (default sm_90, Hopper)")
    args = parser.parse_args(argv)
    modules = tuple(args.module or DEFAULT_MODULES)
    problems = []
    if args.signatures:
        signatures = json.loads(args.signatures.read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            record = Path(tmp) / "signatures.json"
            problems = record_self_checks(modules, record)
            signatures = json.loads(record.read_text()) if record.exists() else []
    if args.module:
        signatures = [s for s in signatures if s["kernel"].rsplit(".", 1)[0] in modules]
    for problem in problems:
        print(f"FAIL  {problem}")
    if not signatures:
        print("FAIL  no kernel signatures to compile")
        return 1
    start = time.perf_counter()
    distinct, failed = compile_signatures(signatures, args.gpu_code)
    counts = f"{distinct} distinct signatures ({len(signatures)} recorded)"
    seconds = f"{time.perf_counter() - start:.1f} s"
    if failed or problems:
        print(f"FAILED: {failed} of {counts} did not compile for {args.gpu_code}; {len(problems)} self-checks "
              f"failed ({seconds})")
    else:
        print(f"OK: all {counts} compiled for {args.gpu_code} ({seconds})")
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
