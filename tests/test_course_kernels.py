"""The course kernels of both tracks against the one case table (glm_asr_course.kernels.kernel_cases), the
table the kernel files' self-checks and the grader run too.

* Every case passes on each example (the solution), and on each real template for the kernels a
  student has written there (a TODO kernel's cases skip, saying so).
* The table is what its docstring promises: for every course kernel of each track a case whose
  loops run twice, an fp32 case at a tolerance that tells erf from tanh, a bf16-faithful case, and a
  model-size case for the GPU; each case names what it guards.
* A kernel file's self-check, run as a student runs it: exit 0 when every row passes; exit 1 naming
  the TODO rows on the template; exit 2 and one line for a kernel name the file does not hold.
* The ids carry the folder, so `-k triton_template` (README, GUIDE) selects every case of that folder.
* cuTile only: every signature the cases launch in the emulator compiles for sm_90 with the real
  compiler (on a GPU, launching compiles them).

Without a GPU, Triton kernels run in the interpreter and cuTile kernels in the emulator.
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from glm_asr_course.kernels import self_check
from glm_asr_course.kernels import todo_kernels  # noqa: E402
from glm_asr_course.kernels.kernel_cases import BF16, CASES, Close, Faithful  # noqa: E402
from glm_asr_lab.cutile_compile_check import toolchain_missing

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = ("glm_asr_triton_example", "glm_asr_cutile_example")
TEMPLATES = ("glm_asr_triton_template", "glm_asr_cutile_template")


def track_cases(package: str):
    """(package, case) for every case of the package's course kernels and of the compositions."""
    kernels = self_check.load_track(package).student_kernels
    return [(package, c) for c in CASES if c.kernel in kernels or not c.kernel.endswith("_kernel")]


def run_one(package: str, case, capsys):
    """Run one case as the self-check does; its row."""
    track = self_check.load_track(package)
    with todo_kernels.References().active(), self_check.recording_checks():
        check = self_check.SelfCheck(package, track.interpret, cpu_runner=track.cpu_runner)
        if case.model_size and not check.on_gpu:
            pytest.skip("a model-size case: GPU only")
        row = self_check.run_case(check, track, case)
    capsys.readouterr()
    return row


def case_id(package: str, case) -> str:
    """A case's test id, led by its folder ("triton_template-gelu_kernel[...]"): what -k FOLDER matches."""
    return f"{package.removeprefix('glm_asr_')}-{case.id}"


EXAMPLE_CASES = [pc for p in EXAMPLES for pc in track_cases(p)]


@pytest.mark.parametrize("package, case", EXAMPLE_CASES, ids=[case_id(p, c) for p, c in EXAMPLE_CASES])
def test_example_passes_every_case(package, case, capsys):
    row = run_one(package, case, capsys)
    assert row.status == "PASS", f"{case.id} on {package}: {row.status} {row.error} / {row.limit} {row.note}"


TEMPLATE_CASES = [pc for p in TEMPLATES for pc in track_cases(p)]
CASE_IDS = {folder: [case_id(p, c) for p, c in EXAMPLE_CASES + TEMPLATE_CASES if p == folder]
            for folder in EXAMPLES + TEMPLATES}


@pytest.mark.parametrize("package, case", TEMPLATE_CASES, ids=[case_id(p, c) for p, c in TEMPLATE_CASES])
def test_template_kernel_passes_once_written(package, case, capsys):
    row = run_one(package, case, capsys)
    if row.status == "TODO":
        pytest.skip(f"TODO: {row.note or case.kernel} is not written yet in {package}")
    assert row.status == "PASS", f"{case.id} on {package}: {row.status} {row.error} / {row.limit} {row.note}"


