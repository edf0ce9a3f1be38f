"""The class's tables, built from the grader's stored results alone: what the local grader writes at
the end and the Slurm collect job writes after the array (class_grading.py).

    grades.csv        one row per student, every column (sortable)
    grades.md         the same rows, a summary, the pass rate of each kernel, the time plot, a legend
    times.png         each timed submission's time, with the baselines and the roofline floor marked
    reports/NAME/     each student's --compare report (compare_report.py), from the same numbers

A student's row is judged here, by the grader, from the facts their worker returned: the rows of
the case table, the check run's ids and text, the timed runs. Status:

    PASS      every case passed and the end-to-end check holds (see ``e2e_decides``)
    FAIL      a case over its limit (or raising), a model run that raised, or ids / transcript wrong
    TODO      a kernel still a template stand-in, nothing wrong
    TIMEOUT   stopped at --time-limit;  CRASH: the worker died, or the submission could not be read
    TAMPERED  its worker changed a file it is judged with or one of the grader's, or its times cannot be
              believed (integrity.py: the grader's clock contradicts them, what times it was replaced,
              a timed run's ids are not its check run's, or a run beat the roofline floor); its
              correctness (the column of that name) is kept, and it is never counted faster
    NOT RUN   no result yet (an interrupted run, a Slurm task that has not written one)

Times are in the table only for submissions whose every case passed (nothing wrong is timed) and
that were not TAMPERED (their times are not believed).
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import Counter
from pathlib import Path

from glm_asr_course.model.course_model import COURSE_KERNELS
from glm_asr_lab.grading import compare_report, integrity
from glm_asr_course.verdict import IdsCheck, transcript_status

STATUS_ORDER = ("PASS", "FAIL", "TODO", "TIMEOUT", "CRASH", "TAMPERED", "NOT RUN")
ROW_TYPES = {"kernel": str, "guards": str, "status": str, "unit": str, "shape": str, "file": str, "note": str}


# ------------------------------------------------------------------------------------------------
# What a worker may return
# ------------------------------------------------------------------------------------------------


def _numbers(values, positive=False) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > 0 or not positive)
        for v in values)


def validated_worker_result(data) -> dict:
    """A worker's result when it has the shape the tables read, else a ValueError saying what is wrong."""
    def need(condition, what):
        if not condition:
            raise ValueError(what)

    need(isinstance(data, dict), "not a JSON object")
    e2e = data.get("e2e")
    need(isinstance(e2e, dict) and e2e.get("status") in ("RUN", "TODO", "ERROR"), "no end-to-end status")
    if e2e["status"] == "RUN":
        ids = e2e.get("token_ids")
        need(isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids), "token ids")
        need(_numbers(e2e.get("runs_ms"), positive=True) and _numbers([e2e.get("check_ms")]), "run times")
        run_ids = e2e.get("run_ids")
        need(isinstance(run_ids, list) and len(run_ids) == len(e2e["runs_ms"]) and all(
            isinstance(r, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in r) for r in run_ids),
            "the timed runs' ids")
        need(isinstance(e2e.get("transcription"), str), "transcription")
    need(isinstance(data.get("replaced"), list) and all(isinstance(r, str) for r in data["replaced"]),
         "what was replaced")
    rows = data.get("rows")
    need(rows is None or isinstance(rows, list) and all(
        isinstance(r, dict) and all(isinstance(r.get(k), t) for k, t in ROW_TYPES.items())
        and r["status"] in ("PASS", "FAIL", "TODO", "REF") and _numbers([x for x in (r.get("error"), r.get("limit"),
                                                                                     r.get("time_us")) if x is not None])
        for r in rows), "kernel rows")
    need(isinstance(data.get("header"), dict) and isinstance(data["header"].get("precision"), str), "header")
    return data


# ------------------------------------------------------------------------------------------------
# Judging one student against the baselines
# ------------------------------------------------------------------------------------------------


def load_records(plan, store) -> dict[str, dict | None]:
    """Every task's stored (sealed) result, by task name; None where there is none."""
    return {task.name: store.read_result(task) for task in plan.tasks}


