"""Whether a grade's times can be believed: checks a submission cannot pass by replacing what times it.

A worker (grading_worker.py) runs a student's code in its own process, so anything that process holds
can be replaced when the code is imported: the course's timer, torch's CUDA events, the clocks, the
model's generate, the worker itself. Checks of two strengths (docs/grading_integrity.md says why):

The grader's clock (this module's ``Announcements``, in the grader's process, out of the worker's
reach). The worker announces the start and end of its check run and of each timed run on a pipe of
their own; the grader timestamps each line as it arrives. A reported time may fall short of the
window the grader saw by ``SLACK_MS`` plus ``SLACK_FRACTION`` of it at most: what lies in the window
and not in the timing (the end of the L2 flush, a synchronisation, two pipe writes) is well under
that. So a replaced timer, event timing or clock, and work on a side stream that the timing events
do not see (the worker synchronises the whole device before it announces an end), show as a
reported time the grader's clock contradicts. Each timed run's ids must also be the check run's.

Tripwires in the worker (``Tripwire``): the functions that time a run, and the model's methods, are
compared by identity, before the submission's code is imported and after each stage, with what they
were. They name what was replaced; code that replaces them too silences them, which the grader's
clock does not depend on.

The third check, a time below the transcription's roofline floor (work that was not done), needs the
course baseline's floors: class_report.student_row makes it.
"""

from __future__ import annotations

import os
import threading
import time

# What a reported time may fall short of the grader's window by (see the module's docstring).
SLACK_MS, SLACK_FRACTION = 1.0, 0.05
ANNOUNCEMENTS_LIMIT_BYTES = 64 << 10  # far above what the at most 51 windows of a worker take
CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")
TIMER_FUNCTIONS = ("synchronize", "mark", "ms_between", "time_call", "time_repeats", "time_launches")
EVENT_METHODS = ("record", "elapsed_time", "synchronize", "query", "wait")
CUDA_FUNCTIONS = ("synchronize", "current_stream", "stream", "Event", "Stream")
_MISSING = object()


# ------------------------------------------------------------------------------------------------
# In the worker: announcements, tripwires
# ------------------------------------------------------------------------------------------------


class Announcer:
    """The worker's side of the announcement pipe (its file descriptor is in the request)."""

    def __init__(self, fd: int | None):
        self.fd = fd

    def __call__(self, what: str):
        if self.fd is not None:
            os.write(self.fd, f"{what}\n".encode())


def guarded_places(worker_module) -> dict[str, tuple[object, str]]:
    """{name: (object, attribute)} of everything that times a run or makes its ids, where the code that
    times looks it up: replacing any of them changes a reported time or the work it times."""
    import torch

    from glm_asr_course import command_line, timer
    from glm_asr_course.model import course_model, engine

    places = {f"time.{name}": (time, name) for name in CLOCKS}
    places.update({f"glm_asr_course.timer.{name}": (timer, name) for name in TIMER_FUNCTIONS})
    places.update({"glm_asr_course.timer.time": (timer, "time"), "glm_asr_course.timer.torch": (timer, "torch"),
                   "glm_asr_course.command_line.timed_generate": (command_line, "timed_generate"),
                   "glm_asr_course.command_line.time_call": (command_line, "time_call")})
    places.update({f"torch.cuda.{name}": (torch.cuda, name) for name in CUDA_FUNCTIONS})
    places.update({f"torch.cuda.Event.{name}": (torch.cuda.Event, name) for name in EVENT_METHODS})
    for cls in (engine.GreedyModel, course_model.CourseGlmAsr):
        places.update({f"{cls.__module__}.{cls.__name__}.{name}": (cls, name)
                       for name, value in vars(cls).items() if callable(value)})
    places["glm_asr_course.model.course_model.CourseGlmAsr"] = (course_model, "CourseGlmAsr")
    places.update({f"grading_worker.{name}": (worker_module, name)
                   for name in ("time_transcriptions", "timed_runs", "check_and_time")})
    return places


class Tripwire:
    """What a submission replaced in the worker's process, by identity with what it was at the start."""

    def __init__(self, worker_module):
        self.places = guarded_places(worker_module)
        self.original = {name: getattr(obj, attr, _MISSING) for name, (obj, attr) in self.places.items()}
        self.course_model_class = self.original["glm_asr_course.model.course_model.CourseGlmAsr"]
        self.found: dict[str, str] = {}  # what was replaced: when it was first seen

    def check(self, when: str):
        for name, (obj, attr) in self.places.items():
            if name not in self.found and getattr(obj, attr, _MISSING) is not self.original[name]:
                self.found[name] = when

    def check_model(self, model, path: str, when: str):
        """The model's own generate, and on the course path a model of the course's class."""
        if "generate" in getattr(model, "__dict__", {}):
            self.found.setdefault("the model's generate (an attribute of its own)", when)
        if path == "course" and type(model) is not self.course_model_class:
            self.found.setdefault(f"the model ({type(model).__module__}.{type(model).__name__}, not the course "
                                  "model's class)", when)

    def replaced(self) -> list[str]:
        return [f"{name} ({when})" for name, when in self.found.items()]