def test_the_documented_k_filter_selects_every_case_of_the_folder():
    """`pytest tests/test_course_kernels.py -k triton_template` (README, GUIDE): the folder's cases and its
    self-check script; -k matches the keyword inside the ids, which carry the folder for every folder."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(Path(__file__)), "-k", "triton_template"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    selected = [line for line in done.stdout.splitlines() if line.startswith("tests/") and "documented_k" not in line]
    cases = [line for line in selected if "[triton_template-" in line]
    assert len(cases) == len(track_cases("glm_asr_triton_template")), done.stdout[-2000:]
    assert selected == cases + ["tests/test_course_kernels.py::test_template_self_check_script_names_the_todo_kernels_"
                                "and_exits_1[glm_asr_triton_template]"]
    for folder in EXAMPLES + TEMPLATES:
        keyword = folder.removeprefix("glm_asr_")
        ids = CASE_IDS[folder]
        assert ids and all(i.startswith(f"{keyword}-") for i in ids)
        assert not any(keyword in i for other in EXAMPLES + TEMPLATES if other != folder for i in CASE_IDS[other])


def test_an_interpreted_overflow_is_silent_as_on_a_gpu(capsys):
    """silu's exp(-x) overflows to inf at x = -1e4, as the kernel intends: no NumPy warning reaches the user."""
    case = next(c for c in CASES if c.kernel == "silu_kernel" and c.guards.startswith("overflow"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = run_one("glm_asr_triton_example", case, capsys)
    assert row.status == "PASS", row.note


# --------------------------------------------------------------------------------------------------
# The table itself
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("package", EXAMPLES)
def test_table_covers_every_course_kernel_as_promised(package):
    kernels = self_check.load_track(package).student_kernels
    for kernel in kernels:
        cases = [c for c in CASES if c.kernel == kernel]
        assert cases, f"{kernel} has no case"
        assert len({c.guards for c in cases}) == len(cases) and all(c.guards for c in cases), kernel
        assert any(c.model_size for c in cases) or kernel == "compute_freqs_kernel", \
            f"{kernel}: no model-size case for the GPU"
        small = [c for c in cases if not c.model_size]
        # One case at a tolerance that separates exact from approximate (fp32 tables: absolute, one ulp).
        assert any(isinstance(c.judge, Close) and c.judge.tol <= 1e-5 for c in small) or kernel == "compute_freqs_kernel"
        # bf16 judged against a bf16-faithful reference wherever the kernel writes bf16.
        writes_bf16 = kernel not in ("attention_scores_kernel", "softmax_inplace_kernel", "compute_freqs_kernel")
        if writes_bf16:
            assert any(isinstance(c.judge, Faithful) or (isinstance(c.judge, Close) and c.judge.tol == 0.0)
                       for c in small), f"{kernel}: no bf16-faithful case"


def test_compute_freqs_has_positions_past_its_largest_program():
    # The interpreter's launcher takes 1024 positions per program; the emulator's fewer.
    assert any(c.kernel == "compute_freqs_kernel" and "1500" in c.shape for c in CASES)


def test_faithful_judge_tells_rounding_points_apart():
    """Rounded like transformers: passes; rounded once at the end instead: fails; off by a lot at one
    element: fails."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 257, generator=gen, dtype=torch.float64) * 2
    w = torch.randn(257, generator=gen, dtype=torch.float64)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    faithful = (w * normed.to(BF16).double()).to(BF16)
    rounded_once = (w * normed).to(BF16)
    judge = Faithful()
    assert judge(faithful.clone(), faithful).passed
    assert not judge(rounded_once, faithful).passed
    one_wrong = faithful.clone()
    one_wrong[3, 5] = faithful[3, 5] * 2
    verdict = judge(one_wrong, faithful)
    assert not verdict.passed and "bf16 step" in verdict.reason
    assert not judge(faithful.float(), faithful).passed  # fp32 where bf16 was asked for


def test_close_judge_needs_the_same_masked_entries():
    ref = torch.tensor([[0.5, float("-inf")], [1.0, 2.0]])
    assert Close(1e-5)(ref.clone(), ref).passed
    assert not Close(1e-5)(torch.tensor([[0.5, 0.0], [1.0, 2.0]]), ref).passed
    assert not Close(1e-5)(torch.tensor([[0.5, float("-inf")], [float("nan"), 2.0]]), ref).passed


# --------------------------------------------------------------------------------------------------
# The self-check as a student runs it
# --------------------------------------------------------------------------------------------------


def run_script(path: Path, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(path), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("package", EXAMPLES)
def test_example_self_check_script_exits_0(package):
    result = run_script(REPO / package / "rope.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " FAIL " not in result.stdout and "0 failed, 0 TODO" in result.stdout


@pytest.mark.parametrize("package", TEMPLATES)
def test_template_self_check_script_names_the_todo_kernels_and_exits_1(package):
    result = run_script(REPO / package / "rope.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "to write: compute_freqs_kernel" in result.stdout
    assert "Self-check: NOT PASSED" in result.stdout and "wait for unwritten kernels" in result.stdout


def test_self_check_script_refuses_a_kernel_it_does_not_hold():
    result = run_script(REPO / "glm_asr_triton_example" / "rope.py", "gelu_kernel")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: gelu_kernel not in rope.py; its kernels are: compute_freqs_kernel, apply_rope_kernel"]


def test_self_check_one_kernel_runs_only_its_cases():
    result = run_script(REPO / "glm_asr_cutile_example" / "layers.py", "silu_kernel")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split()[0] for line in result.stdout.splitlines() if " PASS " in line]
    assert rows and set(rows) == {"silu_kernel"}


def test_a_raising_kernel_is_a_fail_row_and_the_next_case_runs(capsys):
    track = self_check.load_track("glm_asr_triton_example")
    with self_check.recording_checks():
        check = self_check.SelfCheck("x", track.interpret)
        check.check("broken_kernel", lambda: 1 / 0, lambda: torch.zeros(1), "1", 1e-5, guards="raises")
        check.check("next_kernel", lambda: torch.ones(3), lambda: torch.ones(3), "3", 1e-5, guards="runs")
        assert check.finish() == 1  # inside a recording it returns the code instead of exiting
    out = capsys.readouterr().out
    assert [r.status for r in check.rows] == ["FAIL", "PASS"]
    assert "[ZeroDivisionError: division by zero]" in out and "1 row(s) failed" in out


# --------------------------------------------------------------------------------------------------
# cuTile: what the emulator ran, the real compiler compiles
# --------------------------------------------------------------------------------------------------


def test_every_cutile_case_signature_compiles_for_sm_90(tmp_path):
    """The cases' launches, recorded by the emulator in a process of their own, compiled by the real
    cuda.tile for sm_90 (glm_asr_lab/cutile_compile_check.py prints a line per signature as it goes)."""
    from glm_asr_course.runtimes.cutile import MODE

    if MODE != "emulate":
        pytest.skip("on a GPU the cases compile every signature as they launch")
    missing = toolchain_missing()
    if missing:
        pytest.skip(missing)
    signatures = tmp_path / "signatures.json"
    env = dict(os.environ, GLM_ASR_CUTILE="emulate", GLM_ASR_CUTILE_RECORD=str(signatures), PYTHONPATH=str(REPO))
    for stem in ("layers", "attention", "rope"):
        run = subprocess.run([sys.executable, str(REPO / "glm_asr_cutile_example" / f"{stem}.py")], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
    kernels = self_check.load_track("glm_asr_cutile_example").student_kernels
    recorded = [s for s in json.loads(signatures.read_text()) if s["kernel"].rsplit(".", 1)[1] in kernels]
    signatures.write_text(json.dumps(recorded))
    result = subprocess.run([sys.executable, "-m", "glm_asr_lab.cutile_compile_check", "--signatures",
                             str(signatures)], cwd=REPO, capture_output=True, text=True, timeout=900)
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout + result.stderr
    passed = {line.split()[1].rsplit(".", 1)[1] for line in result.stdout.splitlines() if line.startswith("PASS")}
    assert passed == set(kernels), result.stdout