def worker_of(records: dict, name: str) -> dict | None:
    record = records.get(name)
    return record["worker"] if record and record["status"] == "DONE" else None


def timed(e2e: dict | None) -> tuple[float, float, int] | None:
    """(mean ms, standard deviation ms, runs) of a check run's timed runs; None when not timed."""
    runs = (e2e or {}).get("runs_ms") or []
    if not runs:
        return None
    return statistics.fmean(runs), statistics.stdev(runs) if len(runs) > 1 else 0.0, len(runs)


def kernel_cell(rows: list[dict]) -> str:
    """One kernel's cases in a word: PASS, TODO, or FAIL with the worst error against its limit."""
    status = compare_report.kernel_status(rows)[rows[0]["kernel"]]
    if status != "FAIL":
        return status
    failed = [r for r in rows if r["status"] == "FAIL"]
    measured = [r for r in failed if r["error"] is not None]
    if not measured:
        return "FAIL (raised)"
    worst = max(measured, key=lambda r: r["error"] / r["limit"] if r["limit"] else math.inf)
    if not math.isfinite(worst["error"]):
        return "FAIL (NaN/inf)"
    return f"FAIL {worst['error']:.1e} > {worst['limit']:.0e} {worst['unit']}"


def e2e_decides(plan, worker: dict, ids_course: bool | None, ids_transformers: bool | None) -> tuple[bool | None, str]:
    """Whether the end-to-end run is right, and by what; None where nothing decides. A real checkpoint:
    its transcript (else the ids of the course baseline). Random weights: in IEEE fp32 the ids of
    transformers' fp32 (else of the course baseline); bf16 and TF32 round, which may flip a near-tie
    between tokens of a correct model, so there the ids are shown and do not decide (verdict.py)."""
    e2e = worker["e2e"]
    if not worker.get("random_weights") and plan.expected is not None:
        status, _, wer = transcript_status(e2e["transcription"], plan.expected)
        return status == "PASS", f"transcript WER {wer:.0%}"
    if worker.get("random_weights") and worker["header"]["precision"] != "fp32":
        return None, "ids shown, not held (bf16 / TF32 round)"
    if ids_transformers is not None and worker.get("random_weights"):
        return ids_transformers, "ids = transformers fp32"
    return ids_course, "ids = course baseline"


