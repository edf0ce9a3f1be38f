"""The grader's comparison, ``./benchmark.sh FOLDER --compare``: its numbers follow the student's kernels.

A "student" folder is the template filled with the example's kernels, one of them then broken (GELU
computed as the identity). Compared against the example on the tiny checkpoint, the report must lead
with the verdict on these random weights (the student's ids differ from transformers' IEEE fp32 ids,
at a named token; exit 1), show that kernel FAIL with its error, every other course kernel PASS, the
end-to-end rows of the student, the course baseline, the fast path and transformers on the same
inputs (the baseline's ids equal to transformers' in IEEE fp32), and the five sections of the course
rubric, in Markdown and JSON. The unfinished template still gets its report: TODO rows counted, the
end-to-end verdict naming the TODO kernel that stopped it, exit 2.
"""

import importlib
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

from glm_asr_lab import make_template

from glm_asr_course.errors import run_cli  # noqa: E402
from glm_asr_triton_example import STUDENT_KERNELS  # noqa: E402

# A folder of the repository only while this test runs (git-ignored); its own name, so that no other
# test's package of the same name meets these broken modules in sys.modules.
STUDENT = "glm_asr_triton_graded"
BROKEN = "gelu_kernel"
RUBRIC = ["## 1. Implementation summary", "## 2. Profiling", "## 3. Bottleneck analysis",
          "## 4. Optimisation attempts", "## 5. Comparison with the baseline"]


@pytest.fixture(scope="module")
def student_folder():
    target = REPO / STUDENT
    shutil.rmtree(target, ignore_errors=True)
    make_template.write(make_template.render(STUDENT, filled=True), target)
    layers = target / "layers.py"
    text = layers.read_text()
    start = text.index(f"def {BROKEN}(")
    line = text.index("\n    y = ", start) + 1
    line_end = text.index("\n", line)
    # The student's GELU stores its input unchanged: a wrong kernel that still runs.
    layers.write_text(text[:line] + "    y = x" + text[line_end:])
    yield STUDENT
    shutil.rmtree(target, ignore_errors=True)
    for name in [m for m in sys.modules if m == STUDENT or m.startswith(STUDENT + ".")]:
        del sys.modules[name]


