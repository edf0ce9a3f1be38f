"""The grader's comparison: a student's folder against the course's solution, in one run.

    ./benchmark.sh glm_asr_triton_template --compare [--report DIR] [--solution FOLDER]

Two kinds of rows, both measured in this process on the same device:

  kernels     every row of the self-checks of the files that hold the course kernels (layers.py,
              attention.py, rope.py), run once in the student's folder and once in the solution's:
              status (PASS / FAIL / TODO / REF), max relative error against torch, time. The shapes
              are the self-checks' own: the model's real sizes on a GPU, small ones on a CPU.
  end to end  the student's transcription (as timed by benchmark_student) beside the solution's
              course path (the baseline: the same kernels, written by the course), the solution's
              fast path (fused production kernels) and transformers, each on the same checkpoint,
              inputs and precision; ids compared with transformers' (or with the baseline's). Where a
              TODO kernel stopped the student's transcription, the report is still written: the
              student's row is missing and the summary names the kernel.

The report leads with the student's verdict (glm_asr_course/verdict.py): on a real checkpoint the
transcript's status, on random weights (the tiny checkpoint, --random-weights) whether the ids equal
transformers' in IEEE fp32.

The report (Markdown and JSON, plus a roofline plot when matplotlib is installed) follows the course
rubric: implementation summary, profiling, bottleneck analysis, optimisation attempts (the student
writes that section), comparison with the baseline. Whole-transcription FLOPs and bytes come from
glm_asr_lab.measure.roofline, against the device's measured peaks, so every row carries the same floor.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import io
import json
from dataclasses import asdict
from pathlib import Path

from glm_asr_lab.measure import plots, roofline
from glm_asr_course.timer import spread
from glm_asr_course.kernels import self_check
from glm_asr_course.kernels import todo_kernels
from glm_asr_course.command_line import release, time_runs
from glm_asr_course.errors import UserError
from glm_asr_course.tracks import import_track, kernel_language, track_folders, track_paths

# A row is flagged in the bottleneck analysis when it is this much slower than the solution's.
SLOWER_FLAG = 1.25


def solution_folder(folder: str, requested: str | None) -> str:
    """The folder a student's is graded against: --solution, else the example of the folder's kernel
    language (tracks.kernel_language: a Triton folder → glm_asr_triton_example, a cuTile one →
    glm_asr_cutile_example)."""
    folders = track_folders()
    if requested is not None:
        name = Path(requested.rstrip("/")).name
        if name not in folders:
            raise UserError(f"--solution {requested}: not a model folder; choose one of: {', '.join(folders)}")
        return name
    example = f"glm_asr_{kernel_language(folder)}_example"
    if example in folders:
        return example
    raise UserError(f"--compare: no solution folder for {folder}; name one with --solution FOLDER")


def kernel_rows(folder: str | self_check.Track, kernels=None, log=None) -> list[dict]:
    """Every case of the folder's course kernels (glm_asr_course.kernels.kernel_cases), or of ``kernels``
    only, run quietly as the kernel files' self-checks run them; one dict per row, with its file.
    ``folder``: a track folder's name, or its self_check.Track. ``log``: told each file's counts as it ends
    (in an interpreter a file takes seconds)."""
    track = self_check.load_track(folder) if isinstance(folder, str) else folder
    rows = []
    for stem in ("layers", "attention", "rope"):
        with self_check.recording_checks(), contextlib.redirect_stdout(io.StringIO()):
            check = self_check.run_cases(track, stem, kernels)
        rows += [dict(asdict(row), file=f"{stem}.py") for row in check.rows]
        if log is not None:
            counts = ", ".join(f"{n} {status}" for status, n in check.counts.items() if n)
            log(f"[compare]   {track.package}/{stem}.py: {counts or 'no rows'}")
    return rows


def unfinished_run(todo: todo_kernels.KernelTodo) -> dict:
    """benchmark_student's result for a transcription that a TODO kernel stopped: no runs, no ids."""
    return {"runs_ms": [], "token_ids": [], "transcription": None, "status": "NOT RUN",
            "verdict": f"not run: {todo}", "unwritten_kernel": todo.kernel}