# ------------------------------------------------------------------------------------------------
# In the grader: the announcements as they arrive, and what they contradict
# ------------------------------------------------------------------------------------------------


class Announcements(threading.Thread):
    """Reads the announcement pipe, timestamping each line on the grader's clock as it arrives."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.lines: list[tuple[float, str]] = []
        self.total = 0

    def run(self):
        pending = b""
        with os.fdopen(self.fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(4096):
                seen = time.perf_counter()
                self.total += len(chunk)
                if self.total > ANNOUNCEMENTS_LIMIT_BYTES:
                    continue  # drained, not kept: more than any worker announces
                *complete, pending = (pending + chunk).split(b"\n")
                self.lines += [(seen, line.decode(errors="replace")) for line in complete]

    def windows(self) -> dict:
        """{"check": ms of the check run's window or None, "runs": [ms of each timed run's window],
        "disorder": what was out of order, or ""}: completed start/end pairs, in order."""
        seen = {"check": None, "runs": [], "disorder": ""}
        if self.total > ANNOUNCEMENTS_LIMIT_BYTES:
            seen["disorder"] = f"more than {ANNOUNCEMENTS_LIMIT_BYTES >> 10} kB of announcements"
        open_window = None
        for at, line in self.lines:
            what, _, label = line.partition(" ")
            if what == "start" and open_window is None and label in ("check", "run"):
                open_window = (label, at)
            elif what == "end" and open_window is not None and open_window[0] == label:
                ms = (at - open_window[1]) * 1000
                if label == "check":
                    seen["check"] = ms
                else:
                    seen["runs"].append(ms)
                open_window = None
            elif not seen["disorder"]:
                seen["disorder"] = f"{line[:40]!r} out of order"
        return seen


def allowed_shortfall(seen_ms: float) -> float:
    return SLACK_MS + SLACK_FRACTION * seen_ms


def timing_problems(e2e: dict, seen: dict, device: str) -> list[str]:
    """Why the reported times of a worker's end-to-end result (``e2e``, validated) cannot be believed,
    given the windows the grader saw (``Announcements.windows``); empty when nothing contradicts them.
    On a CPU the check run is the one timed run; on a GPU each timed run has a window of its own."""
    if e2e["status"] != "RUN":
        return []
    problems = [f"its announcements: {seen['disorder']}"] if seen["disorder"] else []
    if seen["check"] is None:
        return problems + ["the grader saw no check run"]
    pairs = [("its check run", e2e["check_ms"], seen["check"])]
    runs = e2e["runs_ms"]
    if device == "cpu":
        if runs and runs != [e2e["check_ms"]]:
            problems.append(f"on a CPU its timed run is its check run; it reported {len(runs)} other(s)")
    elif len(runs) != len(seen["runs"]):
        problems.append(f"it reported {len(runs)} timed runs; the grader saw {len(seen['runs'])}")
    else:
        pairs += [(f"timed run {i + 1}", reported, window) for i, (reported, window) in enumerate(zip(runs, seen["runs"]))]
    short = [(what, reported, window) for what, reported, window in pairs if reported < window - allowed_shortfall(window)]
    if short:
        what, reported, window = min(short, key=lambda p: p[1] / p[2])
        others = f" (and {len(short) - 1} more runs)" if len(short) > 1 else ""
        problems.append(f"{what} reported {milliseconds(reported)}; the grader's clock saw {milliseconds(window)}{others}")
    differing = [i for i, ids in enumerate(e2e.get("run_ids") or []) if ids != e2e["token_ids"]]
    if differing:
        problems.append(f"timed run {differing[0] + 1} gave other ids than the check run"
                        + (f" ({len(differing)} runs did)" if len(differing) > 1 else ""))
    return problems


def below_floor(runs_ms: list[float], floor_ms: float) -> str:
    """Why a timed run cannot have done the transcription's work (faster than its roofline floor), or ""."""
    fastest = min(runs_ms, default=None)
    if fastest is None or fastest >= floor_ms:
        return ""
    return f"a timed run of {milliseconds(fastest)} is below the transcription's roofline floor, {milliseconds(floor_ms)}"


def milliseconds(ms: float) -> str:
    return f"{ms:.1f} ms" if ms >= 10 else f"{ms:.3g} ms"
