"""The planted bugs of glm_asr_lab/planted_bugs.toml (typical wrong versions of every course kernel, each a small
edit of the example's kernel) as ``PLANTED[track]``: a list of Bug, each able to plant itself in a copy
of the track. tests/test_planted_bugs.py requires the kernel's own self-check
(glm_asr_course.kernels.kernel_cases) to flag every one FAIL on a CPU.
"""

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Bug:
    kernel: str
    file: str  # the track module that holds the kernel
    what: str
    edits: tuple[tuple[str, str], ...]  # (text of the example's kernel, its replacement), each found once

    @property
    def id(self) -> str:
        return f"{self.kernel}: {self.what}"

    def plant(self, package_dir: Path):
        """Apply the edits to the kernel in a copy of a track (its own source only: its lines, found by
        the parser); each must be found exactly once."""
        path = Path(package_dir) / f"{self.file}.py"
        text = path.read_text()
        kernel = next(node for node in ast.parse(text).body if getattr(node, "name", None) == self.kernel)
        lines = text.splitlines(keepends=True)
        start, end = kernel.lineno - 1, kernel.end_lineno
        source = "".join(lines[start:end])
        for old, new in self.edits:
            assert source.count(old) == 1, f"{self.id}: {old!r} occurs {source.count(old)} times in {self.kernel}"
            source = source.replace(old, new)
        path.write_text("".join(lines[:start]) + source + "".join(lines[end:]))


def load_planted(path: Path = Path(__file__).with_name("planted_bugs.toml")) -> dict[str, list[Bug]]:
    """{track: its bugs, in the table's order}."""
    table = tomllib.loads(path.read_text())
    files = table.pop("files")
    return {track: [Bug(kernel, files[kernel], bug["what"], tuple(map(tuple, bug["edits"])))
                    for kernel, bugs in kernels.items() for bug in bugs]
            for track, kernels in table.items()}


PLANTED = load_planted()
