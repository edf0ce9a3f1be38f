"""The class grader, ``./benchmark.sh --grade`` (glm_asr_lab/grading/class_grading.py), on a synthetic class.

Thirteen student copies of the cuTile template (glm_asr_lab/synthetic_class.py): one correct, one with a
subtly wrong kernel (GELU by the tanh approximation), one with a TODO left, one that raises at import,
one that sleeps past --time-limit, one that prints megabytes, one that overwrites the grader's
grades.csv and another student's result, and six that game their time (the cheats). Graded on the CPU
(the cuTile emulator) with the tiny checkpoint, two new tokens and only the cases of the two kernels
the class gets wrong (--cases; the grader's default is every case), they give PASS, FAIL, TODO, CRASH,
TIMEOUT, PASS with its log cut, TAMPERED with the overwritten files put back, and TAMPERED for each
cheat for its own reason, its correctness kept (the side-stream cheat, GPU only, is an honest PASS
here); an honest time agrees with the grader's clock. The sleeper is graded after the others, alone, with a
limit of seconds: the limit every other submission fits in would keep the suite waiting two minutes on it
(a result is reused whatever limit it was graded with). A second run grades nothing (every submission
hashes as before); a removed result is graded again alone; an interrupt stops the workers and keeps what
was graded.
The same grading as a Slurm job array: tests/test_slurm.py. Bad input: one line, exit 2, here.
"""

import csv
import json
import os
import re
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from glm_asr_course.errors import run_cli
from glm_asr_lab.grading import class_grading, integrity

REPO = Path(__file__).resolve().parent.parent

from glm_asr_lab import synthetic_class

LIMIT_S = 120  # a correct submission takes ~10 s here, on a loaded machine 40-50 s
SLEEPER_LIMIT_S = 5  # the sleeper sleeps an hour at import: any limit stops it
EXPECTED = {"correct": "PASS", "wrong": "FAIL", "todo": "TODO", "crash": "CRASH", "sleeper": "TIMEOUT",
            "chatty": "PASS", "tamper": "TAMPERED", "cheat_timer": "TAMPERED", "cheat_events": "TAMPERED",
            "cheat_clock": "TAMPERED", "cheat_quiet": "TAMPERED", "cheat_cache": "TAMPERED", "cheat_stream": "PASS"}
REPLACED = "replaced in its process: {} (after its import and its cases)"
# What each cheat is caught by: the tripwire's name of what it replaced and whether the grader's clock
# contradicts its time (on a CPU: the timer's clock; CUDA events and a cache have nothing to gain here).
CAUGHT = {"cheat_timer": ("glm_asr_course.timer.ms_between", True), "cheat_events": ("torch.cuda.Event.elapsed_time", False),
          "cheat_clock": ("time.perf_counter", True), "cheat_quiet": (None, True),
          "cheat_cache": ("glm_asr_course.model.engine.GreedyModel.generate", False)}


def grade(submissions, out, tiny_ckpt, clip, *extra, limit_s=LIMIT_S, timeout=1800):
    command = [str(REPO / "benchmark.sh"), "--grade", str(submissions), "--out", str(out), "--model", str(tiny_ckpt),
               "--audio", str(clip), "--max-new-tokens", "2", "--time-limit", str(limit_s),
               "--cases", "gelu_kernel,silu_kernel", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=out.parent)


def table(out) -> dict[str, dict]:
    with open(out / "grades.csv", newline="") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def graded(tmp_path_factory, tiny_ckpt, clips):
    root = tmp_path_factory.mktemp("class")
    submissions, out = root / "submissions", root / "grading"
    synthetic_class.main([str(submissions), "--track", "cutile", "--grading-dir", str(out)])
    started = time.monotonic()
    others = grade(submissions, out, tiny_ckpt, clips["short"], "--only", ",".join(sorted(set(EXPECTED) - {"sleeper"})))
    sleeper = grade(submissions, out, tiny_ckpt, clips["short"], "--only", "sleeper", limit_s=SLEEPER_LIMIT_S)
    return submissions, out, (others, sleeper), time.monotonic() - started


