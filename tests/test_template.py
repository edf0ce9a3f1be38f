"""The student template, glm_asr_triton_template/, generated from the example by utils/make_template.py.

* The committed template is what the generator writes (while it still holds every TODO).
* Unfilled, its self-check scripts report TODO for exactly the course kernels still to write, and
  every other kernel passes.
* Filled from the example (``--filled``, a separate package in a temporary directory), the ten course
  kernels pass checks at several shapes and dtypes, and greedy decoding matches transformers.
* The same kernel checks run on the real template folder, each skipped with reason "TODO" until its
  kernel is written: green CI with the committed template, and a student's kernels tested once written.
* ``benchmark_student.py --allow-reference`` end to end: with every kernel stood in for, the ids are
  the example course path's and transformers'; with all but one, the run stops naming that one, so
  every course kernel is on the model's path. Without the flag, the one-line error.

Select with ``pytest tests -k template``. Without a GPU everything runs in the Triton interpreter.
"""

import json
import os
import re
import subprocess
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "utils"))

import make_template  # noqa: E402

from glm_asr_common import teaching  # noqa: E402
from glm_asr_common.audio import load_audio  # noqa: E402
from glm_asr_common.errors import run_cli  # noqa: E402
from glm_asr_triton_example import STUDENT_KERNELS  # noqa: E402

TEMPLATE = "glm_asr_triton_template"
FILLED = "glm_asr_triton_filled"
DEV = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
FP32, BF16 = torch.float32, torch.bfloat16
# max |out - ref| / max |ref|. fp32 GEMMs run as tf32 on a GPU; bf16 allows a few ulps of the largest value.
ELEMENTWISE_TOL = {FP32: 1e-5, BF16: 1e-2}
GEMM_TOL = {FP32: 3e-3, BF16: 1e-2}


def template_todos() -> set[str]:
    """Kernels the template folder still declares with @student_kernel (all ten until a student starts)."""
    found = set()
    for path in (REPO / TEMPLATE).glob("*.py"):
        found |= set(re.findall(r'^@student_kernel\("(\w+)"', path.read_text(), re.M))
    return found


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------


def test_committed_template_is_what_make_template_generates(capsys):
    if template_todos() != set(STUDENT_KERNELS):
        pytest.skip("the template holds a student's kernels; the generator check guards the pristine template")
    code = make_template.main(["--check"])
    out = capsys.readouterr().out
    assert code == 0, out


def test_template_generator_output_shape():
    files = make_template.render()
    example = {p.name for p in (REPO / "glm_asr_triton_example").glob("*.py")}
    fast_path = {name for name in example if name.startswith("fast_")}
    assert fast_path and set(files) == (example - fast_path) | {"README.md"}
    for rel, text in files.items():
        if rel.endswith(".py"):
            assert "from .fast_" not in text and "import fast_" not in text, f"{rel} reaches the fast path"
            assert text.startswith("# Generated from glm_asr_triton_example/"), rel
            assert not re.search(r"^# (>>>|<<<) STUDENT KERNEL", text, re.M), rel
            assert "glm_asr_triton_example" not in text.replace('reference="glm_asr_triton_example.', "").replace(
                "# Generated from glm_asr_triton_example/", ""), rel
    declared = re.findall(r'^@student_kernel\("(\w+)"', "".join(files.values()), re.M)
    assert sorted(declared) == sorted(STUDENT_KERNELS)
    filled = make_template.render(FILLED, filled=True)
    assert "README.md" not in filled and not any("student_kernel" in t for t in filled.values())


def _example_copy(tmp_path, edit):
    src = tmp_path / "glm_asr_triton_example"
    src.mkdir()
    for p in (REPO / "glm_asr_triton_example").glob("*.py"):
        (src / p.name).write_text(p.read_text())
    edit(src)
    return src


