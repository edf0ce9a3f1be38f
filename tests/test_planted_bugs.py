"""Every planted bug (glm_asr_lab/planted_bugs.toml) is caught by its kernel's own self-check.

Each bug is a small edit of the example's kernel, applied to a fresh copy of the track (the filled
template under a package name of its own); the copy's self-check cases for that kernel
(glm_asr_course.kernels.kernel_cases, as ``python layers.py KERNEL`` runs them) must report a FAIL row,
on a CPU and on a GPU alike. One bug per track also runs as the student would, as a script, which
must exit 1 naming the failure.
"""

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glm_asr_course.kernels import self_check
from glm_asr_course.tracks import add_track_root
from glm_asr_lab.planted_bugs import PLANTED

REPO = Path(__file__).resolve().parent.parent
from glm_asr_lab import make_template

@pytest.fixture(scope="module")
def planted_root(tmp_path_factory):
    """A folder of track folders (tracks.add_track_root) holding one filled copy of each track, the source of
    every planted copy."""
    root = tmp_path_factory.mktemp("planted")
    for track in PLANTED:
        assert make_template.main(["--track", track, "--filled", str(root), "--package", f"planted_{track}"]) == 0
    add_track_root(root)
    return root


def plant(root: Path, track: str, index: int, bug) -> str:
    """A copy of the track's filled package with the bug's edits; returns its package name."""
    name = f"planted_{track}_{index}"
    target = root / name
    shutil.copytree(root / f"planted_{track}", target)
    bug.plant(target)
    importlib.invalidate_caches()
    return name


CASES = [(track, i, b) for track, bugs in PLANTED.items() for i, b in enumerate(bugs)]
CASE_IDS = [f"{t}-{b.kernel}-{b.what}" for t, _, b in CASES]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # exp overflows that some bugs cause on purpose
@pytest.mark.parametrize("track, index, bug", CASES, ids=CASE_IDS)
def test_planted_bug_is_caught_by_its_self_check(planted_root, track, index, bug, capsys):
    track_view = self_check.load_track(plant(planted_root, track, index, bug))
    with self_check.recording_checks():
        check = self_check.run_cases(track_view, bug.file, [bug.kernel])
    failed = [row for row in check.rows if row.status == "FAIL"]
    assert check.rows and all(row.status in ("PASS", "FAIL") for row in check.rows), capsys.readouterr().out
    assert failed, f"{bug.id} passed every case of {bug.kernel}:\n{capsys.readouterr().out}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("track", PLANTED)
def test_unplanted_filled_template_passes_every_case(planted_root, track, capsys):
    """The generated template with the example's kernel bodies: every case passes, so each FAIL above
    is the bug's doing."""
    with self_check.recording_checks():
        check = self_check.run_cases(self_check.load_track(f"planted_{track}"))
    out = capsys.readouterr().out
    assert check.rows and all(row.status == "PASS" for row in check.rows), out


@pytest.mark.parametrize("track", PLANTED)
def test_planted_bug_fails_the_script_with_exit_1(planted_root, track):
    bug = PLANTED[track][0]
    package = plant(planted_root, track, 1000, bug)
    result = subprocess.run([sys.executable, str(planted_root / package / f"{bug.file}.py"), bug.kernel],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{bug.kernel}" in result.stdout and " FAIL " in result.stdout
    assert "Self-check: NOT PASSED" in result.stdout


def test_every_course_kernel_has_planted_bugs():
    for track, bugs in PLANTED.items():
        kernels = importlib.import_module(f"glm_asr_{track}_example").STUDENT_KERNELS
        planted = {b.kernel for b in bugs}
        assert planted == set(kernels), f"{track}: kernels without a planted bug: {set(kernels) - planted}"


def test_grading_page_counts_the_planted_bugs():
    """docs/grading.md's table of planted bugs states the counts of glm_asr_lab/planted_bugs.toml."""
    page = (REPO / "docs" / "grading.md").read_text()
    total = sum(len(bugs) for bugs in PLANTED.values())
    assert f"`glm_asr_lab/planted_bugs.toml` holds {total} typical" in " ".join(page.split())
    for track, label in (("triton", "Triton (interpreter)"), ("cutile", "cuTile (emulator)")):
        count = len(PLANTED[track])
        assert f"| {label} | {count} | {count} |" in page, f"docs/grading.md's {label} row is stale"
