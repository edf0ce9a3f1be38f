"""A kernel file's self-check: one printed row per case, PASS / FAIL / TODO / REF, and an exit code.

    python glm_asr_triton_example/layers.py                  every case of the file's course kernels
    python glm_asr_triton_example/layers.py gelu_kernel      one kernel's cases
    ./benchmark.sh glm_asr_triton_example --self-check [KERNEL|FILE ...]   every kernel file in turn (check_folder)

The course kernels' files (layers.py, attention.py, rope.py of either track, and their templates) and
glue.py end with ``self_check.main(__file__)``: the cases come from glm_asr_course.kernels.kernel_cases,
the one table that pytest and the grader run too. The other kernel files (conv.py, whose weight
layout is the track's own, and the fast path) build a ``SelfCheck`` and call ``check`` with their
own launches.

A row is:

    kernel  result  error / limit  shape  time  the mistake the case guards against

TODO: the kernel (or one the case needs) is still a template stand-in. FAIL: over the limit, a
non-finite or unwritten element (outputs start as NaN), or the launch raised: a compile, emulator
or interpreter error becomes the row's one-line note and the next case still runs. REF: the
example's kernel ran in place of an unwritten one (--allow-reference). The run exits 1 unless
every row passed, and says why.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import importlib
import math
import re
import statistics
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from glm_asr_course.timer import mark, ms_between, time_launches, time_repeats
from glm_asr_course.kernels import todo_kernels
from glm_asr_course.model import launch_contracts
from glm_asr_course.model.course_model import TrackOps, track_ops
from glm_asr_course.kernels.kernel_cases import CASES, Close, Inputs, Verdict
from glm_asr_course.runtimes import triton_interpreter
from glm_asr_course.tracks import add_track_root, import_folder, kernel_language, track_directory, track_name

# The SelfChecks made inside recording_checks' block, in this context (a report's run of a kernel file's
# self-check), or None outside one.
_RECORDING: contextvars.ContextVar[list | None] = contextvars.ContextVar("recording", default=None)

# A GPU row's time: the median of GPU_REPEATS timed launches after GPU_WARMUP untimed ones (compiling,
# autotuning), each after an L2 flush and replayed from a CUDA graph (timer.time_launches: the kernels' time,
# not the host's launch; "(launched)" where the launch cannot be captured); a back-to-back row replays
# GRAPH_LAUNCHES launches in one graph, warm, for kernels shorter than a flush.
GPU_WARMUP, GPU_REPEATS, GRAPH_LAUNCHES = 5, 50, 20


@dataclass
class CheckRow:
    """One printed row, as numbers (for reports)."""

    kernel: str
    guards: str  # what the case is there to catch
    status: str  # PASS, FAIL, TODO, or REF (the example's kernel ran in place of an unwritten one)
    error: float | None
    limit: float | None
    unit: str  # rel, abs, mismatch (share of bf16 elements that differ)
    shape: str
    time_us: float | None  # GPU: median of glm_asr_course.timer's repeats (model-size cases); CPU: one call
    on_gpu: bool
    note: str = ""


@contextlib.contextmanager
def recording_checks():
    """Collect every SelfCheck made inside the block (its ``rows``) and keep ``finish`` from exiting:
    how a report runs a kernel file's self-check and reads its results."""
    recorded = []
    token = _RECORDING.set(recorded)
    try:
        yield recorded
    finally:
        _RECORDING.reset(token)


@contextlib.contextmanager
def poisoned_outputs(package_dir: Path):
    """Float tensors that the package's launchers allocate (torch.empty / empty_like called from a file
    of ``package_dir``, or from the launch contracts they share) start as NaN, so an element a kernel
    never writes fails its check."""
    empty, empty_like = torch.empty, torch.empty_like
    package_dir = package_dir.resolve()
    contracts = Path(launch_contracts.__file__).resolve()

    def from_package():
        caller = Path(sys._getframe(2).f_code.co_filename).resolve()
        return caller.parent == package_dir or caller == contracts

    def poison(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    torch.empty = lambda *a, **k: poison(empty(*a, **k)) if from_package() else empty(*a, **k)
    torch.empty_like = lambda *a, **k: poison(empty_like(*a, **k)) if from_package() else empty_like(*a, **k)
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def one_line(error: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:160]}" if text else type(error).__name__


def errors_as_close(errors, tol: float):
    """A judge from an (abs, rel) error function: passes when rel <= tol."""
    def judge(out, ref) -> Verdict:
        _, rel = errors(out, ref)
        return Verdict(math.isfinite(rel) and rel <= tol, rel, tol)
    judge.unit = "rel"
    return judge