def test_compare_report_follows_the_students_kernels(student_folder, tiny_ckpt, clips, tmp_path, capsys):
    import benchmark_student

    report_dir = tmp_path / "report"
    argv = [student_folder, "--compare", "--report", str(report_dir), "--audio", str(clips["short"]),
            "--model", str(tiny_ckpt), "--device", "cpu", "--precision", "fp32", "--min-new-tokens", "3",
            "--max-new-tokens", "3", "--runs", "1", "--warmup", "0"]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(benchmark_student.main, argv)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 1, out + err  # random weights, IEEE fp32: the ids decide, and they differ
    report = json.loads((report_dir / "report.json").read_text())
    assert report["folder"] == student_folder and report["solution"] == "glm_asr_triton_example"
    assert report["status"] == "NOT CHECKED (random weights)" and report["ids_equal_transformers_fp32"] is False
    k = report["first_difference_at_token"]
    assert 1 <= k <= 3 and report["verdict"].startswith(f"ids equal transformers' fp32: no (first difference at token {k}: ")
    assert f"Status: NOT CHECKED (random weights)\n{report['verdict']}\n" in out
    for folder in (student_folder, "glm_asr_triton_example"):  # the self-check phase's progress, a line a file
        for stem in ("layers", "attention", "rope"):
            assert re.search(rf"^\[compare\]   {folder}/{stem}\.py: \d+ PASS", out, re.MULTILINE), out
    assert "RuntimeWarning" not in err, err
    assert f"End to end (course path): {report['verdict']}\nCourse kernels (every case of their self-checks): {len(STUDENT_KERNELS) - 1} pass, 1 fail, " \
           "0 to write, 0 on the example's kernel." in out

    rows = {}  # every case of a kernel, in the table's order
    for r in report["kernels"]:
        rows.setdefault(r["kernel"], []).append(r)
    assert set(STUDENT_KERNELS) <= set(rows)
    broken = [r for r in rows[BROKEN] if r["status"] == "FAIL"]
    assert broken and all(r["error"] > 0.1 for r in broken if r["unit"] == "rel"), rows[BROKEN]
    assert all(r["solution_status"] == "PASS" for r in rows[BROKEN])
    for kernel in set(STUDENT_KERNELS) - {BROKEN}:
        for row in rows[kernel]:
            assert row["status"] == "PASS" and row["error"] <= row["limit"], row
            assert row["time_us"] > 0 and row["solution_time_us"] > 0

    e2e = {r["label"]: r for r in report["end_to_end"]}
    assert list(e2e) == ["student", "course baseline", "fast path", "transformers"]
    assert report["reference_label"] == "transformers"
    assert e2e["course baseline"]["ids_equal_reference"] and e2e["fast path"]["ids_equal_reference"]
    assert e2e["transformers"]["token_ids"] == e2e["course baseline"]["token_ids"]
    # Every row is the same transcription (3 tokens), so the same work and floor. The floor (the phases' own
    # floors, summed) is at least the whole transcription's at the measured peaks; a tiny checkpoint's weights
    # stay in cache, so a run may beat this DRAM-bandwidth floor: no upper bound on floor_fraction.
    peaks = report["peaks"]
    assert len({(row["flops"], row["bytes"], row["floor_ms"]) for row in e2e.values()}) == 1
    for row in e2e.values():
        assert row["tokens"] == 3 and row["mean_ms"] > 0 and row["flops"] > 0 and row["bytes"] > 0
        whole_ms = 1e3 * max(row["flops"] / (peaks["matmul_tflops"] * 1e12), row["bytes"] / (peaks["copy_gbps"] * 1e9))
        assert row["floor_ms"] >= whole_ms * (1 - 1e-9)
        assert row["floor_fraction"] == pytest.approx(row["floor_ms"] / row["mean_ms"])

    assert e2e["student"]["ids_equal_reference"] is False
    markdown = (report_dir / "report.md").read_text()
    positions = [markdown.index(section) for section in RUBRIC]
    assert positions == sorted(positions)
    assert markdown.split("## 1. Implementation summary\n\n")[1].startswith(
        f"**End to end (course path): {report['verdict']}**\n\nCourse kernels (every case of their self-checks): {len(STUDENT_KERNELS) - 1} pass, 1 fail")
    assert f"| layers.py | `{BROKEN}` |" in markdown and "| FAIL |" in markdown
    assert f"Wrong results (fix these first): {BROKEN}" in markdown
    assert f"COMPARISON: {STUDENT} against glm_asr_triton_example" in out


def test_compare_options_need_compare(tiny_ckpt, capsys):
    import benchmark_student

    with pytest.raises(SystemExit) as exit_info:
        run_cli(benchmark_student.main, ["glm_asr_triton_example", "--report", "x", "--model", str(tiny_ckpt)])
    _, err = capsys.readouterr()
    assert exit_info.value.code == 2 and err.strip() == "error: --report and --solution go with --compare"


def test_compare_rejects_an_unknown_solution(tiny_ckpt, capsys):
    import benchmark_student

    with pytest.raises(SystemExit) as exit_info:
        run_cli(benchmark_student.main, ["glm_asr_triton_template", "--compare", "--solution", "nowhere",
                                         "--model", str(tiny_ckpt)])
    _, err = capsys.readouterr()
    assert exit_info.value.code == 2 and err.startswith("error: --solution nowhere: not a model folder")


