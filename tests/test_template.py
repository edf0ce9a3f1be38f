"""The student templates, glm_asr_triton_template/ and glm_asr_cutile_template/, generated from their
examples by glm_asr_lab/make_template.py.

* The committed templates are what the generator writes (while they still hold every TODO): the course
  path only (no fast path, no CuPy baseline), eleven kernels declared TODO with signature and
  docstring, everything else copied.
* Filled from the example (``--filled``, a separate package in a temporary directory), greedy
  decoding matches transformers. (The course kernels' cases, on the template and on filled copies:
  tests/test_course_kernels.py and tests/test_planted_bugs.py.)
* ``benchmark_student.py --allow-reference`` end to end: with every kernel stood in for, the ids are
  the example course path's and transformers'; with all but one, the run stops naming that one, so
  every course kernel is on the model's path. Without the flag, the one-line error.

Select with ``pytest tests -k template``. Without a GPU everything runs in the Triton interpreter and the
cuTile emulator.
"""

import ast
import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parent.parent

from glm_asr_lab import make_template

from glm_asr_course.kernels import todo_kernels  # noqa: E402
from glm_asr_course.model.audio import load_audio  # noqa: E402
from glm_asr_course.errors import run_cli  # noqa: E402
from glm_asr_course.tracks import kernel_language  # noqa: E402
from glm_asr_triton_example import STUDENT_KERNELS  # noqa: E402

TEMPLATE = "glm_asr_triton_template"
FILLED = "glm_asr_triton_filled"
# Both tracks' templates, with their example and their track guide (a kernel's section: GUIDE#kernel).
TRACK_TEMPLATES = {"glm_asr_triton_template": ("glm_asr_triton_example", "docs/guide-triton.md"),
                   "glm_asr_cutile_template": ("glm_asr_cutile_example", "docs/guide-cutile.md")}
DEV = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


def track_of(template: str) -> str:
    """The kernel language of a template folder: "triton" or "cutile"."""
    return kernel_language(template)


def template_todos(template: str = TEMPLATE) -> set[str]:
    """Kernels a template folder still declares with @student_kernel (all eleven until a student starts)."""
    found = set()
    for path in (REPO / template).glob("*.py"):
        found |= set(re.findall(r'^@student_kernel\("(\w+)"', path.read_text(), re.M))
    return found


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("template", TRACK_TEMPLATES)
def test_committed_template_is_what_make_template_generates(template, capsys):
    if template_todos(template) != set(STUDENT_KERNELS):
        pytest.skip("the template holds a student's kernels; the generator check guards the pristine template")
    code = make_template.main(["--check", "--track", track_of(template)])
    out = capsys.readouterr().out
    assert code == 0, out


@pytest.mark.parametrize("template", TRACK_TEMPLATES)
def test_template_is_the_course_path_with_eleven_todo_kernels(template):
    """Every example file but the fast path and the CuPy baseline, with each course kernel a signature and
    its docstring under @student_kernel, and every other kernel written out; --filled keeps them all."""
    example, track = TRACK_TEMPLATES[template][0], track_of(template)
    files = make_template.render(track=track)
    example_files = {p.name for p in (REPO / example).glob("*.py")}
    not_course = {name for name in example_files if name.startswith(("fast_", "cupy_"))}
    assert not_course and set(files) == (example_files - not_course) | {"README.md"}
    kernel_decorator = {"triton": "triton.jit", "cutile": "ct.kernel"}[track]
    declared = []
    for rel, text in files.items():
        if not rel.endswith(".py"):
            continue
        assert not re.search(r"(from|import) \.?(fast_|cupy_)", text), f"{rel} reaches beyond the course path"
        assert text.startswith(f"# Generated from {example}/"), rel
        assert not re.search(r"^# (>>>|<<<) STUDENT KERNEL", text, re.M), rel
        assert example not in text.replace(f'reference="{example}.', "").replace(f"# Generated from {example}/", ""), rel
        for fn in ast.parse(text).body:
            if not isinstance(fn, ast.FunctionDef) or not fn.decorator_list:
                continue
            decorators = [ast.unparse(d) for d in fn.decorator_list]
            if decorators[0].startswith("student_kernel("):
                declared.append(fn.name)
                # The TODO: a signature and its docstring, no statement of the solution.
                assert len(fn.body) == 1 and ast.get_docstring(fn), f"{rel}: {fn.name} has a body"
                assert f"reference='{example}.{rel[:-3]}'" in decorators[0]
            elif kernel_decorator in decorators:
                assert fn.name not in STUDENT_KERNELS, f"{rel}: {fn.name} is written out in the template"
    assert sorted(declared) == sorted(STUDENT_KERNELS)
    filled = make_template.render(f"glm_asr_{track}_filled", filled=True, track=track)
    assert "README.md" not in filled and not any("student_kernel" in t for t in filled.values())
    written_out = f"@{kernel_decorator}\ndef "
    assert sum(t.count(written_out) for t in filled.values()) == sum(
        (REPO / example / rel).read_text().count(written_out) for rel in filled)


