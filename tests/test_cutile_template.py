"""The cuTile student template, glm_asr_cutile_template/, generated from glm_asr_cutile_example/ by
utils/make_template.py --track cutile.

* The committed template is what the generator writes (while it still holds every TODO): the course
  path only (no fast path, no CuPy baseline), eleven kernels declared TODO with signature and
  docstring, everything else copied.
* ``benchmark_student.py --allow-reference`` end to end, for both tracks' templates: tests/test_template.py.
* The course kernels' cases on the template: tests/test_course_kernels.py.

Select with ``pytest tests -k cutile_template``. Without a GPU everything runs in the cuTile emulator.
"""

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "utils"))

import make_template  # noqa: E402

from glm_asr_cutile_example import STUDENT_KERNELS  # noqa: E402

EXAMPLE = "glm_asr_cutile_example"
TEMPLATE = "glm_asr_cutile_template"


def template_todos() -> set[str]:
    """Kernels the template folder still declares with @student_kernel (all eleven until a student starts)."""
    found = set()
    for path in (REPO / TEMPLATE).glob("*.py"):
        found |= set(re.findall(r'^@student_kernel\("(\w+)"', path.read_text(), re.M))
    return found


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


def test_committed_cutile_template_is_what_make_template_generates(capsys):
    if template_todos() != set(STUDENT_KERNELS):
        pytest.skip("the template holds a student's kernels; the generator check guards the pristine template")
    code = make_template.main(["--check", "--track", "cutile"])
    out = capsys.readouterr().out
    assert code == 0, out


def test_cutile_template_is_the_course_path_with_eleven_todo_kernels():
    files = make_template.render(track="cutile")
    example = {p.name for p in (REPO / EXAMPLE).glob("*.py")}
    not_course = {name for name in example if name.startswith(("fast_", "cupy_"))}
    assert set(files) == (example - not_course) | {"README.md"}
    assert len(STUDENT_KERNELS) == 11
    declared = []
    for rel, text in files.items():
        if not rel.endswith(".py"):
            continue
        assert not re.search(r"(from|import) \.?(fast_|cupy_)", text), f"{rel} reaches beyond the course path"
        assert text.startswith(f"# Generated from {EXAMPLE}/"), rel
        assert not re.search(r"^# (>>>|<<<) STUDENT KERNEL", text, re.M), rel
        assert EXAMPLE not in text.replace(f'reference="{EXAMPLE}.', "").replace(f"# Generated from {EXAMPLE}/", ""), rel
        for fn in ast.parse(text).body:
            if not isinstance(fn, ast.FunctionDef) or not fn.decorator_list:
                continue
            decorators = [ast.unparse(d) for d in fn.decorator_list]
            if decorators == ["ct.kernel"]:
                assert fn.name not in STUDENT_KERNELS, f"{rel}: {fn.name} is written out in the template"
            elif decorators[0].startswith("student_kernel("):
                declared.append(fn.name)
                # The TODO: a signature and its docstring, no statement of the solution.
                assert len(fn.body) == 1 and ast.get_docstring(fn), f"{rel}: {fn.name} has a body"
                assert f"reference='{EXAMPLE}.{rel[:-3]}'" in decorators[0]
    assert sorted(declared) == sorted(STUDENT_KERNELS)
    filled = make_template.render("glm_asr_cutile_filled", filled=True, track="cutile")
    assert "README.md" not in filled and not any("student_kernel" in t for t in filled.values())
    assert sum(t.count("@ct.kernel\ndef ") for t in filled.values()) == sum(
        (REPO / EXAMPLE / rel).read_text().count("@ct.kernel\ndef ") for rel in filled)


def test_filled_package_name_picks_the_track(tmp_path):
    assert make_template.main(["--filled", str(tmp_path), "--package", "glm_asr_cutile_filled"]) == 0
    text = (tmp_path / "glm_asr_cutile_filled" / "layers.py").read_text()
    assert "def linear_kernel_tf32(" in text and "ct.mma" in text