def e2e_row(label: str, what: str, runs: list[float], tokens: list[int]) -> dict:
    times = spread(runs)
    return {"label": label, "what": what, **times, "tokens": len(tokens),
            "ms_per_token": times["mean_ms"] / max(len(tokens), 1), "token_ids": tokens}


def measure_others(session, solution: str, log=print) -> list[dict]:
    """The solution's course and fast paths and transformers, one model in memory at a time."""
    rows = []
    ckpt, device = session.checkpoint, session.device
    for path in ("course", "fast"):
        if path not in track_paths(solution):
            continue
        module = import_track(solution, path, device)
        log(f"[compare] {solution} {path} path: loading and timing")
        model = module.load_model(ckpt.config, ckpt.weights, device, session.precision)
        label = "course baseline" if path == "course" else "fast path"
        rows.append(e2e_row(label, f"{solution} ({path} path)", *time_runs(model, session.inputs, session.options, device)))
        del model
        release(device)
    if importlib.util.find_spec("transformers") is None:
        log("[compare] transformers is not installed: no transformers row")
        return rows
    from glm_asr_course.reference.hf_model import HFTrack, raw_config

    log("[compare] transformers: loading and timing")
    model = HFTrack(raw_config(session.options.model, session.options.random_weights), ckpt.weights, ckpt.config,
                    device, session.precision)
    rows.append(e2e_row("transformers", "GlmAsrForConditionalGeneration (sdpa)",
                        *time_runs(model, session.inputs, session.options, device, streams_tokens=False)))
    del model
    release(device)
    return rows


def pair_kernel_rows(student: list[dict], solution: list[dict]) -> list[dict]:
    """Rows side by side, matched by file, kernel and case (a template's rows are the example's)."""
    theirs = {(r["file"], r["kernel"], r["guards"]): r for r in solution}
    paired = []
    for mine in student:
        ref = theirs.get((mine["file"], mine["kernel"], mine["guards"]), {})
        timed = mine["time_us"] and ref.get("time_us") and mine["status"] in ("PASS", "REF")
        paired.append(dict(mine, solution_status=ref.get("status"), solution_time_us=ref.get("time_us"),
                           time_ratio=mine["time_us"] / ref["time_us"] if timed else None))
    return paired


def compare(session, requested_solution: str | None, student: dict, log=print) -> dict:
    """Measure everything; returns the report's dict. ``requested_solution``: --solution, or None;
    ``student``: benchmark_student's result (or unfinished_run's)."""
    folder = session.folder.rstrip("/").split("/")[-1]
    solution = solution_folder(folder, requested_solution)
    log(f"[compare] kernel self-checks: {folder} against {solution}")
    kernels = self_check.load_track(folder).student_kernels
    student_kernels = kernel_rows(folder, log=log)
    # The solution's rows must not run on reference substitutions meant for the student's folder.
    with todo_kernels.References().active():
        solution_kernels = kernel_rows(solution, log=log)
    rows = [e2e_row("student", f"{folder} ({session.path} path)", student["runs_ms"], student["token_ids"])
            ] if student["runs_ms"] else []
    rows += measure_others(session, solution, log)
    peaks = roofline.device_peaks(session.device, log=lambda *_: None)
    for row in rows:
        add_floor(row, roofline_floor(session, row["tokens"], peaks))
    header = dict(run_header(session), folder=folder, solution=solution, substituted_kernels=session.references.substituted())
    return assemble_report(header, student, kernels, pair_kernel_rows(student_kernels, solution_kernels), rows,
                           peaks_summary(peaks, session.precision.name))