def test_filled_package_name_picks_the_track(tmp_path):
    assert make_template.main(["--filled", str(tmp_path), "--package", "glm_asr_cutile_filled"]) == 0
    text = (tmp_path / "glm_asr_cutile_filled" / "layers.py").read_text()
    assert "def linear_kernel_tf32(" in text and "ct.mma" in text


def _example_copy(tmp_path, edit):
    src = tmp_path / "glm_asr_triton_example"
    src.mkdir()
    for p in (REPO / "glm_asr_triton_example").glob("*.py"):
        (src / p.name).write_text(p.read_text())
    edit(src)
    return src


@pytest.mark.parametrize("breakage, message", [
    (lambda s: _replace(s / "layers.py", "# <<< STUDENT KERNEL\n", "", count=1), "opens inside the rmsnorm_kernel"),
    (lambda s: _replace(s / "rope.py", "# <<< STUDENT KERNEL\n", "", last=True), "never closed"),
    (lambda s: (_replace(s / "rope.py", "# >>> STUDENT KERNEL compute_freqs_kernel\n", ""),
                _replace(s / "rope.py", "# <<< STUDENT KERNEL\n", "", count=1)), "not marked: compute_freqs_kernel"),
    (lambda s: _replace(s / "layers.py", '    """Exact GELU', '    """Exact GELU', doc_strip="gelu_kernel"),
     "needs a docstring"),
    (lambda s: _replace(s / "attention.py", "# >>> STUDENT KERNEL softmax_inplace_kernel",
                        "# >>> STUDENT KERNEL softmax_kernel"), "the function is softmax_inplace_kernel"),
])
def test_template_generator_rejects_broken_markers(tmp_path, breakage, message):
    src = _example_copy(tmp_path, breakage)
    with pytest.raises(make_template.TemplateError, match=message):
        make_template.render(source_dir=src)


def _replace(path, old, new, count=-1, doc_strip=None, last=False):
    text = path.read_text()
    if last:  # only the last occurrence
        head, _, tail = text.rpartition(old)
        text = head + new + tail
    elif doc_strip:  # drop the kernel's docstring
        start = text.index(f"def {doc_strip}(")
        a = text.index('    """', start)
        b = text.index('"""\n', a + 7) + 4
        text = text[:a] + text[b:]
    else:
        assert old in text
        text = text.replace(old, new, count)
    path.write_text(text)


@pytest.fixture(scope="session")
def filled_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("filled")
    assert make_template.main(["--filled", str(out), "--package", FILLED]) == 0
    sys.path.insert(0, str(out))
    return out


# --------------------------------------------------------------------------------------------------
# The filled template end to end
# --------------------------------------------------------------------------------------------------


def test_filled_template_greedy_ids_match_transformers(filled_dir, tiny_ckpt, clips):
    import importlib

    from parity import hf_generate, hf_model, inputs_for
    from glm_asr_course.tracks import open_checkpoint

    ckpt = open_checkpoint(str(tiny_ckpt), torch.float32)
    model = importlib.import_module(f"{FILLED}.model").load_model(ckpt.config, ckpt.weights, DEV, "fp32")
    inputs = inputs_for(ckpt, [load_audio(clips["short"])])
    new_tokens = 16
    expected = hf_generate(hf_model(tiny_ckpt), inputs, new_tokens, new_tokens, ckpt.config.eos_token_ids)
    assert len(set(expected[0])) > 3, "degenerate reference"
    assert model.generate(inputs, new_tokens, new_tokens) == expected


# --------------------------------------------------------------------------------------------------
# benchmark_student.py with the template: --allow-reference, and the TODO error
# --------------------------------------------------------------------------------------------------