def student_row(plan, task, records: dict) -> dict:
    """The class table's row of one student, judged from their stored result and the baselines'."""
    record = records.get(task.name)
    row = {"student": task.name, "track": task.track or "", "status": "NOT RUN", "kernels_passed": "",
           "ids_equal_course_baseline": None, "ids_equal_transformers_fp32": None, "transcript_wer": None,
           "time_ms": None, "time_std_ms": None, "timed_runs": None, "grader_clock_ms": None,
           "speedup_vs_course": None, "floor_share": None,
           "correctness": "", "correct_and_faster": False, "note": "no result yet: run the grader again", "log": "",
           "report": "", "graded_seconds": None, "key": task.key, "kernels": {}}
    if record is None:
        return row
    row.update(note=record["note"], log=record["log"], graded_seconds=record["seconds"])
    worker = record["worker"] if record["status"] in ("DONE", "TAMPERED") else None
    if worker is None:
        row["status"] = record["status"]
        row["kernels"] = {k: record["status"] for k in COURSE_KERNELS} if task.track else {}
        return row
    by_kernel = {}
    for case in worker["rows"] or []:
        by_kernel.setdefault(case["kernel"], []).append(case)
    course = COURSE_KERNELS
    row["kernels"] = {k: kernel_cell(by_kernel[k]) if k in by_kernel else "-" for k in course}
    row["kernels_passed"] = f"{sum(row['kernels'][k] == 'PASS' for k in course)}/{sum(k in by_kernel for k in course)}"
    e2e = worker["e2e"]
    baseline = worker_of(records, f"baseline-{task.track}-course")
    transformers = worker_of(records, "baseline-transformers")
    if e2e["status"] == "RUN":
        if baseline and baseline["e2e"]["status"] == "RUN":
            row["ids_equal_course_baseline"] = e2e["token_ids"] == baseline["e2e"]["token_ids"]
        reference = (transformers or {}).get("transformers_fp32", {}).get("ids")
        if reference is not None:
            row["ids_equal_transformers_fp32"] = e2e["token_ids"] == reference
        if not worker.get("random_weights") and plan.expected is not None:
            row["transcript_wer"] = transcript_status(e2e["transcription"], plan.expected)[2]
    decided, by_what = e2e_decides(plan, worker, row["ids_equal_course_baseline"], row["ids_equal_transformers_fp32"]) \
        if e2e["status"] == "RUN" else (None, "")
    statuses = [case["status"] for case in worker["rows"] or []]
    notes = [row["note"]] if row["note"] else []
    if "FAIL" in statuses or e2e["status"] == "ERROR" or decided is False:
        status = "FAIL"
        failed = [k for k, cell in row["kernels"].items() if cell.startswith("FAIL")]
        if failed:
            notes.append(f"cases failed: {', '.join(failed)}")
        if e2e["status"] == "ERROR":
            notes.append(f"the model run raised: {e2e['note']}")
        elif decided is False:
            notes.append(f"end to end wrong ({by_what})")
    elif "TODO" in statuses or e2e["status"] == "TODO":
        status = "TODO"
        if e2e["status"] == "TODO":
            notes.append(f"the model run stopped at {e2e['unwritten_kernel']}, a TODO")
    else:
        status = "PASS"
    row["correctness"] = status
    measured = timed(e2e)
    floor = floor_of(records, task.track, len(e2e["token_ids"])) if e2e["status"] == "RUN" else None
    beat_floor = integrity.below_floor(e2e["runs_ms"], floor["floor_ms"]) if measured and floor else ""
    if beat_floor:
        notes.append(beat_floor)
    row["status"] = "TAMPERED" if record["status"] == "TAMPERED" or beat_floor else status
    row["note"] = "; ".join(notes)
    faster = False
    if measured and row["status"] != "TAMPERED":
        row["time_ms"], row["time_std_ms"], row["timed_runs"] = measured
        seen = record["seen"]["runs"] or [record["seen"]["check"]]  # on a CPU the check run is the timed run
        row["grader_clock_ms"] = statistics.fmean(seen)
        base = timed(baseline["e2e"]) if baseline else None
        if base:
            row["speedup_vs_course"] = base[0] / measured[0]
            faster = clearly_faster(measured, base)
        if floor:
            row["floor_share"] = floor["floor_ms"] / measured[0]
    row["correct_and_faster"] = row["status"] == "PASS" and faster
    return row


def clearly_faster(mine: tuple[float, float, int], base: tuple[float, float, int]) -> bool:
    """Whether a mean time (``timed``'s (mean, standard deviation, runs)) is below the baseline's by more
    than twice the standard error of their difference: a kernel equal to the solution's reads 1.01x or
    0.99x by noise alone, and is not counted faster. One run each gives no spread: never counted."""
    if min(mine[2], base[2]) < 2:
        return False
    standard_error = math.sqrt(mine[1] ** 2 / mine[2] + base[1] ** 2 / base[2])
    return base[0] - mine[0] > 2 * standard_error


def floor_of(records: dict, track: str, tokens: int) -> dict | None:
    """The roofline floor of a transcription of ``tokens`` tokens, as the course baseline measured it."""
    baseline = worker_of(records, f"baseline-{track}-course")
    return ((baseline or {}).get("floors") or {}).get(str(tokens))


def progress_line(plan, store, record: dict) -> str:
    """One line for the terminal as a task ends: the student's status (or the baseline's) and time."""
    if record["kind"] == "baseline":
        measured = timed((record["worker"] or {}).get("e2e"))
        said = f", {measured[0]:.1f} ms" if measured else ""
        return f"{record['task']}: {record['status']}{said}{'; ' + record['note'] if record['note'] else ''}"
    row = student_row(plan, plan.task(record["task"]), load_records(plan, store))
    said = f", kernels {row['kernels_passed']}" if row["kernels_passed"] else ""
    said += f", {row['time_ms']:.1f} ms" if row["time_ms"] else ""
    note = f"; {row['note']}" if row["note"] else ""
    return f"{row['student']}: {row['status']}{said} ({record['seconds']:.0f} s){note}"


