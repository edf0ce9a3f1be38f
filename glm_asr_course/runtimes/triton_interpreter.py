"""Fixes to Triton 3.6's CPU interpreter (TRITON_INTERPRET=1) that the course's kernels need and that
need nothing in kernel code; ``apply_fixes`` applies them where a CPU run starts (tracks.use_device,
``start_script`` in the kernel files' self-checks, the test suite's conftest). (The two gaps that do
show in kernel code, bf16 rounding and bf16 tl.dot, are triton_helpers' round_to and dot.)

1. With NumPy >= 2.4 the interpreter cannot turn a run-time scalar into a Python int, so every loop
   with a run-time bound (``range(0, n, BLOCK)``) fails (triton-lang/triton#9171, fixed after 3.6):
   scalars get an ``__index__`` that takes their one element.
2. Each call of a @triton.jit helper from inside a kernel (round_to, dot) re-patches all of
   triton.language (inspect.getmembers over three modules), although the launch running the kernel
   has patched it already: half the CPU time of an interpreted transcription. A helper whose only
   view of the language is its module's ``tl`` skips that. (No upstream issue: the interpreter is
   written for correctness, not speed.)
3. The interpreter multiplies fp32 tiles in IEEE fp32 whatever ``input_precision`` asks, where a GPU
   reads each operand as TF32 (10 mantissa bits) for "tf32", tl.dot's default: a kernel that ignores
   ``INPUT_PRECISION`` would pass every IEEE-fp32 check on a CPU and fail them on a
   GPU. Operands of a "tf32" dot are rounded to TF32 here to nearest, ties away from zero, as the
   track's ``dot`` rounds them on a GPU (cvt.rna.tf32.f32; the tensor cores alone would truncate them,
   triton-lang/triton#4574). (Upstream the interpreter's dot is exact by design; no issue.)
4. The interpreter evaluates a kernel's arithmetic in NumPy, which warns where a GPU follows IEEE
   silently: silu's exp(-x) overflowing to inf for x = -1e4 (a case of the table, correct, y = -0)
   printed "RuntimeWarning: overflow encountered in exp" into a user's output. Launches run under
   NumPy's errstate "ignore", as a GPU would; a wrong inf or NaN still fails the checks that read
   the outputs. (No upstream issue.)
"""

import os
import sys

import numpy as np
import torch


from cutile_emulator.tf32 import round_to_tf32


def start_script() -> bool:
    """Where a script that runs Triton kernels starts (a kernel file's self-check): on a machine without
    a GPU, the interpreter. It must be chosen before triton is imported (a @triton.jit kernel reads
    TRITON_INTERPRET when it is defined), so a script started without TRITON_INTERPRET=1 is run again,
    in place, with it; then the fixes are applied. Returns whether the kernels are interpreted."""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if not interpret and not torch.cuda.is_available():
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, "TRITON_INTERPRET": "1"})
    if interpret:
        apply_fixes()
    return interpret


def apply_fixes() -> None:
    """Patch the interpreter in this process (idempotent)."""
    _patch_scalar_index()
    _skip_repatching_in_helper_calls()
    _round_tf32_dot_operands()
    _ieee_launches()


def _patch_scalar_index():
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "_scalar_index_fixed", False):
        return

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        # Scalars are 1-element arrays in the interpreter; take the element explicitly.
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._scalar_index_fixed = True
    interpreter._patch_lang_tensor = patched


def _skip_repatching_in_helper_calls():
    from triton.language import core as language_core
    from triton.runtime import interpreter

    patch_and_call = interpreter.InterpretedFunction.__call__
    if getattr(patch_and_call, "_skips_repatching", False):
        return

    def call(self, *args, **kwargs):
        # A helper whose only view of the language is its module's `tl` (the tracks' helpers) runs
        # inside a launch, which has patched `tl` for its duration; Triton's own helpers (tl.zeros,
        # tl.sum, ...) also reach into triton.language.core, which only their own call patches.
        if any(value is language_core for value in self.fn.__globals__.values()):
            return patch_and_call(self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    call._skips_repatching = True
    interpreter.InterpretedFunction.__call__ = call


def _round_tf32_dot_operands():
    from triton._C.libtriton import ir
    from triton.runtime import interpreter

    create_dot = interpreter.InterpreterBuilder.create_dot
    if getattr(create_dot, "_rounds_tf32", False):
        return

    def patched(self, a, b, d, input_precision, max_num_imprecise_acc):
        if input_precision == ir.INPUT_PRECISION.TF32 and a.data.dtype == np.float32 and b.data.dtype == np.float32:
            a = interpreter.TensorHandle(_tf32_operand(a.data), a.dtype)
            b = interpreter.TensorHandle(_tf32_operand(b.data), b.dtype)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    patched._rounds_tf32 = True
    interpreter.InterpreterBuilder.create_dot = patched


def _tf32_operand(values: np.ndarray) -> np.ndarray:
    """An fp32 operand rounded to TF32, to nearest with ties away from zero (cvt.rna.tf32.f32)."""
    return round_to_tf32(torch.from_numpy(values), "nearest_away").numpy()


def _ieee_launches():
    from triton.runtime import interpreter

    launch = interpreter.GridExecutor.__call__
    if getattr(launch, "_ieee", False):
        return

    def patched(self, *args, **kwargs):
        with np.errstate(all="ignore"):
            return launch(self, *args, **kwargs)

    patched._ieee = True
    interpreter.GridExecutor.__call__ = patched