def run_benchmark(argv, capsys):
    import benchmark_student

    with pytest.raises(SystemExit) as exit_info:
        run_cli(benchmark_student.main, argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.parametrize("template", TRACK_TEMPLATES)
def test_template_allow_reference_all_end_to_end(template, tiny_ckpt, clips, tmp_path, capsys):
    """Every course kernel stands in for its TODO and every one of them runs: the template's ids are
    the example's course path's and transformers'."""
    from parity import hf_generate, hf_model, inputs_for, track_model

    new_tokens = 6
    common = ["--audio", str(clips["short"]), "--model", str(tiny_ckpt), "--device", "cpu", "--precision", "fp32",
              "--min-new-tokens", str(new_tokens), "--max-new-tokens", str(new_tokens), "--runs", "1", "--warmup", "0"]
    out_json = tmp_path / "template.json"
    code, out, err = run_benchmark([template, *common, "--allow-reference", "all", "--json", str(out_json)], capsys)
    assert code == 0, out + err
    data = json.loads(out_json.read_text())
    assert data["path"] == "course"
    assert data["substituted_kernels"] == sorted(template_todos(template))
    example, ckpt = track_model(f"{TRACK_TEMPLATES[template][0]}:course", tiny_ckpt)
    inputs = inputs_for(ckpt, [load_audio(clips["short"])])
    expected = hf_generate(hf_model(tiny_ckpt), inputs, new_tokens, new_tokens, ckpt.config.eos_token_ids)[0]
    assert len(set(expected)) > 3, "degenerate reference"
    assert data["token_ids"] == example.generate(inputs, new_tokens, new_tokens)[0] == expected
    status = [line for line in out.splitlines() if line.startswith("Status: ")]
    assert len(status) == 1
    if data["substituted_kernels"]:
        names = ", ".join(data["substituted_kernels"])
        assert status[0] == f"Status: NOT CHECKED (random weights) (reference kernels: {names})"
        assert f"Reference kernels: {len(data['substituted_kernels'])} of the example's kernels" in out


@pytest.mark.parametrize("template", TRACK_TEMPLATES)
@pytest.mark.parametrize("kernel", STUDENT_KERNELS)
def test_every_course_kernel_is_on_the_template_path(template, kernel, tiny_ckpt, capsys):
    """With every other kernel stood in for by the example's, a transcription still reaches the one
    left TODO and stops there, naming it and its GUIDE section: no kernel of the course is off the
    model's path."""
    if kernel not in template_todos(template):
        pytest.skip(f"{kernel} is written: this check needs it TODO (it holds for the generated template)")
    others = ",".join(k for k in STUDENT_KERNELS if k != kernel)
    code, out, err = run_benchmark([template, "--model", str(tiny_ckpt), "--device", "cpu", "--max-new-tokens", "2",
                                    "--runs", "1", "--warmup", "0", "--allow-reference", others], capsys)
    assert code == 2, out
    line = _one_error_line(err)
    assert line.startswith(f"error: {kernel} in {template}/"), line
    guide = f"{TRACK_TEMPLATES[template][1]}#{kernel}"
    assert guide in line and f"--allow-reference {kernel}" in line


def _one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("template", TRACK_TEMPLATES)
def test_template_allow_reference_unknown_kernel_exits_2(template, tiny_ckpt, capsys):
    code, out, err = run_benchmark([template, "--model", str(tiny_ckpt), "--device", "cpu",
                                    "--allow-reference", "apply_rope_kernel,flash_kernel"], capsys)
    assert code == 2
    line = _one_error_line(err)
    assert "flash_kernel" in line and "apply_rope_kernel" in line and "Loaded audio" not in out


def test_allow_reference_names_need_a_template(tiny_ckpt, capsys):
    code, _, err = run_benchmark(["glm_asr_scratch", "--model", str(tiny_ckpt), "--device", "cpu",
                                  "--allow-reference", "rmsnorm_kernel"], capsys)
    assert code == 2 and "no student kernels" in _one_error_line(err)


def test_template_without_allow_reference_exits_2_naming_the_todo(tiny_ckpt, capsys):
    if not template_todos():
        pytest.skip("every template kernel is written")
    code, out, err = run_benchmark([TEMPLATE, "--model", str(tiny_ckpt), "--device", "cpu", "--max-new-tokens", "2",
                                    "--runs", "1", "--warmup", "0"], capsys)
    assert code == 2, out
    line = _one_error_line(err)
    kernel = re.match(r"error: (\w+) in (\S+) is a TODO", line)
    assert kernel and kernel.group(1) in template_todos(), line
    file = {"compute_freqs_kernel": "rope"}.get(kernel.group(1), "layers")  # the model loads, then encodes
    assert kernel.group(2) == f"{TEMPLATE}/{file}.py"
    assert f"docs/guide-triton.md#{kernel.group(1)}" in line and f"--allow-reference {kernel.group(1)}" in line
    assert "(--allow-reference all: the example's kernel for every unwritten one)" in line  # past every TODO at once


def test_template_todo_kernel_raises_and_substitutes():
    from glm_asr_course.kernels.todo_kernels import KernelTodo, TodoKernel, student_kernel
    from glm_asr_course.errors import UserError

    @student_kernel("gelu_kernel", reference="glm_asr_triton_example.layers", guide="GUIDE.md#gelu_kernel")
    def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE):
        """doc"""

    assert isinstance(gelu_kernel, TodoKernel) and gelu_kernel.__doc__ == "doc"
    with pytest.raises(KernelTodo) as info, todo_kernels.references_for(None, STUDENT_KERNELS).active():
        gelu_kernel[(1,)]
    assert isinstance(info.value, UserError) and isinstance(info.value, NotImplementedError)
    assert info.value.kernel == "gelu_kernel" and "tests/test_template.py" in str(info.value)
    x = torch.randn(37, device=DEV)
    y = torch.empty_like(x)
    with todo_kernels.references_for("gelu_kernel", STUDENT_KERNELS).active() as references:
        gelu_kernel[(1,)](x, y, 37, BLOCK_SIZE=64)
    assert references.substituted() == ["gelu_kernel"]
    assert torch.allclose(y, torch.nn.functional.gelu(x), atol=1e-6)
    assert todo_kernels.references_for(None, STUDENT_KERNELS).substituted() == []
    with pytest.raises(UserError, match="needs kernel names"):
        todo_kernels.references_for(" , ", STUDENT_KERNELS)
