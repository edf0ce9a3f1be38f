"""What the student templates need beyond their kernels: TODO stand-ins, reference substitution and
the per-kernel self-check table.

In a template, each kernel a student writes is declared as

    @student_kernel("rmsnorm_kernel", reference="glm_asr_triton_example.layers", guide="GUIDE.md#rmsnorm_kernel")
    def rmsnorm_kernel(x_ptr, ...):
        \"\"\"formula, shapes, grid, hint\"\"\"

Launching it (``rmsnorm_kernel[grid](...)``) raises ``KernelTodo`` naming the kernel, its file and
the guide section, unless the kernel was allowed a reference (``--allow-reference``): then the
example's kernel runs in its place and the substitution is recorded in ``SUBSTITUTED``, so results
can say so. A student finishes a kernel by writing its body and replacing the decorator with
``@triton.jit``.

``KernelTodo`` is a ``UserError``: the command-line tools print it as one line and exit 2.

``SelfCheck`` prints the table of a kernel file's ``__main__`` self-check: one row per kernel with
PASS / FAIL / TODO, the max abs and rel error against torch, the shape tested and the time.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
ALLOWED_REFERENCES: set[str] = set()  # kernel names, or "all"
SUBSTITUTED: set[str] = set()  # kernels whose reference actually ran
TODO_KERNELS: dict[str, "TodoKernel"] = {}  # every stand-in declared so far, by name
_REFERENCE_LAUNCHES = [0]  # how many launches a reference served: a self-check row that saw one reads REF


class KernelTodo(UserError, NotImplementedError):
    """A template kernel that has not been written yet was launched."""

    def __init__(self, kernel: str, file: str, guide: str):
        self.kernel, self.file, self.guide = kernel, file, guide
        super().__init__(f"{kernel} in {file} is a TODO: write it (see {guide}), or run with "
                         f"--allow-reference {kernel} to use the example's kernel meanwhile")


def _display_path(path: str) -> str:
    """The file relative to the repository when it lies inside it, else as given."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(REPO_ROOT))
    except ValueError:
        return str(resolved)


class TodoKernel:
    """Stands where a kernel will be (``@triton.jit`` or ``@ct.kernel``): same name and docstring,
    launches raise. Triton launches go through ``kernel[grid](...)``; cuTile's launcher
    (glm_asr_common.cutile_runtime.launch) calls ``resolve()``."""

    def __init__(self, fn, name: str, reference: str, guide: str):
        if fn.__name__ != name:
            raise ValueError(f"@student_kernel({name!r}) decorates a function named {fn.__name__!r}")
        self.fn, self.name, self.reference, self.guide = fn, name, reference, guide
        self.file = _display_path(inspect.getsourcefile(fn))
        self.__name__, self.__doc__ = name, fn.__doc__
        self._reference_kernel = None

    def __repr__(self):
        return f"<TODO kernel {self.name} in {self.file}>"

    def reference_kernel(self):
        """The example's finished kernel of the same name (imported on first use)."""
        if self._reference_kernel is None:
            self._reference_kernel = getattr(importlib.import_module(self.reference), self.name)
        return self._reference_kernel

    def resolve(self):
        """The kernel to launch in this one's place: the example's, when the kernel was allowed a
        reference (the substitution is recorded); otherwise a ``KernelTodo``."""
        if "all" in ALLOWED_REFERENCES or self.name in ALLOWED_REFERENCES:
            SUBSTITUTED.add(self.name)
            _REFERENCE_LAUNCHES[0] += 1
            return self.reference_kernel()
        raise KernelTodo(self.name, self.file, self.guide)

    def __getitem__(self, grid):
        return self.resolve()[grid]


def student_kernel(name: str, *, reference: str, guide: str):
    """Declare an unwritten kernel: keep its signature and docstring, launch nothing."""
    def wrap(fn):
        kernel = TodoKernel(fn, name, reference, guide)
        TODO_KERNELS[name] = kernel
        return kernel
    return wrap


def parse_kernel_list(spec: str | None) -> set[str]:
    return {n.strip() for n in (spec or "").split(",") if n.strip()}


def allow_references(spec: str | None, folder_kernels, folder: str = "this folder"):
    """Set the kernels that may fall back to the example's, from ``a,b`` or ``all``; forget past ones.

    Names outside ``folder_kernels`` (the folder's STUDENT_KERNELS) are a UserError.
    """
    ALLOWED_REFERENCES.clear()
    SUBSTITUTED.clear()
    if spec is None:
        return
    names = parse_kernel_list(spec)
    if not names:
        raise UserError("--allow-reference needs kernel names (comma-separated) or 'all'")
    unknown = names - set(folder_kernels) - {"all"}
    if unknown:
        known = ", ".join(folder_kernels) if folder_kernels else "none (it has no student kernels)"
        raise UserError(f"--allow-reference: unknown kernel(s) {', '.join(sorted(unknown))}; "
                        f"the kernels of {folder} are: {known}")
    ALLOWED_REFERENCES.update(names)


def substituted() -> list[str]:
    """The kernels whose reference ran since the last ``allow_references``, sorted."""
    return sorted(SUBSTITUTED)


# ---------------------------------------------------------------------------------------------
# The self-check table
# ---------------------------------------------------------------------------------------------


def max_errors(out, ref) -> tuple[float, float]:
    """(max |out - ref|, that / max |ref|), in float64; non-finite outputs give inf."""
    import torch

    out, ref = out.double(), ref.double().to(out.device)
    if out.shape != ref.shape:
        raise ValueError(f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if not torch.isfinite(out[torch.isfinite(ref)]).all():
        return math.inf, math.inf
    both = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(out), both) or not torch.equal(out[~both], ref[~both]):
        return math.inf, math.inf  # an -inf (masked) entry where the reference has none, or the other way
    diff = (out[both] - ref[both]).abs()
    abs_err = diff.max().item() if diff.numel() else 0.0
    scale = ref[both].abs().max().item() if diff.numel() else 0.0
    return abs_err, abs_err / max(scale, 1e-30)


