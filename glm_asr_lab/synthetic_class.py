#!/usr/bin/env python3
"""A synthetic class for the class grader: student copies of a template, one per thing a grader meets.

    python -m glm_asr_lab.synthetic_class SUBMISSIONS_DIR [--track triton|cutile] [--kinds KIND,...]
                                    [--grading-dir DIR]

Each kind is a folder SUBMISSIONS_DIR/KIND, made from the template with the example's kernel bodies
(glm_asr_lab/make_template.py --filled), then:

    correct   left as it is: every kernel right
    wrong     one subtly wrong kernel: GELU by the tanh approximation (glm_asr_lab/planted_bugs.py), which
              differs from the exact GELU by ~5e-5
    todo      one kernel (silu_kernel) left as the template has it, a TODO
    crash     layers.py raises at import
    sleeper   layers.py sleeps an hour at import (past any --time-limit)
    chatty    layers.py prints 5 MB at import; the kernels are right
    tamper    layers.py overwrites the grader's grades.csv and the result of `correct` in --grading-dir
              at import (what a submission must not be able to do); the kernels are right

The tests (tests/test_class_grading.py) and the GPU check (utils/gpu_check.sh grade) grade these.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import sys
from pathlib import Path

from glm_asr_lab import make_template
from glm_asr_lab.planted_bugs import PLANTED

KINDS = ("correct", "wrong", "todo", "crash", "sleeper", "chatty", "tamper")
WRONG = ("gelu_kernel", "tanh approximation")
TODO = ("silu_kernel", "layers")

# What the kinds that misbehave at import add at the end of layers.py (run when the model imports it).
AT_IMPORT = {
    "crash": 'raise RuntimeError("this submission raises at import")\n',
    "sleeper": "import time as _time\n_time.sleep(3600)\n",
    "chatty": 'import sys as _sys\n_sys.stdout.write(("chatter " * 127 + "\\n") * 5200)\n',
    "tamper": ('from pathlib import Path as _Path\n'
               'for _name in ("grades.csv", "results/correct.json"):\n'
               '    try:\n'
               '        (_Path({grading!r}) / _name).write_text("overwritten by a submission")\n'
               '    except OSError:\n'
               '        pass\n'),
}


def leave_todo(package_dir: Path, track: str, kernel: str, file: str):
    """Put the template's TODO stand-in of ``kernel`` back in place of its body, the rest of the file kept."""
    template = make_template.render(make_template.TRACKS[track].template, track=track)[f"{file}.py"]
    path = package_dir / f"{file}.py"
    filled = path.read_text()

    def span(text):
        lines = text.splitlines(keepends=True)
        node = next(n for n in ast.parse(text).body if getattr(n, "name", None) == kernel)
        return lines, node.decorator_list[0].lineno - 1, node.end_lineno

    lines, start, end = span(filled)
    template_lines, template_start, template_end = span(template)
    text = "".join(lines[:start] + template_lines[template_start:template_end] + lines[end:])
    anchor = make_template.TRACKS[track].import_after.search(text)
    path.write_text(text[:anchor.end()] + "\n" + make_template.IMPORT_LINE + text[anchor.end():])


def make_submission(out: Path, kind: str, track: str, grading_dir: str | None) -> Path:
    """SUBMISSIONS_DIR/KIND: a student's copy of the template folder, as the kind says."""
    target = out / kind
    shutil.rmtree(target, ignore_errors=True)
    template = make_template.TRACKS[track].template
    make_template.write(make_template.render(template, filled=True, track=track), target)
    if kind == "wrong":
        next(b for b in PLANTED[track] if (b.kernel, b.what) == WRONG).plant(target)
    elif kind == "todo":
        leave_todo(target, track, *TODO)
    elif kind in AT_IMPORT:
        if kind == "tamper" and grading_dir is None:
            raise SystemExit("error: the tamper kind needs --grading-dir (the grader's --out)")
        layers = target / "layers.py"
        layers.write_text(layers.read_text() + "\n" + AT_IMPORT[kind].format(grading=str(grading_dir)))
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="synthetic_class.py")
    parser.add_argument("out", metavar="SUBMISSIONS_DIR")
    parser.add_argument("--track", choices=list(make_template.TRACKS), default="triton")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of: {', '.join(KINDS)}")
    parser.add_argument("--grading-dir", help="the grader's output folder, which the tamper kind overwrites")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for kind in kinds:
        make_submission(out, kind, args.track, args.grading_dir)
    print(f"wrote {len(kinds)} {args.track} submissions into {out}: {', '.join(kinds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
