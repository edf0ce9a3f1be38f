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

The cheats: the kernels are right, and layers.py, at import, games the time (docs/grading_integrity.md
says what catches each):

    cheat_timer   the course timer's ms_between returns a third of the time
    cheat_events  torch.cuda.Event.elapsed_time returns a third of the time (GPU timing only)
    cheat_clock   time.perf_counter runs at a third of the speed (the CPU's timing)
    cheat_quiet   as cheat_timer, and the grader's tripwires in the worker are made to see nothing
    cheat_cache   the model's generate keeps each transcription's ids by the inputs' contents, and a
                  later run with the same contents returns them without computing
    cheat_stream  (GPU only; on a CPU an honest copy) the tripwires silenced, and after the check run
                  and the warm-up, generate returns the warm-up's ids and queues GPU work as long as
                  the warm-up on a side stream, which the timing events (on the current stream) do
                  not see

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

CHEATS = ("cheat_timer", "cheat_events", "cheat_clock", "cheat_quiet", "cheat_cache", "cheat_stream")
KINDS = ("correct", "wrong", "todo", "crash", "sleeper", "chatty", "tamper", *CHEATS)
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
    "cheat_timer": ("import glm_asr_course.timer as _timer\n"
                    "_ms_between = _timer.ms_between\n"
                    "_timer.ms_between = lambda start, end: _ms_between(start, end) / 3\n"),
    "cheat_events": ("_elapsed_time = torch.cuda.Event.elapsed_time\n"
                     "torch.cuda.Event.elapsed_time = lambda self, end: _elapsed_time(self, end) / 3\n"),
    "cheat_clock": ("import time as _time\n"
                    "_perf_counter = _time.perf_counter\n"
                    "_time.perf_counter = lambda: _perf_counter() / 3\n"),
    "cheat_quiet": ("import glm_asr_course.timer as _timer\n"
                    "from glm_asr_lab.grading import integrity as _integrity\n"
                    "_ms_between = _timer.ms_between\n"
                    "_timer.ms_between = lambda start, end: _ms_between(start, end) / 3\n"
                    "_integrity.Tripwire.check = _integrity.Tripwire.check_model = lambda *args: None\n"),
    "cheat_cache": ("import hashlib as _hashlib\n"
                    "from glm_asr_course.model import engine as _engine\n"
                    "_generate, _kept = _engine.GreedyModel.generate, dict()\n"
                    "def _kept_generate(self, inputs, *args, **kwargs):\n"
                    "    key = _hashlib.sha256(inputs.input_features.tobytes() + repr(args).encode()).hexdigest()\n"
                    "    if key not in _kept:\n"
                    "        _kept[key] = _generate(self, inputs, *args, **kwargs)\n"
                    "    return _kept[key]\n"
                    "_engine.GreedyModel.generate = _kept_generate\n"),
    "cheat_stream": ("if torch.cuda.is_available():\n"
                     "    import time as _time\n"
                     "    from glm_asr_course.model import engine as _engine\n"
                     "    from glm_asr_lab.grading import integrity as _integrity\n"
                     "    _integrity.Tripwire.check = _integrity.Tripwire.check_model = lambda *args: None\n"
                     "    _generate, _side, _computed = _engine.GreedyModel.generate, torch.cuda.Stream(), []\n"
                     "    def _beside_generate(self, inputs, *args, **kwargs):\n"
                     "        if len(_computed) < 2:  # the check run (it compiles) and the warm-up\n"
                     "            started = _time.perf_counter()\n"
                     "            ids = _generate(self, inputs, *args, **kwargs)\n"
                     "            _computed.append((ids, _time.perf_counter() - started))\n"
                     "            return ids\n"
                     "        ids, seconds = _computed[-1]\n"
                     "        with torch.cuda.stream(_side):\n"
                     "            torch.cuda._sleep(int(seconds * 1.5e9))\n"
                     "        return ids\n"
                     "    _engine.GreedyModel.generate = _beside_generate\n"),
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
        added = AT_IMPORT[kind].format(grading=str(grading_dir)) if kind == "tamper" else AT_IMPORT[kind]
        layers.write_text(layers.read_text() + "\n" + added)
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