def test_thirteen_submissions_give_thirteen_rows(graded):
    _, out, (others, result), _ = graded
    assert others.returncode == 0, others.stdout + others.stderr
    assert ": 15 to run, 0 unchanged" in others.stdout, others.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": 1 to run, 3 unchanged" in result.stdout, result.stdout  # the baselines
    rows = table(out)
    assert {name: row["status"] for name, row in rows.items()} == EXPECTED, result.stdout
    assert "13 students: 3 PASS, 1 FAIL, 1 TODO, 1 TIMEOUT, 1 CRASH, 6 TAMPERED" in result.stdout

    correct = rows["correct"]
    assert correct["gelu_kernel"] == correct["silu_kernel"] == "PASS" and correct["rmsnorm_kernel"] == "-"
    assert correct["kernels_passed"] == "2/2" and correct["ids_equal_course_baseline"] == "yes"
    assert correct["ids_equal_transformers_fp32"] == "yes" and float(correct["time_ms"]) > 0
    assert float(correct["speedup_vs_course"]) > 0 and 0 < float(correct["floor_share"]) < 1
    report = (out / correct["report"]).read_text()
    assert "**End to end (course path): ids equal transformers' fp32: yes (2 tokens)**" in report
    assert "| course baseline |" in report and "| fast path |" in report and "| transformers |" in report

    wrong = rows["wrong"]
    assert wrong["gelu_kernel"].startswith("FAIL ") and wrong["silu_kernel"] == "PASS", wrong
    assert wrong["time_ms"] == "" and "cases failed: gelu_kernel" in wrong["note"]  # nothing wrong is timed
    todo = rows["todo"]
    assert todo["silu_kernel"] == "TODO" and "the model run stopped at silu_kernel, a TODO" in todo["note"]
    assert rows["crash"]["note"] == "RuntimeError: this submission raises at import"
    assert rows["sleeper"]["note"] == f"stopped after {SLEEPER_LIMIT_S} s (--time-limit)"

    chatty = rows["chatty"]
    assert chatty["note"].startswith("printed 5.") and "its log keeps the first 256 kB and the last 64 kB" in \
        chatty["note"]
    assert (out / chatty["log"]).stat().st_size < 330_000


def test_a_submission_cannot_write_the_grades_or_another_result(graded):
    _, out, _, _ = graded
    tamper = table(out)["tamper"]
    assert tamper["note"] == f"the worker changed {out / 'grades.csv'}, {out / 'results/correct.json'}"
    # The overwritten result was put back, sealed as the grader wrote it; the table is the grader's.
    stored = json.loads((out / "results" / "correct.json").read_text())
    assert stored["status"] == "DONE" and stored["task"] == "correct"
    assert (out / "grades.csv").read_text().startswith("student,track,status,correctness,kernels_passed,")
    # Each result records the fingerprint of what it was judged with (clip, checkpoint, case table, ...).
    plan = json.loads((out / "plan.json").read_text())
    assert stored["fingerprint"] == plan["fingerprint"]
    assert any(name.endswith("glm_asr_course/kernels/kernel_cases.py") for name in plan["judged_files"])


def test_each_cheat_is_tampered_for_its_reason_and_keeps_its_correctness(graded):
    _, out, _, _ = graded
    rows = table(out)
    for kind, (replaced, clock) in CAUGHT.items():
        row = rows[kind]
        assert (row["correctness"], row["kernels_passed"], row["ids_equal_transformers_fp32"]) == ("PASS", "2/2", "yes")
        assert row["time_ms"] == row["speedup_vs_course"] == "" and row["correct_and_faster"] == "no"  # not believed
        rest = row["note"]
        if replaced:
            assert rest.startswith(REPLACED.format(replaced)), rest
            rest = rest[len(REPLACED.format(replaced)):].removeprefix("; ")
        if clock:  # a third of the time reported, by the grader's clock
            reported, seen = re.fullmatch(r"its check run reported ([\d.]+) ms; the grader's clock saw ([\d.]+) ms",
                                          rest).groups()
            assert 0.25 < float(reported) / float(seen) < 0.4, row["note"]
        else:
            assert rest == "", row["note"]