# ------------------------------------------------------------------------------------------------
# Each student's --compare report, from the same numbers
# ------------------------------------------------------------------------------------------------


def e2e_rows(plan, records: dict, task, worker: dict) -> list[dict]:
    """The report's end-to-end rows: the student's (timed runs, else the check run), the baselines'."""
    rows = []
    e2e = worker["e2e"]
    if e2e["status"] == "RUN":
        what = f"{task.name} (course path)" if e2e["runs_ms"] else \
            f"{task.name} (course path; one check run, not timed: a case did not pass)"
        rows.append(compare_report.e2e_row("student", what, e2e["runs_ms"] or [e2e["check_ms"]], e2e["token_ids"]))
    example = f"glm_asr_{task.track}_example"
    for label, name, what in (("course baseline", f"baseline-{task.track}-course", f"{example} (course path)"),
                              ("fast path", f"baseline-{task.track}-fast", f"{example} (fast path)"),
                              ("transformers", "baseline-transformers", "GlmAsrForConditionalGeneration (sdpa)")):
        baseline = worker_of(records, name)
        if baseline and timed(baseline["e2e"]):
            rows.append(compare_report.e2e_row(label, what, baseline["e2e"]["runs_ms"], baseline["e2e"]["token_ids"]))
    for row in rows:
        floor = floor_of(records, task.track, row["tokens"])
        if floor is None:
            return []
        compare_report.add_floor(row, floor)
    return rows


def student_report(plan, records: dict, task, worker: dict) -> dict | None:
    """The student's --compare report (compare_report.assemble_report), or None without a course baseline."""
    baseline = worker_of(records, f"baseline-{task.track}-course")
    if baseline is None or worker["rows"] is None:
        return None
    e2e = worker["e2e"]
    student = {"status": "NOT RUN", "verdict": f"not run: {e2e.get('note', '')}", "transcription": None,
               "unwritten_kernel": e2e.get("unwritten_kernel")}
    if e2e["status"] == "RUN":
        transformers = worker_of(records, "baseline-transformers") or {}
        reference = transformers.get("transformers_fp32") or {"ids": None, "not_compared": "no transformers baseline"}
        check = IdsCheck(e2e["token_ids"], reference["ids"], worker["header"]["precision"], reference["not_compared"])
        status = ("NOT CHECKED (random weights)" if worker.get("random_weights")
                  else transcript_status(e2e["transcription"], plan.expected)[0])
        student = {"status": status, "verdict": check.line() if worker.get("random_weights") else status,
                   "transcription": e2e["transcription"], "ids_equal_transformers_fp32": check.equal,
                   "first_difference_at_token": check.first_difference}
    header = dict(worker["header"], folder=task.name, solution=f"glm_asr_{task.track}_example", substituted_kernels=[])
    kernels = compare_report.pair_kernel_rows(worker["rows"], baseline["rows"] or [])
    return compare_report.assemble_report(header, student, COURSE_KERNELS, kernels,
                                          e2e_rows(plan, records, task, worker), baseline["peaks"])


# ------------------------------------------------------------------------------------------------
# The tables
# ------------------------------------------------------------------------------------------------


def _yes(value) -> str:
    return "" if value is None else ("yes" if value else "no")


def _ms(value) -> str:
    return "" if value is None else f"{value:.1f}"


CSV_COLUMNS = ["student", "track", "status", "correctness", "kernels_passed", "ids_equal_course_baseline",
               "ids_equal_transformers_fp32", "transcript_wer", "time_ms", "time_std_ms", "timed_runs", "grader_clock_ms",
               "speedup_vs_course", "floor_share", "correct_and_faster", "note", "report", "log", "graded_seconds", "key"]