def run_header(session) -> dict:
    """What a report says of the run it measured: when, where, path, precision, model and audio."""
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "path": session.path,
            "device": roofline.device_name(session.device), "precision": session.precision.name,
            "precision_description": session.precision_description, "model": session.checkpoint.description,
            "audio_seconds": session.audio_seconds, "cpu_defaults": session.cpu_defaults}


def roofline_floor(session, tokens: int, peaks) -> dict:
    """The roofline floor (flops, bytes, floor_ms) of one transcription of the session's inputs making
    ``tokens`` tokens, in its precision, at the measured ``peaks``."""
    return roofline.transcription_floor(session.checkpoint.config, session.inputs, tokens, session.precision.name,
                                        peaks)


def add_floor(row: dict, floor: dict):
    """An end-to-end row with its roofline floor (roofline_floor's dict) and the throughput it reached."""
    seconds = row["mean_ms"] / 1000
    row.update(floor, tflops=floor["flops"] / seconds / 1e12, gbps=floor["bytes"] / seconds / 1e9,
               floor_fraction=floor["floor_ms"] / row["mean_ms"])


def peaks_summary(peaks, precision: str) -> dict:
    """The device's measured peaks as a report shows them, the matmul peak the one of ``precision``."""
    return {"copy_gbps": peaks.bandwidth / 1e9, "matmul_tflops": peaks.flops_for(precision) / 1e12,
            "description": peaks.describe()}


def assemble_report(header: dict, student: dict, student_kernels, kernels: list[dict], rows: list[dict],
                    peaks: dict) -> dict:
    """The report's dict from what was measured, wherever it was: ``header`` (run_header's, with folder,
    solution and substituted_kernels), the student's result, the names of the course kernels, the
    kernel rows side by side (pair_kernel_rows) and the end-to-end rows with their floors (add_floor).
    The ids of every row are compared with transformers' row, else the course baseline's."""
    reference = next((r for r in rows if r["label"] == "transformers"),
                     next((r for r in rows if r["label"] == "course baseline"), None))
    for row in rows:
        row["ids_equal_reference"] = None if reference is None else row["token_ids"] == reference["token_ids"]
    return {
        **header, "status": student["status"], "verdict": student["verdict"],
        "transcription": student["transcription"], "unwritten_kernel": student.get("unwritten_kernel"),
        "ids_equal_transformers_fp32": student.get("ids_equal_transformers_fp32"),
        "first_difference_at_token": student.get("first_difference_at_token"),
        "reference_label": None if reference is None else reference["label"],
        "student_kernels": list(student_kernels), "kernels": kernels, "end_to_end": rows, "peaks": peaks,
    }


# ---------------------------------------------------------------------------------------------
# Writing the report
# ---------------------------------------------------------------------------------------------


def time_unit(values) -> tuple[str, float]:
    """One unit for a table's columns of µs values, and its factor: ms where one reaches 10 ms, else us."""
    known = [v for v in values if v is not None]
    return ("ms", 1e-3) if known and max(known) >= 10_000 else ("us", 1.0)


def _in_unit(value, factor: float) -> str:
    return "-" if value is None else f"{value * factor:.1f}"


def _err(row) -> str:
    """A row's error against its limit, in the unit its case judges by (rel, abs, bf16 mismatch)."""
    return "-" if row["error"] is None else f"{row['error']:.2e} / {row['limit']:.0e} {row['unit']}"


def kernel_status(rows: list[dict]) -> dict[str, str]:
    """Each kernel's status over its cases: FAIL if any case failed, else TODO, else REF, else PASS."""
    status = {}
    for r in rows:
        order = ("FAIL", "TODO", "REF", "PASS")
        previous = status.get(r["kernel"], "PASS")
        status[r["kernel"]] = min(previous, r["status"], key=order.index)
    return status