class SelfCheck:
    """Runs checks and prints one row each; ``finish`` prints the totals and exits 1 unless every row
    passed (not inside ``recording_checks``). ``rows`` keeps every row.

    ``interpret``: the kernels run on the CPU through ``cpu_runner`` even when a GPU is present.
    ``decorator`` is the line a finished kernel carries, for the closing hint.
    """

    NAME, SHAPE = 24, 30

    def __init__(self, title: str, interpret: bool, *, cpu_runner: str = "Triton interpreter",
                 decorator: str = "@triton.jit"):
        if decorator == "@triton.jit":
            interpret = triton_interpreter.start_script() or interpret
        self.on_gpu = torch.cuda.is_available() and not interpret
        self.device = "cuda" if self.on_gpu else "cpu"
        self.title = title
        self.decorator = decorator
        self.counts = {"PASS": 0, "FAIL": 0, "TODO": 0, "REF": 0}
        self.todo: dict[str, todo_kernels.KernelTodo] = {}
        self.rows: list[CheckRow] = []
        if _RECORDING.get() is not None:
            _RECORDING.get().append(self)
        where = f"GPU {torch.cuda.get_device_name()}" if self.on_gpu else f"CPU ({cpu_runner})"
        print(f"{title} self-check on {where}")
        time_head = "time (median)" if self.on_gpu else "time (1 call)"
        print(f"{'kernel':{self.NAME}} {'result':6} {'error':>9} / {'limit':<9} {'shape':{self.SHAPE}} "
              f"{time_head:>14}  guards against")

    def check(self, name: str, launch, reference, shape: str, tol: float = 0.0, *, judge=None, errors=None,
              guards: str = "", graph: bool = False, package_dir: Path | None = None, timed: bool = True):
        """Run ``launch()`` and judge it against ``reference()``: by ``judge`` (a kernel_cases judge),
        else by ``errors`` ((abs, rel) of out and ref) against ``tol``, else max relative error <= tol."""
        judge = judge or (errors_as_close(errors, tol) if errors else Close(tol))
        references_before = todo_kernels.reference_launches()
        start = mark("cpu")  # a CPU row's time: its one call, on the host clock
        try:
            with poisoned_outputs(package_dir) if package_dir else contextlib.nullcontext():
                out = launch()
            self._sync()
        except todo_kernels.KernelTodo as todo:
            self.todo[todo.kernel] = todo
            note = "" if todo.kernel == name else f"needs {todo.kernel}"
            self._row(CheckRow(name, guards, "TODO", None, None, judge.unit, shape, None, self.on_gpu, note), "")
            return
        except Exception as error:  # a kernel that does not compile or run is a failed row, not a stop
            self._row(CheckRow(name, guards, "FAIL", None, None, judge.unit, shape, None, self.on_gpu,
                               one_line(error)), "")
            return
        seconds = ms_between(start, mark("cpu")) / 1000
        verdict = judge(out, reference())
        status = "PASS" if verdict.passed else "FAIL"
        note = verdict.reason
        if status == "PASS" and todo_kernels.reference_launches() > references_before:
            status, note = "REF", "the example's kernel ran (--allow-reference)"
        us, timing = None, ""
        if self.on_gpu and timed:
            us, how = self._gpu_us(launch, graph)
            timing = f"{us:11.1f} us" + (f" ({how})" if how != "graph" else "")
        elif not self.on_gpu:
            us, timing = seconds * 1e6, f"{seconds * 1e3:11.1f} ms"
        self._row(CheckRow(name, guards, status, verdict.error, verdict.limit, judge.unit, shape, us, self.on_gpu,
                           note), timing)

    @staticmethod
    def _gpu_us(launch, back_to_back: bool) -> tuple[float, str]:
        """Median µs of a launch and how it was timed: "graph" (a replay after an L2 flush), "launched" (it
        could not be captured), or ``back_to_back`` "back to back" (GRAPH_LAUNCHES replayed in one graph)."""
        if not back_to_back:
            times, timing = time_launches(launch, "cuda", warmup=GPU_WARMUP, repeats=GPU_REPEATS)
            return statistics.median(times) * 1e3, "graph" if timing == "graph" else "launched"

        def launches():
            for _ in range(GRAPH_LAUNCHES):
                launch()

        return statistics.median(time_repeats(launches, "cuda", warmup=GPU_WARMUP, repeats=GPU_REPEATS,
                                              graph=True)) * 1e3 / GRAPH_LAUNCHES, "back to back"

    def _sync(self):
        if self.on_gpu:
            torch.cuda.synchronize()

    def _row(self, row: CheckRow, timing: str):
        self.rows.append(row)
        self.counts[row.status] += 1
        error = f"{'-':>9}" if row.error is None else f"{row.error:9.2e}"
        limit = f"{'-':<9}" if row.limit is None else f"{row.limit:<9.0e}"
        line = (f"{row.kernel:{self.NAME}} {row.status:6} {error} / {limit} {row.shape:{self.SHAPE}} "
                f"{timing:>14}  {row.guards}")
        print(line.rstrip() + (f"  [{row.note}]" if row.note else ""), flush=True)

    def finish(self) -> int:
        """Print the totals; 0 when every row passed, else 1 (and exit with it outside a recording)."""
        c = self.counts
        print(f"{c['PASS']} passed, {c['FAIL']} failed, {c['TODO']} TODO"
              + (f", {c['REF']} on reference kernels" if c["REF"] else ""))
        for todo in self.todo.values():
            print(f"  to write: {todo.kernel} in {todo.file} (guide: {todo.guide})")
        if self.todo:
            print(f"Write a kernel's body, replace its @student_kernel(...) line with {self.decorator}, "
                  "run this again.")
        code = 0 if c["FAIL"] == 0 and c["TODO"] == 0 and self.rows else 1
        if code:
            why = ([f"{c['FAIL']} row(s) failed"] if c["FAIL"] else []) + (
                [f"{c['TODO']} row(s) wait for unwritten kernels"] if c["TODO"] else []) or ["no row ran"]
            print(f"Self-check: NOT PASSED ({'; '.join(why)}): exit 1")
        if code and _RECORDING.get() is None:
            raise SystemExit(code)
        return code