@pytest.mark.parametrize("breakage, message", [
    (lambda s: _replace(s / "layers.py", "# <<< STUDENT KERNEL\n", "", count=1), "opens inside the rmsnorm_kernel"),
    (lambda s: _replace(s / "rope.py", "# <<< STUDENT KERNEL\n", ""), "never closed"),
    (lambda s: (_replace(s / "rope.py", "# >>> STUDENT KERNEL compute_freqs_kernel\n", ""),
                _replace(s / "rope.py", "# <<< STUDENT KERNEL\n", "")), "not marked: compute_freqs_kernel"),
    (lambda s: _replace(s / "layers.py", '    """Exact GELU', '    """Exact GELU', doc_strip="gelu_kernel"),
     "needs a docstring"),
    (lambda s: _replace(s / "attention.py", "# >>> STUDENT KERNEL softmax_inplace_kernel",
                        "# >>> STUDENT KERNEL softmax_kernel"), "the function is softmax_inplace_kernel"),
])
def test_template_generator_rejects_broken_markers(tmp_path, breakage, message):
    src = _example_copy(tmp_path, breakage)
    with pytest.raises(make_template.TemplateError, match=message):
        make_template.render(source_dir=src)


def _replace(path, old, new, count=-1, doc_strip=None):
    text = path.read_text()
    if doc_strip:  # drop the kernel's docstring
        start = text.index(f"def {doc_strip}(")
        a = text.index('    """', start)
        b = text.index('"""\n', a + 7) + 4
        text = text[:a] + text[b:]
    else:
        assert old in text
        text = text.replace(old, new, count)
    path.write_text(text)


# --------------------------------------------------------------------------------------------------
# The unfilled template's self-check scripts
# --------------------------------------------------------------------------------------------------

ROW = re.compile(r"^(\S+)\s+(PASS|FAIL|TODO)\b(.*)$")


def test_template_self_checks_report_todo_for_exactly_the_unwritten_kernels():
    env = dict(os.environ, TRITON_INTERPRET="1")
    procs = {name: subprocess.Popen([sys.executable, str(REPO / TEMPLATE / f"{name}.py")], cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name in ("layers", "attention", "rope", "glue", "conv")}
    rows = {}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}.py self-check exited {proc.returncode}:\n{out}"
        assert "self-check on CPU (Triton interpreter)" in out or "self-check on GPU" in out, out
        for line in out.splitlines():
            match = ROW.match(line)
            if match:
                assert match.group(1) not in rows, f"two rows for {match.group(1)}"
                rows[match.group(1)] = (match.group(2), match.group(3), name)
    todo = template_todos()
    assert {k for k in rows if k in STUDENT_KERNELS} == set(STUDENT_KERNELS), "one row per course kernel"
    assert {k for k, (status, *_) in rows.items() if status == "TODO" and k in STUDENT_KERNELS} == todo
    for kernel, (status, rest, file) in rows.items():
        assert status != "FAIL", f"{file}.py: {kernel} FAIL {rest}"
        if status == "TODO" and kernel not in STUDENT_KERNELS:
            needs = re.search(r"needs (\w+)", rest)
            assert needs and needs.group(1) in todo, f"{kernel} reads TODO without waiting for a TODO kernel"
    if todo == set(STUDENT_KERNELS):  # the committed template: the ten, and the rows built on them
        assert {k for k, (s, *_) in rows.items() if s == "TODO"} - set(STUDENT_KERNELS) == {
            "linear_kernel_tf32[M=1]", "encoder_attention", "decoder_attention[decode]", "compute_freqs_kernel[encoder]"}


# --------------------------------------------------------------------------------------------------
# Course kernel checks, on the filled template and on the real one (skipped while TODO)
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def filled_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("filled")
    assert make_template.main(["--filled", str(out), "--package", FILLED]) == 0
    sys.path.insert(0, str(out))
    return out


def package_modules(variant, request):
    """(layers, attention, rope) modules of the filled or the real template."""
    import importlib

    if variant == "filled":
        request.getfixturevalue("filled_dir")
    package = FILLED if variant == "filled" else TEMPLATE
    return tuple(importlib.import_module(f"{package}.{m}") for m in ("layers", "attention", "rope"))