def pipe_table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table, which reads as well in a terminal."""
    return "\n".join("| " + " | ".join(map(str, cells)) + " |" for cells in [headers, ["---"] * len(headers)] + rows)


def kernel_table(report: dict) -> str:
    unit, factor = time_unit([r[k] for r in report["kernels"] for k in ("time_us", "solution_time_us")])
    return pipe_table(["file", "kernel", "guards against", "shape", "status", "error / limit", f"time ({unit})",
                       f"solution ({unit})", "student / solution"],
                      [[r["file"], f"`{r['kernel']}`", r["guards"], r["shape"], r["status"], _err(r),
                        _in_unit(r["time_us"], factor), _in_unit(r["solution_time_us"], factor),
                        "-" if r["time_ratio"] is None else f"{r['time_ratio']:.2f}x"]
                       for r in report["kernels"]])


def e2e_table(report: dict) -> str:
    same = {None: "-", True: "yes", False: "**no**"}
    return pipe_table(["run", "what", "time (ms)", "ms/token", "tokens",
                       f"ids = {report['reference_label'] or 'reference'}", "TFLOP/s", "GB/s", "floor / time"],
                      [[r["label"], r["what"],
                        f"{r['mean_ms']:.1f}" + (f" ± {r['std_ms']:.1f}" if len(r["runs_ms"]) > 1 else ""),
                        f"{r['ms_per_token']:.2f}", r["tokens"], same[r["ids_equal_reference"]], f"{r['tflops']:.3g}",
                        f"{r['gbps']:.3g}", f"{r['floor_fraction'] * 100:.2g} %"] for r in report["end_to_end"]])


def bottlenecks(report: dict) -> list[str]:
    """Plain sentences: what failed, what is missing, what is much slower than the solution."""
    notes = []
    per_kernel = kernel_status(report["kernels"])
    by_status = {s: [k for k, v in per_kernel.items() if v == s] for s in ("FAIL", "TODO", "REF")}
    if by_status["FAIL"]:
        notes.append(f"Wrong results (fix these first): {', '.join(by_status['FAIL'])}.")
    if by_status["TODO"]:
        notes.append(f"Not written yet: {', '.join(by_status['TODO'])}.")
    if by_status["REF"]:
        notes.append(f"Ran the example's kernels (--allow-reference), so their times are the solution's: "
                     f"{', '.join(by_status['REF'])}.")
    slow = sorted((r for r in report["kernels"] if r["on_gpu"] and r["time_ratio"] and r["time_ratio"] > SLOWER_FLAG
                   and r["status"] == "PASS"), key=lambda r: -r["time_ratio"])
    for r in slow:
        notes.append(f"`{r['kernel']}` ({r['shape']}) takes {r['time_ratio']:.2f}x the solution's time.")
    rows = {r["label"]: r for r in report["end_to_end"]}
    if "student" not in rows and report["unwritten_kernel"] is None:
        notes.append(f"No end-to-end numbers of yours: {report['verdict']}.")
        return notes
    if "student" not in rows:
        notes.append(f"No end-to-end numbers of yours: the transcription stopped at `{report['unwritten_kernel']}`, "
                     "a TODO; write it, or stand it in with --allow-reference to time the rest.")
        return notes
    mine = rows["student"]
    peaks = report["peaks"]
    notes.append(f"The whole transcription reaches {mine['floor_fraction'] * 100:.2g} % of its roofline floor "
                 f"({mine['floor_ms']:.3g} ms: {mine['flops'] / 1e9:.3g} GFLOP and {mine['bytes'] / 1e6:.3g} MB "
                 f"at the measured peaks, {peaks['matmul_tflops']:.3g} TFLOP/s and {peaks['copy_gbps']:.0f} GB/s).")
    if "course baseline" in rows:
        base = rows["course baseline"]
        notes.append(f"Against the course baseline: {base['mean_ms'] / mine['mean_ms']:.2f}x its speed "
                     f"({mine['mean_ms']:.1f} ms vs {base['mean_ms']:.1f} ms).")
    if not any(r["on_gpu"] for r in report["kernels"]):
        notes.append("The kernels ran on a CPU (interpreter or emulator): their times and ratios say nothing about "
                     "a GPU. Run the comparison on a GPU for the numbers to grade.")
    return notes


def headline(report: dict) -> str:
    """The end-to-end verdict the report leads with (glm_asr_course/verdict.py)."""
    return f"End to end ({report['path']} path): {report['verdict']}"


def kernel_counts(report: dict) -> str:
    """How many of the student's course kernels pass (every case), fail (a case), are TODO or stood in for."""
    per_kernel = kernel_status([r for r in report["kernels"] if r["kernel"] in report["student_kernels"]])
    counts = {s: sum(v == s for v in per_kernel.values()) for s in ("PASS", "FAIL", "TODO", "REF")}
    return (f"Course kernels (every case of their self-checks): {counts['PASS']} pass, {counts['FAIL']} fail, "
            f"{counts['TODO']} to write, {counts['REF']} on the example's kernel.")


