"""The cuTile student template, glm_asr_cutile_template/, generated from glm_asr_cutile_example/ by
utils/make_template.py --track cutile.

* The committed template is what the generator writes (while it still holds every TODO): the course
  path only (no fast path, no CuPy baseline), eleven kernels declared TODO with signature and
  docstring, everything else copied.
* ``benchmark_student.py --allow-reference`` end to end: with every kernel stood in for, the ids are
  the example course path's and transformers'; with all but one, the run stops naming that one, so
  every one of the eleven kernels is on the model's path. Without the flag, the one-line error.
* The course kernels' cases on the template: tests/test_course_kernels.py.

Select with ``pytest tests -k cutile_template``. Without a GPU everything runs in the cuTile emulator.
"""

import ast
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "utils"))

import make_template  # noqa: E402

from glm_asr_common.model.audio import load_audio  # noqa: E402
from glm_asr_common.errors import run_cli  # noqa: E402
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


# --------------------------------------------------------------------------------------------------
# benchmark_student.py with the template: --allow-reference, and the TODO error
# --------------------------------------------------------------------------------------------------


def run_benchmark(argv, capsys):
    import benchmark_student

    with pytest.raises(SystemExit) as exit_info:
        run_cli(benchmark_student.main, argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_cutile_template_allow_reference_all_end_to_end(tiny_ckpt, clips, tmp_path, capsys):
    """Every course kernel stands in for its TODO and every one of them runs: the template's ids are
    the example's course path's and transformers'."""
    from parity import hf_generate, hf_model, inputs_for, track_model

    new_tokens = 6
    out_json = tmp_path / "template.json"
    code, out, err = run_benchmark([TEMPLATE, "--audio", str(clips["short"]), "--model", str(tiny_ckpt),
                                    "--device", "cpu", "--precision", "fp32", "--min-new-tokens", str(new_tokens),
                                    "--max-new-tokens", str(new_tokens), "--runs", "1", "--warmup", "0",
                                    "--allow-reference", "all", "--json", str(out_json)], capsys)
    assert code == 0, out + err
    data = json.loads(out_json.read_text())
    assert data["path"] == "course"
    assert data["substituted_kernels"] == sorted(template_todos())
    example, ckpt = track_model(f"{EXAMPLE}:course", tiny_ckpt)
    inputs = inputs_for(ckpt, [load_audio(clips["short"])])
    expected = hf_generate(hf_model(tiny_ckpt), inputs, new_tokens, new_tokens, ckpt.config.eos_token_ids)[0]
    assert len(set(expected)) > 3, "degenerate reference"
    assert data["token_ids"] == example.generate(inputs, new_tokens, new_tokens)[0] == expected
    if data["substituted_kernels"]:
        assert f"Reference kernels: {len(data['substituted_kernels'])} of the example's kernels" in out


@pytest.mark.parametrize("kernel", STUDENT_KERNELS)
def test_every_cutile_course_kernel_is_on_the_template_path(kernel, tiny_ckpt, capsys):
    """With every other kernel stood in for by the example's, a transcription still reaches the one
    left TODO and stops there, naming it: no kernel of the course is off the model's path."""
    if kernel not in template_todos():
        pytest.skip(f"{kernel} is written: this check needs it TODO (it holds for the generated template)")
    others = ",".join(k for k in STUDENT_KERNELS if k != kernel)
    code, out, err = run_benchmark([TEMPLATE, "--model", str(tiny_ckpt), "--device", "cpu", "--max-new-tokens", "2",
                                    "--runs", "1", "--warmup", "0", "--allow-reference", others], capsys)
    assert code == 2, out
    line = _one_error_line(err)
    assert line.startswith(f"error: {kernel} in {TEMPLATE}/"), line
    assert f"GUIDE.md#cutile-{kernel}" in line and f"--allow-reference {kernel}" in line


def test_cutile_template_allow_reference_unknown_kernel_exits_2(tiny_ckpt, capsys):
    code, out, err = run_benchmark([TEMPLATE, "--model", str(tiny_ckpt), "--device", "cpu",
                                    "--allow-reference", "apply_rope_kernel,flash_kernel"], capsys)
    assert code == 2
    line = _one_error_line(err)
    assert "flash_kernel" in line and "apply_rope_kernel" in line and "Loaded audio" not in out