# --------------------------------------------------------------------------------------------------
# The course kernels' files
# --------------------------------------------------------------------------------------------------


@dataclass
class Track:
    """A track package seen by its checks: its operations and how its kernels run here."""

    package: str
    ops: TrackOps  # the launchers, by their shared names
    student_kernels: tuple[str, ...]
    interpret: bool
    cpu_runner: str
    decorator: str

    @property
    def directory(self) -> Path:
        return Path(import_folder(self.package).__file__).resolve().parent


def load_track(package: str) -> Track:
    """A track package (an example, a template, a filled or planted copy) and how its kernels run."""
    root = import_folder(package)  # its __init__.py imports no kernel language
    if kernel_language(Path(root.__file__).parent) == "cutile":
        from glm_asr_course.runtimes.cutile import MODE

        interpret, cpu_runner, decorator = MODE != "gpu", "cuTile emulator", "@ct.kernel"
    else:  # the interpreter is chosen before track_ops defines the track's kernels
        interpret, cpu_runner, decorator = triton_interpreter.start_script(), "Triton interpreter", "@triton.jit"
    return Track(package, track_ops(package), root.STUDENT_KERNELS, interpret, cpu_runner, decorator)


def run_cases(track: Track, file: str | None = None, kernels=None, *, title: str | None = None,
              model_size: bool | None = None) -> SelfCheck:
    """Run the table's cases of ``file`` (default: every file) for ``kernels`` (default: the track's
    course kernels and the compositions of them, encoder_attention and decoder_attention); print the
    rows; return the SelfCheck (``rows``, ``finish``). ``model_size``: also the model-size cases
    (default: on a GPU)."""
    check = SelfCheck(title or file or track.package, track.interpret, cpu_runner=track.cpu_runner,
                      decorator=track.decorator)
    if model_size is None:
        model_size = check.on_gpu
    for case in CASES:
        chosen = applies(case, track) if kernels is None else case.kernel in kernels
        if not chosen or (file is not None and case.file != file) or (case.model_size and not model_size):
            continue
        run_case(check, track, case)
    return check


def applies(case, track: Track) -> bool:
    """Whether a case is the track's: a course kernel it has, or an operation (a composition of the
    course kernels, a piece of glue) every track has."""
    return case.kernel in track.student_kernels or not case.kernel.endswith("_kernel")


def run_case(check: SelfCheck, track: Track, case) -> CheckRow:
    """One case of the table on the track, as a row of ``check``: inputs seeded by the case's name
    (the same in every track and run), outputs poisoned, model-size cases timed on a GPU."""
    launch, reference = case.build(track.ops, Inputs(zlib.crc32(case.id.encode()), check.device))
    check.check(case.kernel, launch, reference, case.shape, judge=case.judge, guards=case.guards,
                package_dir=track.directory, timed=case.model_size)
    return check.rows[-1]


def package_module(script: str):
    """The module of a kernel file run as a script, imported afresh as part of its track folder."""
    path = Path(script).resolve()
    add_track_root(path.parent.parent)  # the file's own folder is the track, wherever it lies
    import_folder(path.parent.name)
    return importlib.import_module(f"{path.parent.name}.{path.stem}")