@contextmanager
def poisoned_outputs(package_dir: Path):
    """Float tensors that the package's launchers allocate start as NaN: unwritten elements fail."""
    empty, empty_like = torch.empty, torch.empty_like

    def from_package():
        return Path(sys._getframe(2).f_code.co_filename).resolve().parent == package_dir.resolve()

    def poison(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    torch.empty = lambda *a, **k: poison(empty(*a, **k)) if from_package() else empty(*a, **k)
    torch.empty_like = lambda *a, **k: poison(empty_like(*a, **k)) if from_package() else empty_like(*a, **k)
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def rel_err(out, ref) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    assert out.shape == ref.shape, (tuple(out.shape), tuple(ref.shape))
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(out), finite), "NaN/inf where the reference is finite (or the reverse)"
    assert torch.equal(out[~finite], ref[~finite]), "masked (-inf) entries differ"
    if not finite.any():
        return 0.0
    return ((out[finite] - ref[finite]).abs().max() / ref[finite].abs().max().clamp_min(1e-30)).item()


def rand(gen, *shape, dtype=FP32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(device=DEV, dtype=dtype)


def case_rmsnorm(m, gen, dtype, shape):
    x, w = rand(gen, *shape, dtype=dtype, scale=2.0), rand(gen, shape[-1], dtype=dtype)
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)
    return lambda: m.layers.rmsnorm(x, w, 1e-5), lambda: w.float() * normed.to(dtype).float(), ELEMENTWISE_TOL[dtype]


def case_layernorm(m, gen, dtype, shape):
    # A non-zero mean: padding lanes that are not zeroed add mean^2 to the variance.
    x = (rand(gen, *shape, scale=2.0) + 0.5).to(dtype)
    w, b = rand(gen, shape[-1], dtype=dtype), rand(gen, shape[-1], dtype=dtype)
    return (lambda: m.layers.layernorm(x, w, b, 1e-5),
            lambda: torch.nn.functional.layer_norm(x.float(), shape[-1:], w.float(), b.float(), 1e-5),
            ELEMENTWISE_TOL[dtype])


def case_gelu(m, gen, dtype, shape):
    x = rand(gen, *shape, dtype=dtype, scale=3.0)
    return lambda: m.layers.gelu(x), lambda: torch.nn.functional.gelu(x.float()), ELEMENTWISE_TOL[dtype]


def case_silu(m, gen, dtype, shape):
    x = rand(gen, *shape, dtype=dtype, scale=3.0)
    if x.numel() > 2:
        x.view(-1)[:2] = torch.tensor([-120.0, 90.0], dtype=dtype)  # exp overflow / underflow ends
    return lambda: m.layers.silu(x), lambda: torch.nn.functional.silu(x.float()), ELEMENTWISE_TOL[dtype]


def case_linear_tf32(m, gen, dtype, shape):
    M, K, N, has_bias = shape
    x, w = rand(gen, M, K, dtype=dtype), rand(gen, N, K, dtype=dtype, scale=K ** -0.5)
    b = rand(gen, N, dtype=dtype) if has_bias else None
    ref = x.double() @ w.double().T + (b.double() if has_bias else 0.0)
    return lambda: m.layers.linear_tf32(x, w, b), lambda: ref, GEMM_TOL[dtype]


def case_softmax(m, gen, dtype, shape):
    x = rand(gen, *shape, dtype=dtype, scale=4.0)
    return lambda: m.layers.softmax(x), lambda: torch.softmax(x.double(), -1), ELEMENTWISE_TOL[dtype]


def case_attention_scores(m, gen, dtype, shape):
    B, H, Tq, Tk, D, causal = shape
    q, k = rand(gen, B, H, Tq, D, dtype=dtype), rand(gen, B, H, Tk, D, dtype=dtype)
    ref = q.double() @ k.double().transpose(-1, -2) * D ** -0.5
    if causal:
        ref = ref.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool, device=DEV).tril(), float("-inf"))
    return lambda: m.attention.attention_scores(q, k, D ** -0.5, causal), lambda: ref, GEMM_TOL[FP32]


def case_softmax_inplace(m, gen, dtype, shape):
    B, H, Tq, Tk, causal = shape
    s = rand(gen, B, H, Tq, Tk, scale=4.0)
    if causal:
        s = s.masked_fill(~torch.ones(Tq, Tk, dtype=torch.bool, device=DEV).tril(), float("-inf"))
    ref = torch.softmax(s.double(), -1)
    return lambda: m.attention.softmax_inplace(s.clone()), lambda: ref, ELEMENTWISE_TOL[FP32]