def grades_csv(rows: list[dict], kernels: list[str]) -> str:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(CSV_COLUMNS[:5] + kernels + CSV_COLUMNS[5:])
    for row in rows:
        values = {k: row[k] for k in CSV_COLUMNS}
        values.update({k: _yes(row[k]) for k in ("ids_equal_course_baseline", "ids_equal_transformers_fp32",
                                                  "correct_and_faster")})
        values.update(time_ms=_ms(row["time_ms"]), time_std_ms=_ms(row["time_std_ms"]),
                      grader_clock_ms=_ms(row["grader_clock_ms"]),
                      speedup_vs_course="" if row["speedup_vs_course"] is None else f"{row['speedup_vs_course']:.3f}",
                      floor_share="" if row["floor_share"] is None else f"{row['floor_share']:.4g}",
                      transcript_wer="" if row["transcript_wer"] is None else f"{row['transcript_wer']:.3f}")
        writer.writerow([values[c] for c in CSV_COLUMNS[:5]] + [row["kernels"].get(k, "") for k in kernels]
                        + [values[c] if values[c] is not None else "" for c in CSV_COLUMNS[5:]])
    return text.getvalue()


def pass_rates(rows: list[dict], records: dict, tasks: dict) -> list[dict]:
    """Per course kernel: how many students' copies pass, fail, are TODO or have no result; the case
    that failed most often. Hardest first."""
    table = {}
    for row in rows:
        for kernel, cell in row["kernels"].items():
            counts = table.setdefault(kernel, Counter())
            counts[cell.split(" ")[0] if cell.split(" ")[0] in ("PASS", "FAIL", "TODO", "-") else "no result"] += 1
    failed_cases = Counter()
    for name, task in tasks.items():
        worker = worker_of(records, name)
        for case in (worker or {}).get("rows") or []:
            if case["status"] == "FAIL":
                failed_cases[(case["kernel"], case["guards"])] += 1
    result = []
    for kernel, counts in table.items():
        if not counts["PASS"] + counts["FAIL"] + counts["TODO"]:
            continue  # its cases ran nowhere (--cases)
        graded = sum(counts.values()) - counts["-"]
        worst = max(((guards, n) for (k, guards), n in failed_cases.items() if k == kernel), key=lambda x: x[1],
                    default=None)
        result.append({"kernel": kernel, "pass": counts["PASS"], "fail": counts["FAIL"], "todo": counts["TODO"],
                       "no_result": counts["no result"], "not_run": counts["-"],
                       "rate": counts["PASS"] / graded if graded else None, "hardest_case": worst})
    return sorted(result, key=lambda r: (r["rate"] if r["rate"] is not None else 2, r["kernel"]))