def test_honest_times_agree_with_the_grader_clock(graded):
    """An honest submission's reported time is what the grader's clock saw, less the pipe's and a
    synchronisation's microseconds: the checks leave it as it was (docs/grading_integrity.md has
    the same class graded before the checks existed)."""
    _, out, _, _ = graded
    for name in ("correct", "chatty", "cheat_stream"):
        row = table(out)[name]
        reported, seen = float(row["time_ms"]), float(row["grader_clock_ms"])
        assert row["correctness"] == "PASS" and abs(seen - reported) < integrity.allowed_shortfall(seen), row


def test_class_tables(graded):
    _, out, _, _ = graded
    markdown = (out / "grades.md").read_text()
    assert "**13 students: 3 correct, " in markdown
    assert "| cheat_timer | TAMPERED (otherwise PASS) | 2/2 |" in markdown
    assert "| student | status | kernels | ids = course | ids = transformers | time (ms) | vs course |" in markdown
    hard = markdown.split("## Kernels the class found hard")[1].split("## Times")[0]
    # Only the kernels whose cases ran, the one a student got wrong first, with the case it failed.
    assert hard.index("`gelu_kernel`") < hard.index("`silu_kernel`") and "`rmsnorm_kernel`" not in hard
    assert "erf, not the tanh approximation (1)" in hard
    assert (out / "times.png").read_bytes()[:4] == b"\x89PNG"
    assert "![times](times.png)" in markdown


def test_second_run_skips_every_submission_by_hash(graded, tiny_ckpt, clips):
    submissions, out, _, first_seconds = graded
    before = (out / "results" / "correct.json").read_text()
    started = time.monotonic()
    again = grade(submissions, out, tiny_ckpt, clips["short"])
    assert again.returncode == 0, again.stderr
    assert "Grading 13 submissions" in again.stdout and ": 0 to run, 16 unchanged since their result" in again.stdout
    assert time.monotonic() - started < first_seconds / 3
    assert (out / "results" / "correct.json").read_text() == before
    assert {name: row["status"] for name, row in table(out).items()} == EXPECTED


def test_a_changed_or_missing_result_is_graded_again_alone(graded, tiny_ckpt, clips):
    submissions, out, _, _ = graded
    (out / "results" / "crash.json").unlink()
    rerun = grade(submissions, out, tiny_ckpt, clips["short"])
    assert ": 1 to run, 15 unchanged" in rerun.stdout and "[1/1] crash: CRASH" in rerun.stdout, rerun.stdout


def test_an_interrupt_stops_the_workers_and_keeps_the_results(graded, tiny_ckpt, clips):
    submissions, out, _, _ = graded
    before = (out / "results" / "sleeper.json").read_text()
    command = [str(REPO / "benchmark.sh"), "--grade", str(submissions), "--out", str(out), "--model", str(tiny_ckpt),
               "--audio", str(clips["short"]), "--max-new-tokens", "2", "--time-limit", str(LIMIT_S),
               "--cases", "gelu_kernel,silu_kernel", "--only", "sleeper", "--force"]
    # SIGINT as at a terminal even where the suite itself was started in the background, which ignores it
    # (and a process started with SIGINT ignored keeps it so: Python installs no KeyboardInterrupt then).
    grader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (out / "scratch" / "sleeper" / "copy").is_dir():
        assert time.monotonic() < deadline and grader.poll() is None, "the sleeper's worker never started"
        time.sleep(0.2)
    time.sleep(2)
    grader.send_signal(signal.SIGINT)
    stdout, stderr = grader.communicate(timeout=60)
    assert grader.returncode == 130, stdout + stderr
    assert "interrupted: the results so far are kept in" in stderr and "Traceback" not in stderr
    assert (out / "results" / "sleeper.json").read_text() == before
    workers = subprocess.run(["pgrep", "-f", "glm_asr_lab.grading.grading_worker.*sleeper"], capture_output=True)
    assert workers.returncode == 1, "a worker outlived the interrupted grader"


