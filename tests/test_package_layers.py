"""glm_asr_common is split by layer, and a layer imports only from the layers below it:

    errors < model < reference < measure < runtimes < course < tools

(model: what a track needs to run; reference: what tracks are judged against; measure: FLOPs, bytes,
profiles; runtimes: how kernels run where there is no GPU, or how cuTile runs on one; course: TODO
stand-ins, the kernels' cases, self-checks; tools: what the command-line tools share.) Read from every
module's import statements.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "glm_asr_common"
LAYERS = ["errors", "model", "reference", "measure", "runtimes", "course", "tools"]


def imported_layers(path: Path) -> set[str]:
    """The glm_asr_common layers a module imports (absolute or relative), by their top name."""
    here = path.relative_to(PACKAGE).parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[:len(here) - node.level + 1]) if node.level <= len(here) + 1 else []
                parts = base + (node.module.split(".") if node.module else [])
                names = [parts[0]] if parts else [alias.name for alias in node.names]
            elif node.module and node.module.startswith("glm_asr_common."):
                names = [node.module.split(".")[1]]
            elif node.module == "glm_asr_common":
                names = [alias.name for alias in node.names]
            else:
                continue
            found.update(names)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("glm_asr_common."))
    return found


def test_every_module_sits_in_a_layer():
    for path in PACKAGE.rglob("*.py"):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        assert layer in LAYERS + ["__init__"], f"{path.relative_to(PACKAGE)} is outside the layers {LAYERS}"


def test_layers_import_only_downward():
    for path in PACKAGE.rglob("*.py"):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if layer == "__init__":
            continue
        for other in imported_layers(path):
            assert other in LAYERS, f"{path.relative_to(PACKAGE)} imports {other!r}, not a layer"
            assert LAYERS.index(other) <= LAYERS.index(layer), \
                f"{path.relative_to(PACKAGE)} ({layer}) imports upward from {other}"