@dataclass
class CheckRow:
    """One row of a self-check: what ``SelfCheck.check`` printed, as numbers (for reports)."""

    kernel: str
    status: str  # PASS, FAIL, TODO, or REF (the example's kernel ran in place of an unwritten one)
    abs_err: float | None
    rel_err: float | None
    shape: str
    time_us: float | None  # GPU: median of triton.testing's do_bench; CPU: one call (interpreter/emulator)
    on_gpu: bool
    note: str = ""


_RECORDING: list[SelfCheck] | None = None


@contextlib.contextmanager
def recording_checks():
    """Collect every SelfCheck made inside the block (its ``rows``) and keep ``finish`` from exiting:
    how a report runs a kernel file's ``_self_check()`` and reads its results."""
    global _RECORDING
    outer, _RECORDING = _RECORDING, []
    try:
        yield _RECORDING
    finally:
        _RECORDING = outer


class SelfCheck:
    """Runs kernel checks and prints one row each:

        kernel  result  max abs err  max rel err  shape  time

    ``check`` catches ``KernelTodo``: a course kernel still to write reads TODO, and so does a
    kernel whose launcher needs one (its note says which); a row whose launch ran a reference kernel
    (--allow-reference) reads REF. Call ``finish`` last: it exits 1 when a row failed (TODO rows do
    not fail). ``rows`` keeps every row (``recording_checks`` collects them).

    ``interpret``: the kernels run on the CPU, through ``cpu_runner`` (the title's "CPU (...)"), even
    when a GPU is present. ``decorator`` is the line a finished kernel carries, for the closing hint.
    """

    NAME, SHAPE = 30, 26

    def __init__(self, title: str, interpret: bool, *, cpu_runner: str = "Triton interpreter",
                 decorator: str = "@triton.jit"):
        import torch

        self.on_gpu = torch.cuda.is_available() and not interpret
        self.device = "cuda" if self.on_gpu else "cpu"
        self.title = title
        self.decorator = decorator
        self.counts = {"PASS": 0, "FAIL": 0, "TODO": 0, "REF": 0}
        self.todo: dict[str, KernelTodo] = {}
        self.rows: list[CheckRow] = []
        if _RECORDING is not None:
            _RECORDING.append(self)
        where = f"GPU {torch.cuda.get_device_name()}" if self.on_gpu else f"CPU ({cpu_runner})"
        print(f"{title} self-check on {where}")
        time_head = "time (median)" if self.on_gpu else "time (1 call)"
        print(f"{'kernel':{self.NAME}} {'result':6} {'max abs err':>11} {'max rel err':>11}  "
              f"{'shape':{self.SHAPE}} {time_head:>14}")

    @staticmethod
    def _gpu_us(launch, graph: bool) -> float:
        import triton.testing

        bench = triton.testing.do_bench_cudagraph if graph else triton.testing.do_bench
        return bench(launch) * 1e3

    def check(self, name: str, launch, reference, shape: str, tol: float, *, errors=max_errors,
              graph: bool = False):
        """Run ``launch()`` against ``reference()``; PASS when finite and rel error <= tol."""
        references_before = _REFERENCE_LAUNCHES[0]
        start = time.perf_counter()
        try:
            out = launch()
        except KernelTodo as todo:
            self.todo[todo.kernel] = todo
            note = "" if todo.kernel == name else f"needs {todo.kernel}"
            self._row(CheckRow(name, "TODO", None, None, shape, None, self.on_gpu, note), "")
            return
        self._sync()
        seconds = time.perf_counter() - start
        abs_err, rel_err = errors(out, reference())
        status = "PASS" if math.isfinite(rel_err) and rel_err <= tol else "FAIL"
        note = "" if status == "PASS" else f"tolerance {tol:.0e}"
        if status == "PASS" and _REFERENCE_LAUNCHES[0] > references_before:
            status, note = "REF", "the example's kernel ran (--allow-reference)"
        if self.on_gpu:
            us = self._gpu_us(launch, graph)
            timing = f"{us:11.1f} us" + (" (graph)" if graph else "")
        else:
            us = seconds * 1e6
            timing = f"{seconds * 1e3:11.1f} ms"
        self._row(CheckRow(name, status, abs_err, rel_err, shape, us, self.on_gpu, note), timing)

    def _sync(self):
        import torch

        if self.on_gpu:
            torch.cuda.synchronize()

    def _row(self, row: CheckRow, timing: str):
        self.rows.append(row)
        self.counts[row.status] += 1
        fmt = (lambda v: f"{'-':>11}" if v is None else f"{v:11.3e}")
        line = (f"{row.kernel:{self.NAME}} {row.status:6} {fmt(row.abs_err)} {fmt(row.rel_err)}  "
                f"{row.shape:{self.SHAPE}} {timing:>14}")
        print((line + ("  " + row.note if row.note else "")).rstrip(), flush=True)

    def finish(self):
        c = self.counts
        print(f"{c['PASS']} passed, {c['FAIL']} failed, {c['TODO']} TODO"
              + (f", {c['REF']} on reference kernels" if c["REF"] else ""))
        for todo in self.todo.values():
            print(f"  to write: {todo.kernel} in {todo.file} (guide: {todo.guide})")
        if self.todo:
            print(f"Write a kernel's body, replace its @student_kernel(...) line with {self.decorator}, "
                  "run this again.")
        if c["FAIL"] and _RECORDING is None:
            raise SystemExit(1)