def case_attention_output(m, gen, dtype, shape):
    B, H, Tq, Tk, D = shape
    p = torch.softmax(rand(gen, B, H, Tq, Tk, scale=3.0), -1)
    v = rand(gen, B, H, Tk, D, dtype=dtype)
    return lambda: m.attention.attention_output(p, v), lambda: p.to(dtype).double() @ v.double(), GEMM_TOL[dtype]


def case_compute_freqs(m, gen, dtype, shape):
    positions, rotary_dim, theta = shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    angle = torch.arange(positions, dtype=torch.float)[:, None] * inv_freq[None, :]
    # Same fp32 angles as transformers; their cos/sin agree to about one fp32 ulp (checked as abs error).
    return (lambda: torch.cat(m.rope.rope_tables(positions, rotary_dim, theta, DEV)),
            lambda: torch.cat([angle.cos(), angle.sin()]), 2.5e-7)


CASES = []  # (kernel, case builder, dtype, shape)
for _dtype in (FP32, BF16):
    for _shape in ((1, 1), (1, 17), (17, 1280), (5, 100)):
        CASES += [("rmsnorm_kernel", case_rmsnorm, _dtype, _shape), ("layernorm_kernel", case_layernorm, _dtype, _shape),
                  ("softmax_kernel", case_softmax, _dtype, _shape)]
    CASES.append(("softmax_kernel", case_softmax, _dtype, (3, 1500)))
    for _shape in ((1,), (17,), (3, 1281)):
        CASES += [("gelu_kernel", case_gelu, _dtype, _shape), ("silu_kernel", case_silu, _dtype, _shape)]
    for _shape in ((1, 17, 5, True), (17, 64, 33, False), (33, 1280, 40, True)):
        CASES.append(("linear_kernel_tf32", case_linear_tf32, _dtype, _shape))
    # Head sizes that are not powers of two (24, 40, 80, 96) run padded and masked.
    for _shape in ((1, 1, 1, 1, 16, False), (2, 3, 17, 17, 64, True), (1, 2, 33, 70, 32, False),
                   (1, 2, 17, 17, 24, True), (1, 1, 9, 40, 40, False), (1, 1, 20, 20, 80, True), (1, 1, 5, 33, 96, False)):
        CASES.append(("attention_scores_kernel", case_attention_scores, _dtype, _shape))
    for _shape in ((1, 1, 1, 1, 16), (2, 3, 17, 17, 64), (1, 2, 33, 70, 32), (1, 2, 17, 17, 24), (1, 1, 20, 33, 80),
                   (1, 1, 5, 9, 96)):
        CASES.append(("attention_output_kernel", case_attention_output, _dtype, _shape))
# Rows of one key, 17, a whole encoder window (1500), one past it, and two windows' worth.
for _shape in ((1, 1, 1, 1, False), (2, 3, 17, 17, True), (1, 2, 33, 70, False), (1, 1, 4, 1500, False),
               (1, 1, 3, 1501, True), (1, 1, 2, 3000, False)):
    CASES.append(("softmax_inplace_kernel", case_softmax_inplace, FP32, _shape))
for _shape in ((1, 32, 10000.0), (17, 128, 10000.0), (1500, 32, 10000.0), (75, 64, 500000.0)):
    CASES.append(("compute_freqs_kernel", case_compute_freqs, FP32, _shape))
assert {c[0] for c in CASES} == set(STUDENT_KERNELS)


def _case_id(case):
    kernel, _, dtype, shape = case
    return f"{kernel}-{str(dtype)[6:]}-{'x'.join(str(s) for s in shape)}"


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")  # silu at -120, interpreted
@pytest.mark.parametrize("variant", ["filled", "template"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_template_course_kernel(variant, case, request):
    kernel, build, dtype, shape = case
    if variant == "template" and kernel in template_todos():
        pytest.skip(f"TODO: {kernel} is not written yet (GUIDE.md#{kernel})")
    layers, attention, rope = package_modules(variant, request)
    modules = type("Modules", (), {"layers": layers, "attention": attention, "rope": rope})
    gen = torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))
    launch, reference, tol = build(modules, gen, dtype, shape)
    teaching.allow_references(None, STUDENT_KERNELS)
    try:
        with poisoned_outputs(Path(layers.__file__).parent):
            out = launch()
    except teaching.KernelTodo as todo:  # a kernel the template still declares TODO under another name
        pytest.skip(f"TODO: {todo.kernel} is not written yet ({todo.guide})")
    if kernel == "compute_freqs_kernel":  # tables of cos / sin: within about one fp32 ulp, absolute
        assert torch.isfinite(out).all()
        err = (out.double().cpu() - reference().double().cpu()).abs().max().item()
    else:
        err = rel_err(out, reference())
    assert err <= tol, f"{kernel} {dtype} {shape}: error {err:.3e} > {tol:.0e}"