def plot_times(rows: list[dict], records: dict, tracks: list[str], path: Path, title: str) -> bool:
    """Every timed submission's time (correct ones filled), with the baselines and the floor as lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    points = sorted((r for r in rows if r["time_ms"]), key=lambda r: r["time_ms"])
    fig, ax = plt.subplots(figsize=(8, max(3.2, 1.2 + 0.12 * min(len(points), 60))))
    for i, row in enumerate(points):
        correct = row["status"] == "PASS"
        ax.errorbar([row["time_ms"]], [i], xerr=[row["time_std_ms"] or 0], fmt="o", ms=5, capsize=2,
                    color="tab:green" if correct else "tab:red", mfc="tab:green" if correct else "none")
        if len(points) <= 40:  # names beside the points while they stay readable
            ax.annotate(row["student"], (row["time_ms"], i), xytext=(5, -3), textcoords="offset points", fontsize=7)
    marks = [("course baseline", "course", "tab:blue", "--"), ("fast path", "fast", "tab:purple", "--")]
    for track in tracks:
        for label, path_name, color, style in marks:
            measured = timed((worker_of(records, f"baseline-{track}-{path_name}") or {}).get("e2e"))
            if measured:
                ax.axvline(measured[0], color=color, ls=style, lw=1, label=f"{label} ({track}): {measured[0]:.1f} ms")
        course = worker_of(records, f"baseline-{track}-course")
        if course and course["e2e"]["status"] == "RUN":
            floor = floor_of(records, track, len(course["e2e"]["token_ids"]))
            if floor:
                ax.axvline(floor["floor_ms"], color="black", lw=1.2, label=f"roofline floor: {floor['floor_ms']:.3g} ms")
    transformers = timed((worker_of(records, "baseline-transformers") or {}).get("e2e"))
    if transformers:
        ax.axvline(transformers[0], color="grey", ls=":", lw=1, label=f"transformers: {transformers[0]:.1f} ms")
    ax.set_xscale("log")
    low, high = ax.get_xlim()
    ax.set_xlim(low, high * 1.6)  # room for the names of the slowest
    ax.set_ylim(-1, max(len(points), 1))
    ax.set_yticks([])
    ax.set_ylabel("submissions, fastest lowest", fontsize=8)
    ax.set_xlabel("time of one transcription (ms, log scale)")
    ax.set_title(title, fontsize=9)
    ax.plot([], [], "o", color="tab:green", label="correct")
    ax.plot([], [], "o", color="tab:red", mfc="none", label="not correct")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _baseline_line(records: dict, tracks: list[str]) -> str:
    parts = []
    for track in tracks:
        for label, path in (("course", "course"), ("fast", "fast")):
            measured = timed((worker_of(records, f"baseline-{track}-{path}") or {}).get("e2e"))
            said = f"{measured[0]:.1f} ± {measured[1]:.1f} ms" if measured else "not run"
            parts.append(f"{track} {label} path {said}")
        course = worker_of(records, f"baseline-{track}-course")
        floor = course and course["e2e"]["status"] == "RUN" and floor_of(records, track, len(course["e2e"]["token_ids"]))
        if floor:
            parts.append(f"its roofline floor {floor['floor_ms']:.3g} ms")
    transformers = worker_of(records, "baseline-transformers")
    measured = timed((transformers or {}).get("e2e"))
    parts.append(f"transformers {measured[0]:.1f} ms" if measured else "transformers not run")
    return "; ".join(parts)


def markdown(plan, rows: list[dict], records: dict, rates: list[dict], tracks: list[str], plot: bool) -> str:
    course_workers = [worker_of(records, f"baseline-{t}-course") for t in tracks]
    header = next((w["header"] for w in course_workers if w), None)
    devices = sorted({r["worker"]["header"]["device"] for r in records.values()
                      if r and r["status"] == "DONE"})
    counts = Counter(r["status"] for r in rows)
    correct = counts["PASS"]
    faster = sum(r["correct_and_faster"] for r in rows)
    lines = [f"# Grades: {Path(plan.submissions_dir).name}", ""]
    if header:
        cases = "every case of the case table" if plan.cases is None else "only " + ", ".join(plan.cases)
        lines += [f"{header['date']} · {header['device']} · precision {header['precision']} "
                  f"({header['precision_description']}) · {header['model']} · {header['audio_seconds']:.1f} s of audio"
                  + (f" · {header['cpu_defaults']}" if header["cpu_defaults"] else "") + f" · cases: {cases}", ""]
    else:
        lines += ["**The course baseline has no result: no student could be compared with it (see logs/).**", ""]
    if len(devices) > 1:
        lines += [f"**Timed on different devices ({', '.join(devices)}): compare times only within one; "
                  "re-run with --force on one kind.**", ""]
    lines += [f"Baselines: {_baseline_line(records, tracks)}.", "",
              f"**{len(rows)} students: {correct} correct, {faster} correct and faster than the course baseline.** "
              + ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts[s]) + ".", "",
              "| student | status | kernels | ids = course | ids = transformers | time (ms) | vs course | floor share "
              "| note | report |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        time_cell = ("" if row["time_ms"] is None
                     else f"{row['time_ms']:.1f} ± {row['time_std_ms']:.1f} ({row['timed_runs']})")
        speed = "" if row["speedup_vs_course"] is None else f"{row['speedup_vs_course']:.2f}x"
        floor = "" if row["floor_share"] is None else f"{row['floor_share'] * 100:.2g} %"
        report = f"[report]({row['report']})" if row["report"] else ""
        note = row["note"].replace("|", "\\|")
        status = f"{row['status']} (otherwise {row['correctness']})" if row["status"] == "TAMPERED" and row["correctness"] \
            else row["status"]
        lines.append(f"| {row['student']} | {status} | {row['kernels_passed']} "
                     f"| {_yes(row['ids_equal_course_baseline'])} | {_yes(row['ids_equal_transformers_fp32'])} "
                     f"| {time_cell} | {speed} | {floor} | {note} | {report} |")
    lines += ["", "## Kernels the class found hard", "",
              "| kernel | pass | fail | TODO | no result | not run | pass rate | case failed most often |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rates:
        rate = "" if r["rate"] is None else f"{r['rate']:.0%}"
        hardest = "" if r["hardest_case"] is None else f"{r['hardest_case'][0]} ({r['hardest_case'][1]})"
        lines.append(f"| `{r['kernel']}` | {r['pass']} | {r['fail']} | {r['todo']} | {r['no_result']} | {r['not_run']} "
                     f"| {rate} | {hardest} |")
    lines += ["", "## Times", ""]
    lines += ["![times](times.png)", ""] if plot else ["(no plot: matplotlib is not installed)", ""]
    lines += ["Each point is a submission whose every case passed, timed as the baselines were (filled: correct "
              "end to end); bars: one standard deviation. Lines: the course baseline and the fast path of the "
              "example, transformers, and the roofline floor (the slower of the transcription's FLOPs at the "
              "measured matmul peak and its bytes at the measured copy bandwidth).", "",
              "Status TAMPERED: the note says why (docs/grading_integrity.md); the correctness it would have had is "
              "in brackets, and it is never counted faster. "
              "Columns: kernels = course kernels passing every case / run; ids = course: the check run's ids equal the "
              "course baseline's; ids = transformers: equal transformers' IEEE fp32 ids; time: mean ± standard "
              "deviation (timed runs); vs course: the course baseline's time over the student's (above 1: faster; "
              "the summary's count takes a student as faster only beyond twice the standard error of the two "
              "means' difference); "
              "floor share: the roofline floor over the student's time. grades.csv has every column, one per kernel "
              "(PASS, FAIL with the worst error and its limit, TODO, - not run), correctness, grader_clock_ms (the timed "
              "runs' mean on the grader's own clock, which each reported time must agree with) and the log and key "
              "of each row."]
    return "\n".join(lines) + "\n"


def write_class_tables(plan, store) -> int:
    """grades.csv, grades.md, times.png and the students' reports, from the stored results; prints where."""
    records = load_records(plan, store)
    tasks = {t.name: t for t in plan.tasks if t.kind == "submission"}
    tracks = sorted({t.track for t in plan.tasks if t.kind == "baseline" and t.path == "course"})
    rows = [student_row(plan, task, records) for task in tasks.values()]
    out = Path(plan.out)
    for row in rows:
        task = tasks[row["student"]]
        worker = records[task.name]["worker"] if records[task.name] and records[task.name]["status"] == "DONE" else None
        report = worker and student_report(plan, records, task, worker)
        if report:
            compare_report.write_report(report, str(out / "reports" / task.name))
            row["report"] = f"reports/{task.name}/report.md"
    rows.sort(key=lambda r: (STATUS_ORDER.index(r["status"]), r["time_ms"] or math.inf, r["student"]))
    kernels = list(COURSE_KERNELS)
    store.write("grades.csv", grades_csv(rows, kernels).encode())
    title = f"{len(rows)} submissions of {Path(plan.submissions_dir).name}, {plan.device}"
    plot = plot_times(rows, records, tracks, out / "times.png", title)
    rates = pass_rates(rows, records, tasks)
    store.write("grades.md", markdown(plan, rows, records, rates, tracks, plot).encode())
    counts = Counter(r["status"] for r in rows)
    print(f"{len(rows)} students: " + ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if counts[s])
          + f"; {sum(r['correct_and_faster'] for r in rows)} correct and faster than the course baseline")
    print(f"Table: {out / 'grades.md'} (and grades.csv{', times.png' if plot else ''}, reports/NAME/report.md)")
    return 0
