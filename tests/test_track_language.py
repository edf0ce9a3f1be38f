"""What a track folder's kernels are written in: one answer (tracks.kernel_language, from the
KERNEL_LANGUAGE its __init__.py declares) that a renamed copy and a grader's submission keep."""

import shutil

import pytest

from glm_asr_course.command_line import cpu_kernel_runner
from glm_asr_course.errors import UserError
from glm_asr_course.tracks import REPO_ROOT, declared_language, kernel_language, track_folders
from glm_asr_lab.grading.class_grading import track_package
from glm_asr_lab.grading.compare_report import solution_folder


def test_every_track_folder_declares_its_language():
    languages = {folder: kernel_language(folder) for folder in track_folders()}
    assert {"glm_asr_triton_example": "triton", "glm_asr_triton_template": "triton",
            "glm_asr_cutile_example": "cutile", "glm_asr_cutile_template": "cutile",
            "glm_asr_scratch": "torch"}.items() <= languages.items()


def test_a_renamed_copy_keeps_its_language_and_its_solution(tmp_path):
    """A student's copy under a name that holds no language: the declaration still says cuTile."""
    copy = tmp_path / "my_kernels"
    shutil.copytree(REPO_ROOT / "glm_asr_cutile_template", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert kernel_language(copy) == "cutile"
    files = {path.relative_to(copy).as_posix(): path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    assert track_package(files, "my_kernels", None)[0] == "cutile"


def test_the_language_decides_the_cpu_runner_and_the_solution():
    assert cpu_kernel_runner("glm_asr_triton_template", "course") == "the Triton interpreter"
    assert cpu_kernel_runner("glm_asr_cutile_example", "fast") == "the cuTile emulator"
    assert cpu_kernel_runner("glm_asr_cutile_example", "cupy") is None
    assert cpu_kernel_runner("glm_asr_scratch", "course") is None
    assert solution_folder("glm_asr_cutile_template", None) == "glm_asr_cutile_example"
    assert solution_folder("glm_asr_triton_template", None) == "glm_asr_triton_example"


def test_the_declaration_is_read_not_run(tmp_path):
    """Reading it imports nothing (triton must wait for the CPU interpreter's choice)."""
    assert declared_language(b'import no_such_module\nraise SystemExit(3)\nKERNEL_LANGUAGE = "triton"\n') == "triton"
    assert declared_language(b'KERNEL_LANGUAGE: str = "cutile"\n') == "cutile"
    assert declared_language(b'KERNEL_LANGUAGE = "cuda"\n') is None
    assert declared_language(b"KERNEL_LANGUAGE = (\n") is None
    folder = tmp_path / "glm_asr_undeclared"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""No declaration."""\n')
    with pytest.raises(UserError, match=r"glm_asr_undeclared/__init__.py does not declare its kernel language"):
        kernel_language(folder)