# --------------------------------------------------------------------------------------------------
# The filled template end to end
# --------------------------------------------------------------------------------------------------


def test_filled_template_greedy_ids_match_transformers(filled_dir, tiny_ckpt, clips):
    import importlib

    from parity import hf_generate, hf_model, inputs_for
    from glm_asr_common.runtime import open_checkpoint

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


def test_template_allow_reference_all_end_to_end(tiny_ckpt, clips, tmp_path, capsys):
    """Every course kernel stands in for its TODO and every one of them runs: the template's ids are
    the example's course path's and transformers'."""
    from parity import hf_generate, hf_model, inputs_for, track_model

    new_tokens = 6
    common = ["--audio", str(clips["short"]), "--model", str(tiny_ckpt), "--device", "cpu", "--precision", "fp32",
              "--min-new-tokens", str(new_tokens), "--max-new-tokens", str(new_tokens), "--runs", "1", "--warmup", "0"]
    out_json = tmp_path / "template.json"
    code, out, err = run_benchmark([TEMPLATE, *common, "--allow-reference", "all", "--json", str(out_json)], capsys)
    assert code == 0, out + err
    data = json.loads(out_json.read_text())
    assert data["path"] == "course"
    assert data["substituted_kernels"] == sorted(template_todos())
    example, ckpt = track_model("glm_asr_triton_example:course", tiny_ckpt)
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


@pytest.mark.parametrize("kernel", STUDENT_KERNELS)
def test_every_course_kernel_is_on_the_template_path(kernel, tiny_ckpt, capsys):
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


def _one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_template_allow_reference_unknown_kernel_exits_2(tiny_ckpt, capsys):
    code, out, err = run_benchmark([TEMPLATE, "--model", str(tiny_ckpt), "--device", "cpu",
                                    "--allow-reference", "rmsnorm_kernel,flash_kernel"], capsys)
    assert code == 2
    line = _one_error_line(err)
    assert "flash_kernel" in line and "rmsnorm_kernel" in line and "Loaded audio" not in out


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
    assert f"GUIDE.md#{kernel.group(1)}" in line and f"--allow-reference {kernel.group(1)}" in line


def test_template_todo_kernel_raises_and_substitutes():
    from glm_asr_common.teaching import KernelTodo, TodoKernel, student_kernel
    from glm_asr_common.errors import UserError

    @student_kernel("gelu_kernel", reference="glm_asr_triton_example.layers", guide="GUIDE.md#gelu_kernel")
    def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE):
        """doc"""

    assert isinstance(gelu_kernel, TodoKernel) and gelu_kernel.__doc__ == "doc"
    teaching.allow_references(None, STUDENT_KERNELS)
    with pytest.raises(KernelTodo) as info:
        gelu_kernel[(1,)]
    assert isinstance(info.value, UserError) and isinstance(info.value, NotImplementedError)
    assert info.value.kernel == "gelu_kernel" and "tests/test_template.py" in str(info.value)
    teaching.allow_references("gelu_kernel", STUDENT_KERNELS)
    x = torch.randn(37, device=DEV)
    y = torch.empty_like(x)
    gelu_kernel[(1,)](x, y, 37, BLOCK_SIZE=64)
    assert teaching.substituted() == ["gelu_kernel"]
    assert torch.allclose(y, torch.nn.functional.gelu(x), atol=1e-6)
    teaching.allow_references(None, STUDENT_KERNELS)
    assert teaching.substituted() == []
    with pytest.raises(UserError, match="needs kernel names"):
        teaching.allow_references(" , ", STUDENT_KERNELS)