def markdown(report: dict, plot: str | None) -> str:
    kernels = report["kernels"]
    on_gpu = any(r.get("on_gpu") for r in kernels)
    where = "GPU: median times" if on_gpu else "CPU: one call each in the interpreter or emulator, not kernel times"
    transcript = ("" if report["transcription"] is None else
                  f" Status: {report['status']}; transcription: \"{report['transcription']}\".")
    parts = [
        f"# Kernel report: {report['folder']}",
        "",
        f"{report['date']} · {report['device']} · precision {report['precision']} ({report['precision_description']})"
        f" · {report['model']} · {report['audio_seconds']:.1f} s of audio · graded against {report['solution']}"
        + (f" · {report['cpu_defaults']}" if report["cpu_defaults"] else ""),
        "",
        "## 1. Implementation summary",
        "",
        f"**{headline(report)}**",
        "",
        kernel_counts(report) + transcript,
        "",
        "## 2. Profiling",
        "",
        f"Each kernel file's self-check, in the student's folder and in the solution's ({where}).",
        "",
        kernel_table(report),
        "",
        "For a per-operator profile of the whole model: `./benchmark_detailed.sh FOLDER` (times by component,"
        " kernel tables, roofline of every operator class).",
        "",
        "## 3. Bottleneck analysis",
        "",
        *[f"- {note}" for note in bottlenecks(report)],
        "",
        "## 4. Optimisation attempts",
        "",
        "_Student: what you changed, what you predicted from the roofline, what you measured before and after"
        " (keep the reports of each attempt)._",
        "",
        "## 5. Comparison with the baseline",
        "",
        e2e_table(report),
        "",
        "Floor: the longer of two times, the transcription's FLOPs at the device's measured matmul peak and its "
        "minimum bytes at the measured copy bandwidth (glm_asr_lab/measure/roofline.py: "
        f"{report['peaks']['description']}); `floor / time` is the fraction of that bound reached.",
    ]
    if plot:
        parts += ["", f"![roofline]({plot})"]
    return "\n".join(parts) + "\n"


def write_report(report: dict, out_dir: str) -> Path:
    """report.md, report.json and roofline.png into ``out_dir`` (created); returns the Markdown path."""
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the report folder {out_dir}: {e.strerror}") from None
    plot = "roofline.png" if plots.run_roofline(report, directory / "roofline.png") else None
    (directory / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (directory / "report.md").write_text(markdown(report, plot))
    return directory / "report.md"


def print_summary(report: dict):
    """The report's verdict and its two tables, as the Markdown has them, for the terminal."""
    print("=" * 60)
    print(f"COMPARISON: {report['folder']} against {report['solution']}")
    print("=" * 60)
    print("\n\n".join([headline(report) + "\n" + kernel_counts(report), kernel_table(report), e2e_table(report)]))