def test_an_archive_is_the_same_submission_as_its_folder(graded, tmp_path):
    submissions, _, _, _ = graded
    archive = tmp_path / "correct.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted((submissions / "correct").rglob("*")):
            if path.is_file():
                z.write(path, f"glm_asr_cutile_template/{path.relative_to(submissions / 'correct')}")
    folder = class_grading.track_package(class_grading.read_submission(submissions / "correct"), "correct", None)
    zipped = class_grading.track_package(class_grading.read_submission(archive), "correct", None)
    assert folder[0] == zipped[0] == "cutile"
    assert class_grading.files_hash(folder[1]) == class_grading.files_hash(zipped[1])
    escaping = tmp_path / "escape.zip"
    with zipfile.ZipFile(escaping, "w") as z:
        z.writestr("../model.py", "")
    with pytest.raises(class_grading.SubmissionProblem, match=r"a path that leaves the folder \(\.\./model\.py\)"):
        class_grading.read_submission(escaping)


def one_error_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(class_grading.main, argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and "Traceback" not in err, out + err
    return lines[0]


@pytest.mark.parametrize("arguments, message", [
    ([], "error: usage: ./benchmark.sh --grade SUBMISSIONS_DIR [options] (see --help)"),
    (["{missing}"], "error: {missing}: not a folder of submissions"),
    (["{empty}"], "error: {empty}: no sub-folders or archives (.zip, .tar, .tar.gz, .tgz) in it"),
    (["{class}", "--runs", "3"], "error: --runs does not go with --grade: the grader runs the course path, "
                                 "times on its own rules and writes its own files (see GUIDE.md, For graders)"),
    (["{class}", "--gpus", "2"], "error: --gpus: the grading runs on the CPU (no CUDA GPU is visible, or --device "
                                 "cpu), one worker at a time"),
    (["{class}", "--wait"], "error: --slurm-arg and --wait go with --slurm"),
    (["{class}", "--cases", "gelu"], "error: --cases gelu: the case table's kernels are "),
    (["{class}", "--only", "mallory"], "error: --only: no submission named mallory in {class}"),
    (["{twins}"], "error: alice and alice.zip in {twins} are both student alice; rename one"),
    (["{class}", "--time-limit", "0"], "error: argument --time-limit: 0 must be at least 1 (see --help)"),
])
def test_bad_input_is_one_line(tmp_path, tiny_ckpt, capsys, arguments, message):
    places = {"missing": tmp_path / "missing", "empty": tmp_path / "empty", "class": tmp_path / "class",
              "twins": tmp_path / "twins"}
    places["empty"].mkdir()
    (places["class"] / "alice").mkdir(parents=True)
    (places["twins"] / "alice").mkdir(parents=True)
    (places["twins"] / "alice.zip").write_bytes(b"")
    argv = [a.format(**places) for a in arguments]
    argv += ["--model", str(tiny_ckpt), "--device", "cpu", "--out", str(tmp_path / "out")] if argv else []
    assert one_error_line(capsys, argv).startswith(message.format(**places))


def test_a_slurm_plan_is_for_the_nodes_gpus(tmp_path):
    """--slurm grades on the nodes' GPUs: the plan says cuda even where this machine has none; a folder
    that is no template copy is a task that will be a CRASH row; the seal's key is the user's alone."""
    (tmp_path / "class" / "alice").mkdir(parents=True)
    args = class_grading.build_parser().parse_args([str(tmp_path / "class"), "--slurm", "--random-weights",
                                                    "--out", str(tmp_path / "out")])
    plan = class_grading.make_plan(args)
    assert plan.device == "cuda" and "--random-weights" in plan.benchmark_argv
    assert [t.name for t in plan.tasks] == ["alice"]  # not a template copy: no track, no baselines
    assert plan.tasks[0].problem == "alice: not one copy of a template folder (no model.py)"
    class_grading.Store(Path(plan.out))
    assert os.stat(Path(plan.out) / ".grader_key").st_mode & 0o077 == 0


@pytest.mark.parametrize("mine, base, faster", [
    ((1.94, 0.05, 8), (2.00, 0.10, 10), False),   # 3 % ahead, inside twice the noise (the H200 class's own 1.03x)
    ((1.80, 0.02, 10), (2.00, 0.02, 10), True),   # 10 % ahead, far outside it
    ((2.05, 0.01, 10), (2.00, 0.01, 10), False),  # slower
    ((1.00, 0.00, 1), (2.00, 0.00, 1), False),    # one run each: no spread to judge by
])
def test_faster_means_beyond_the_noise(mine, base, faster):
    from glm_asr_lab.grading.class_report import clearly_faster

    assert clearly_faster(mine, base) is faster
