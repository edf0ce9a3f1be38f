"""The repository's packages and what each may import, read from every module's import statements:

    cutile_emulator   a CPU emulator of cuda.tile: imports neither the course nor the lab
    glm_asr_course    what a student's run needs (model, reference, runtimes, kernel checks, timer,
                      command line): never imports the lab
    track folders     glm_asr_*_example, glm_asr_*_template, glm_asr_scratch: the course only
    glm_asr_lab       the instructor's tools (grading, profiling, GPU records): may import the course

Inside the course, a layer imports only from the layers below it:

    errors < model < reference < runtimes < timer < tracks < kernels < command_line < verdict
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COURSE_LAYERS = ["errors", "model", "reference", "runtimes", "timer", "tracks", "kernels", "command_line", "verdict"]
TRACKS = sorted(p.name for p in REPO.glob("glm_asr_*") if (p / "model.py").is_file())


def imported_modules(path: Path, package: tuple[str, ...] | None = None) -> set[str]:
    """The absolute names a module imports (relative imports resolved against its package)."""
    package = path.relative_to(REPO).parts[:-1] if package is None else package
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                module = ".".join(base + ([node.module] if node.module else []))
                found.update([module] if node.module else [f"{module}.{a.name}" for a in node.names])
            else:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def top_names(path: Path, package: tuple[str, ...] | None = None) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(path, package)}


def modules_of(*folders: str):
    for folder in folders:
        yield from sorted((REPO / folder).rglob("*.py"))


def test_the_tracks_exist():
    assert {"glm_asr_triton_example", "glm_asr_triton_template", "glm_asr_cutile_example",
            "glm_asr_cutile_template", "glm_asr_scratch"} <= set(TRACKS)


@pytest.mark.parametrize("path", list(modules_of("cutile_emulator")), ids=lambda p: p.name)
def test_the_emulator_stands_alone(path):
    assert not top_names(path) & {"glm_asr_course", "glm_asr_lab", *TRACKS}, \
        f"{path.relative_to(REPO)} imports {sorted(top_names(path) & {'glm_asr_course', 'glm_asr_lab', *TRACKS})}"


@pytest.mark.parametrize("path", list(modules_of("glm_asr_course", *TRACKS)), ids=lambda p: str(p.relative_to(REPO)))
def test_the_course_never_imports_the_lab(path):
    assert "glm_asr_lab" not in top_names(path), f"{path.relative_to(REPO)} imports the lab"


@pytest.mark.parametrize("path", list(modules_of("glm_asr_course")), ids=lambda p: str(p.relative_to(REPO)))
def test_course_layers_import_only_downward(path):
    layer = path.relative_to(REPO / "glm_asr_course").parts[0].removesuffix(".py")
    if layer == "__init__":
        return
    assert layer in COURSE_LAYERS, f"{path.relative_to(REPO)} is outside the layers {COURSE_LAYERS}"
    for name in imported_modules(path):
        parts = name.split(".")
        if parts[0] != "glm_asr_course" or len(parts) < 2:
            continue
        assert parts[1] in COURSE_LAYERS, f"{path.relative_to(REPO)} imports {name}, not a layer"
        assert COURSE_LAYERS.index(parts[1]) <= COURSE_LAYERS.index(layer), \
            f"{path.relative_to(REPO)} ({layer}) imports upward from {parts[1]}"


def test_a_broken_rule_is_seen(tmp_path):
    """The reader sees an import of the lab in each form a module can write it, nested ones included."""
    for line in ("import glm_asr_lab.grading", "from glm_asr_lab import measure",
                 "from glm_asr_lab.measure.plots import pyplot", "from ...glm_asr_lab import grading"):
        probe = tmp_path / "probe.py"
        probe.write_text(f"def f():\n    {line}\n")
        assert "glm_asr_lab" in top_names(probe, ("glm_asr_course", "kernels")), line