def main(script: str, argv=None) -> int:
    """The ``__main__`` of a kernel file with cases in the table (the course kernels' files and
    glue.py): its cases, or those of the kernels or operations named on the command line; exits 1
    unless every row passed."""
    path = Path(script).resolve()
    add_track_root(path.parent.parent)  # the file's own folder is the track, wherever it lies
    track = load_track(path.parent.name)
    in_file = list(dict.fromkeys(c.kernel for c in CASES if c.file == path.stem and applies(c, track)))
    parser = argparse.ArgumentParser(prog=f"python {path.parent.name}/{path.name}",
                                     description=f"Self-check of {path.name}: every case of "
                                                 "glm_asr_course/kernels/kernel_cases.py for its kernels.")
    parser.add_argument("kernels", nargs="*", metavar="KERNEL", help=f"only these ({', '.join(in_file)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.kernels) - set(in_file))
    if unknown:
        print(f"error: {', '.join(unknown)} not in {path.name}; its kernels are: {', '.join(in_file)}",
              file=sys.stderr)
        raise SystemExit(2)
    check = run_cases(track, path.stem, args.kernels or None, title=path.name)
    return check.finish()


# --------------------------------------------------------------------------------------------------
# A whole folder: ./benchmark.sh FOLDER --self-check
# --------------------------------------------------------------------------------------------------

COURSE_FILES = ("layers", "attention", "rope", "glue", "conv")  # in the order the course writes them
COUNTS_LINE = re.compile(r"^\d+ passed, \d+ failed, \d+ TODO.*$", re.MULTILINE)


def folder_commands(folder: str, selection=()) -> list[tuple[str, list[str]]]:
    """(file, command) of each self-check of ``folder`` that ``selection`` names (kernels or files; all
    when empty): the course files as ``python FOLDER/FILE.py [KERNEL ...]``, the fast path's files as
    ``python -m FOLDER.fast_x`` (their relative imports need the package). A UserError names the choices
    for a name that is neither."""
    from glm_asr_course.errors import UserError

    name = track_name(folder)
    directory = track_directory(name)
    stems = [s for s in COURSE_FILES if (directory / f"{s}.py").is_file()] + sorted(
        p.stem for p in directory.glob("fast_*.py") if 'if __name__ == "__main__"' in p.read_text())
    if not stems:
        raise UserError(f"{name} has no kernel files with a self-check")
    student_kernels = getattr(import_folder(name), "STUDENT_KERNELS", ())
    kernels_of = {s: [c.kernel for c in CASES if c.file == s and (c.kernel in student_kernels
                                                                   or not c.kernel.endswith("_kernel"))]
                  for s in stems}
    files = {s for s in stems if s in selection or f"{s}.py" in selection}
    kernels = set(selection) - {f for s in files for f in (s, f"{s}.py")}
    unknown = sorted(kernels - {k for ks in kernels_of.values() for k in ks})
    if unknown:
        known = sorted({k for ks in kernels_of.values() for k in ks})
        raise UserError(f"--self-check: {', '.join(unknown)} is neither a kernel nor a kernel file of {name}; "
                        f"kernels: {', '.join(known)}; files: {', '.join(s + '.py' for s in stems)}")
    commands = []
    for stem in stems:
        chosen = list(dict.fromkeys(k for k in kernels_of[stem] if k in kernels))
        if selection and stem not in files and not chosen:
            continue
        script = [f"{name}/{stem}.py"] if stem in COURSE_FILES else ["-m", f"{name}.{stem}"]
        commands.append((f"{stem}.py", [sys.executable, *script, *(chosen if stem not in files else [])]))
    return commands


def check_folder(folder: str, selection=()) -> int:
    """Run the self-checks of ``folder`` (folder_commands) one after the other, their rows as they come;
    then a line per file and the total. 0 when every file passed, else 1."""
    commands = folder_commands(folder, selection)
    results = []
    for file, command in commands:
        shown = " ".join(["python", *command[1:]])
        print(f"== {shown}", flush=True)
        with subprocess.Popen(command, cwd=track_directory(track_name(folder)).parent, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) as child:
            output = []
            for line in child.stdout:
                print(line, end="", flush=True)
                output.append(line)
        counts = COUNTS_LINE.findall("".join(output))
        results.append((file, child.returncode, counts[-1] if counts else f"no result line; run {shown}"))
    print(f"Self-checks of {track_name(folder)}:")
    for file, code, counts in results:
        todo_only = re.match(r"\d+ passed, 0 failed, [1-9]", counts)
        status = "PASS" if code == 0 else "TODO" if todo_only and code == 1 else "FAIL"
        print(f"  {file:20} {status:5} {counts}" + ("" if code in (0, 1) else f" (exit {code})"))
    failed = sum(code != 0 for _, code, _ in results)
    print(f"{len(results) - failed} of {len(results)} files passed" + (f"; {failed} did not: exit 1" if failed else ""))
    return 1 if failed else 0