def test_compare_of_right_kernels_leads_with_equal_ids(tiny_ckpt, tmp_path, capsys):
    """Every course kernel right (the example graded against itself): no transcript FAIL on random
    weights, the report leads with the ids verdict beside the eleven passing kernels, exit 0."""
    import benchmark_student

    report_dir = tmp_path / "report"
    with pytest.raises(SystemExit) as exit_info:
        run_cli(benchmark_student.main, ["glm_asr_triton_example", "--path", "course", "--compare", "--report",
                                         str(report_dir), "--model", str(tiny_ckpt), "--device", "cpu",
                                         "--min-new-tokens", "3", "--max-new-tokens", "3"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, out + err
    summary = "**End to end (course path): ids equal transformers' fp32: yes (3 tokens)**\n\nCourse kernels (every case " \
              f"of their self-checks): {len(STUDENT_KERNELS)} pass, 0 fail, 0 to write, 0 on the example's kernel."
    assert summary in (report_dir / "report.md").read_text()
    assert "FAIL" not in out


def test_compare_on_the_unfinished_template_still_writes_its_report(tiny_ckpt, tmp_path, capsys):
    import benchmark_student
    from glm_asr_course.kernels.todo_kernels import TodoKernel

    todo = [k for k in STUDENT_KERNELS if any(isinstance(getattr(importlib.import_module(f"glm_asr_triton_template.{m}"),
                                                                 k, None), TodoKernel) for m in ("layers", "attention", "rope"))]
    if not todo:
        pytest.skip("every template kernel is written")
    report_dir = tmp_path / "report"
    with pytest.raises(SystemExit) as exit_info:
        run_cli(benchmark_student.main, ["glm_asr_triton_template", "--compare", "--report", str(report_dir),
                                         "--model", str(tiny_ckpt), "--device", "cpu", "--max-new-tokens", "2"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and " is a TODO: write it" in lines[0] and "Traceback" not in err, err
    report = json.loads((report_dir / "report.json").read_text())
    assert report["status"] == "NOT RUN" and report["unwritten_kernel"] in todo
    assert report["verdict"] == f"not run: {lines[0].removeprefix('error: ')}"
    assert [r["label"] for r in report["end_to_end"]] == ["course baseline", "fast path", "transformers"]
    markdown = (report_dir / "report.md").read_text()
    assert f"**End to end (course path): {report['verdict']}**" in markdown
    assert f"{len(todo)} to write" in markdown and markdown.count("| TODO |") >= len(todo)
    assert f"No end-to-end numbers of yours: the transcription stopped at `{report['unwritten_kernel']}`" in markdown
    assert f"Report: {report_dir / 'report.md'}" in out


def test_report_tables_give_each_time_column_one_unit_and_a_single_run_no_spread():
    from glm_asr_lab.grading.compare_report import e2e_table, kernel_table

    def kernel(us, solution_us):
        return dict(file="layers.py", kernel="gelu_kernel", guards="g", shape="s", status="PASS", error=None,
                    time_us=us, solution_time_us=solution_us, time_ratio=None)

    mixed = kernel_table({"kernels": [kernel(8972.9, 26100.0), kernel(303800.0, None)]}).splitlines()
    assert mixed[0].split(" | ")[6:8] == ["time (ms)", "solution (ms)"]
    assert mixed[2].split(" | ")[6:8] == ["9.0", "26.1"] and mixed[3].split(" | ")[6:8] == ["303.8", "-"]
    assert kernel_table({"kernels": [kernel(12.5, 9.0)]}).splitlines()[2].split(" | ")[6:8] == ["12.5", "9.0"]

    def run(label, runs_ms):
        mean = sum(runs_ms) / len(runs_ms)
        return dict(label=label, what="w", runs_ms=runs_ms, mean_ms=mean, std_ms=0.0 if len(runs_ms) == 1 else 1.0,
                    ms_per_token=mean / 5, tokens=5, ids_equal_reference=True, tflops=1.0, gbps=1.0, floor_fraction=0.5)

    table = e2e_table({"reference_label": "transformers", "end_to_end": [run("one", [28307.5]), run("two", [10.0, 12.0])]})
    lines = table.splitlines()
    assert lines[0].split(" | ")[2] == "time (ms)"
    assert lines[2].split(" | ")[2] == "28307.5" and lines[3].split(" | ")[2] == "11.0 ± 1.0"
