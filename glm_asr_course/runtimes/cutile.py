"""The one place that decides how cuTile code runs.

Kernel files import ``ct`` and ``launch`` from here and are written against ``ct.*`` only:

    from glm_asr_course.runtimes.cutile import ct, launch

    @ct.kernel
    def scale_kernel(x, y, BLOCK: ct.Constant[int]): ...

    launch((blocks,), scale_kernel, x, y, 1024)

``MODE`` says what ``ct`` is:

* ``"gpu"``: the real ``cuda.tile`` (a CUDA GPU is present). ``launch`` queues the kernel on
  ``torch.cuda.current_stream()``, so launches made under ``torch.cuda.graph`` are captured.
* ``"emulate"``: ``cutile_emulator.emulator`` (no GPU): ``launch`` runs the kernel at once on
  the CPU tensors, block by block, and records its signature (``recorded_signatures``).
* ``"compile"``: the real ``cuda.tile`` on a machine without a GPU, only so that kernels can be
  compiled for sm_90 (glm_asr_lab/cutile_compile_check.py); ``launch`` refuses.

The mode is "gpu" when torch sees a CUDA device, "emulate" otherwise; the environment variable
``GLM_ASR_CUTILE=gpu|emulate|compile`` overrides. ``GLM_ASR_CUTILE_RECORD=FILE`` makes an emulated
process add the kernel signatures it launched to FILE (JSON) when it exits, for the compile check.
"""

import atexit
import contextlib
import functools
import json
import os
from pathlib import Path

import torch

from glm_asr_course.errors import UserError

MODES = ("gpu", "emulate", "compile")
_SETUP_HINT = "source utils/setup-cutile.sh installs it"


def _select_mode() -> str:
    requested = os.environ.get("GLM_ASR_CUTILE", "").strip()
    if requested and requested not in MODES:
        raise UserError(f"GLM_ASR_CUTILE={requested!r}: expected one of {', '.join(MODES)}")
    return requested or ("gpu" if torch.cuda.is_available() else "emulate")


MODE = _select_mode()

if MODE == "emulate":
    import cutile_emulator.emulator as ct
else:
    try:
        import cuda.tile as ct
    except ImportError as error:
        raise UserError(f"cuTile mode {MODE!r} needs the cuda-tile package ({_SETUP_HINT}): {error}") from None


class LaunchRefused(UserError):
    """A launch in a process that only compiles kernels."""


@functools.cache
def pdl_enabled() -> bool:
    """Programmatic dependent launch here: a GPU of compute capability 9.0+ unless GLM_ASR_PDL=0 (read once)."""
    if MODE != "gpu" or os.environ.get("GLM_ASR_PDL", "1") == "0":
        return False
    return torch.cuda.get_device_capability()[0] >= 9


def with_hints(kernel, hints: dict):
    """``kernel``, or a copy compiled with ``hints`` (``ct.kernel``'s options: occupancy, num_ctas,
    num_worker_warps): a kernel object of its own, made once per set of hints."""
    return _hinted_copy(kernel, tuple(sorted(hints.items())))


@functools.lru_cache(maxsize=None)
def _hinted_copy(kernel, hints: tuple):
    return kernel if not hints else ct.kernel(kernel._pyfunc, **dict(hints))


def launch(grid, kernel, *args, pdl: bool = False) -> None:
    """Launch ``kernel`` over ``grid`` (a tuple of 1 to 3 block counts) with ``args``.

    ``pdl``: programmatic dependent launch where the GPU has it: the kernel may start while the one
    before drains, so it calls ``ct.grid_dependency_control_wait()`` before touching that one's memory.

    ``kernel`` may be a template's unwritten kernel (glm_asr_course.kernels.todo_kernels.TodoKernel,
    known here by its ``resolve`` method, so that this layer needs nothing of the course's): the
    example's kernel runs in its place when allowed (``--allow-reference``), otherwise ``resolve``
    raises ``KernelTodo``.
    """
    if hasattr(kernel, "resolve"):
        kernel = kernel.resolve()
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    if MODE == "gpu":
        ct.launch(torch.cuda.current_stream(), grid, kernel, args, programmatic_dependent_launch=pdl and pdl_enabled())
    elif MODE == "emulate":
        ct.launch(None, grid, kernel, args, programmatic_dependent_launch=pdl)
    else:
        # cuda.tile's kernel objects keep their Python function as _pyfunc (the emulator's do too).
        name = getattr(getattr(kernel, "_pyfunc", None), "__name__", kernel)
        raise LaunchRefused(f"GLM_ASR_CUTILE=compile only compiles kernels; launching {name} needs a GPU "
                            "or GLM_ASR_CUTILE=emulate")


def recorded_signatures() -> list[dict]:
    """Every distinct kernel signature this (emulated) process has launched, in first-launch order:
    ``{"kernel": "module.name", "params": [...], "grid": [...], "launches": n}``."""
    if MODE != "emulate":
        return []
    return list(ct.LAUNCHES.values())


@contextlib.contextmanager
def signatures_set_aside():
    """Within: recorded_signatures() holds only the launches made inside. Afterwards the earlier record
    comes back, the new signatures after it. (A test file's compile check compiles what it launched,
    whatever files ran before it in the process.)"""
    if MODE != "emulate":
        yield
        return
    earlier = dict(ct.LAUNCHES)
    ct.LAUNCHES.clear()
    try:
        yield
    finally:
        for key, signature in ct.LAUNCHES.items():
            earlier.setdefault(key, signature)
        ct.LAUNCHES.clear()
        ct.LAUNCHES.update(earlier)


def write_signatures(path, signatures=None) -> int:
    """Add ``signatures`` (default: this process's) to the JSON list in ``path``; returns its length."""
    path = Path(path)
    known = json.loads(path.read_text()) if path.exists() and path.stat().st_size else []
    seen = {json.dumps([s["kernel"], s["params"]], sort_keys=True) for s in known}
    for signature in recorded_signatures() if signatures is None else signatures:
        key = json.dumps([signature["kernel"], signature["params"]], sort_keys=True)
        if key not in seen:
            seen.add(key)
            known.append(signature)
    path.write_text(json.dumps(known, indent=1) + "\n")
    return len(known)


if MODE == "emulate" and os.environ.get("GLM_ASR_CUTILE_RECORD"):
    atexit.register(write_signatures, os.environ["GLM_ASR_CUTILE_RECORD"])
