"""What the student templates need beyond their kernels: TODO stand-ins and reference substitution.

In a template, each kernel a student writes is declared as

    @student_kernel("rmsnorm_kernel", reference="glm_asr_triton_example.layers", guide="docs/guide-triton.md#rmsnorm_kernel")
    def rmsnorm_kernel(x_ptr, ...):
        \"\"\"formula, shapes, grid, hint\"\"\"

Launching it (``rmsnorm_kernel[grid](...)``) raises ``KernelTodo`` naming the kernel, its file and
the guide section, unless the run allowed the kernel a reference (``--allow-reference``): then the
example's kernel runs in its place and the run's ``References`` records it, so results can say so. A student finishes a kernel by writing its body and replacing the decorator with
``@triton.jit``.

``KernelTodo`` is a ``UserError``: the command-line tools print it as one line and exit 2.

Self-checks (glm_asr_course.kernels.self_check) read a KernelTodo as a TODO row and count reference launches
(``reference_launches``) to mark a row REF.

A run makes its own ``References`` (``references_for``), keeps it (a command's Session) and makes it the
one that launches in its thread see (``References.active``, or ``use``): a context variable, since a
launch is ``kernel[grid](...)`` and takes no extra argument. So two runs in one process, such as two
browser tabs of the demo, never share the allowed kernels or the record of substitutions.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path

from glm_asr_course.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class References:
    """One run's reference substitutions: the unwritten kernels allowed the example's kernel (names, or
    "all"), those whose reference ran, and how many launches references served."""

    allowed: frozenset[str] = frozenset()
    used: set[str] = field(default_factory=set)
    launches: int = 0

    def substituted(self) -> list[str]:
        """The kernels whose reference ran in this run, sorted."""
        return sorted(self.used)

    @contextlib.contextmanager
    def active(self):
        """Make these the references that launches in this thread (and context) see, inside the block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


# The references of the run in progress in this context; none allowed outside any run.
_ACTIVE: contextvars.ContextVar[References | None] = contextvars.ContextVar("references", default=None)


class KernelTodo(UserError, NotImplementedError):
    """A template kernel that has not been written yet was launched."""

    def __init__(self, kernel: str, file: str, guide: str):
        self.kernel, self.file, self.guide = kernel, file, guide
        super().__init__(f"{kernel} in {file} is a TODO: write it (see {guide}), or run with "
                         f"--allow-reference {kernel} to use the example's kernel meanwhile (--allow-reference "
                         "all: the example's kernel for every unwritten one)")


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
    (glm_asr_course.runtimes.cutile.launch) calls ``resolve()``."""

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
        """The kernel to launch in this one's place: the example's, when the active run allowed the kernel
        a reference (its References record the substitution); otherwise a ``KernelTodo``."""
        references = _ACTIVE.get()
        if references is not None and ("all" in references.allowed or self.name in references.allowed):
            references.used.add(self.name)
            references.launches += 1
            return self.reference_kernel()
        raise KernelTodo(self.name, self.file, self.guide)

    def __getitem__(self, grid):
        return self.resolve()[grid]


def student_kernel(name: str, *, reference: str, guide: str):
    """Declare an unwritten kernel: keep its signature and docstring, launch nothing."""
    def wrap(fn):
        return TodoKernel(fn, name, reference, guide)
    return wrap


def parse_kernel_list(spec: str | None) -> set[str]:
    return {n.strip() for n in (spec or "").split(",") if n.strip()}


def references_for(spec: str | None, folder_kernels, folder: str = "this folder") -> References:
    """A run's References from ``--allow-reference``: ``a,b``, ``all``, or None (no kernel allowed).

    Names outside ``folder_kernels`` (the folder's STUDENT_KERNELS) are a UserError.
    """
    if spec is None:
        return References()
    names = parse_kernel_list(spec)
    if not names:
        raise UserError("--allow-reference needs kernel names (comma-separated) or 'all'")
    unknown = names - set(folder_kernels) - {"all"}
    if unknown:
        known = ", ".join(folder_kernels) if folder_kernels else "none (it has no student kernels)"
        raise UserError(f"--allow-reference: unknown kernel(s) {', '.join(sorted(unknown))}; "
                        f"the kernels of {folder} are: {known}")
    return References(frozenset(names))


def use(references: References):
    """Make ``references`` the active ones in this context from here on: a command-line run's, which
    lasts until its process ends or the next run's replace them (``References.active`` bounds them to a
    block instead)."""
    _ACTIVE.set(references)


def reference_launches() -> int:
    """How many launches a reference kernel has served in the active run so far: a check that saw the
    count move ran the example's kernel, not the student's."""
    references = _ACTIVE.get()
    return 0 if references is None else references.launches
