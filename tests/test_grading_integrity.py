"""The grader's checks on a worker's times (glm_asr_lab/grading/integrity.py), each on its own: the
grader's clock against reported times, the announcements read from a real pipe, the tripwires in the
worker, the roofline floor, and a TAMPERED row never counted faster. The synthetic class's cheats,
graded end to end on the CPU: tests/test_class_grading.py."""

import os
import time

import pytest

from glm_asr_lab.grading import class_report, grading_worker, integrity
from glm_asr_lab.grading.class_grading import Task


def e2e(check_ms, runs_ms, ids=(1, 2, 3), run_ids=None):
    return {"status": "RUN", "check_ms": check_ms, "runs_ms": runs_ms, "token_ids": list(ids),
            "run_ids": [list(ids)] * len(runs_ms) if run_ids is None else run_ids}


def seen(check, runs=(), disorder=""):
    return {"check": check, "runs": list(runs), "disorder": disorder}


def test_honest_gpu_times_agree_with_the_grader_clock():
    # Reported below the window by what the flush, a synchronisation and the pipe take (0.3 ms here).
    assert integrity.timing_problems(e2e(900.0, [5.0, 5.1, 4.9]), seen(900.4, [5.3, 5.4, 5.2]), "cuda") == []


def test_a_third_of_the_time_contradicts_the_grader_clock():
    problems = integrity.timing_problems(e2e(300.0, [1.7, 5.0, 1.6]), seen(900.0, [5.1, 5.2, 5.0]), "cuda")
    assert problems == ["timed run 3 reported 1.6 ms; the grader's clock saw 5 ms (and 2 more runs)"]


@pytest.mark.parametrize("reported, flagged", [(10.0 - integrity.allowed_shortfall(10.0) + 0.01, False),
                                               (10.0 - integrity.allowed_shortfall(10.0) - 0.01, True)])
def test_the_slack_is_one_ms_and_five_percent(reported, flagged):
    assert integrity.allowed_shortfall(10.0) == pytest.approx(1.5)
    assert bool(integrity.timing_problems(e2e(20.0, [reported]), seen(20.0, [10.0]), "cuda")) is flagged


def test_runs_the_grader_did_not_see_or_other_ids():
    assert integrity.timing_problems(e2e(20.0, [5.0, 5.0]), seen(20.0, [5.0]), "cuda") == [
        "it reported 2 timed runs; the grader saw 1"]
    assert integrity.timing_problems(e2e(20.0, [5.0]), seen(None), "cuda") == ["the grader saw no check run"]
    cached = e2e(20.0, [5.0, 5.0, 5.0], run_ids=[[1, 2, 3], [1, 2, 0], [1, 2, 0]])
    assert integrity.timing_problems(cached, seen(20.0, [5.0] * 3), "cuda") == [
        "timed run 2 gave other ids than the check run (2 runs did)"]
    # On a CPU the check run is the one timed run.
    assert integrity.timing_problems(e2e(900.0, [900.0]), seen(905.0), "cpu") == []
    assert integrity.timing_problems(e2e(900.0, [300.0]), seen(905.0), "cpu") == [
        "on a CPU its timed run is its check run; it reported 1 other(s)"]
    assert integrity.timing_problems(e2e(300.0, [300.0]), seen(905.0), "cpu") == [
        "its check run reported 300.0 ms; the grader's clock saw 905.0 ms"]


def test_announcements_are_timed_on_the_grader_clock_as_they_arrive():
    read_fd, write_fd = os.pipe()
    reader = integrity.Announcements(read_fd)
    reader.start()
    time.sleep(0.1)  # waiting on the pipe, as the grader's reader is long before a worker's first window
    announce = integrity.Announcer(write_fd)
    announce("start check")
    time.sleep(0.05)
    announce("end check")
    for pause in (0.02, 0.03):
        announce("start run")
        time.sleep(pause)
        announce("end run")
    announce("end run")
    os.close(write_fd)
    reader.join(timeout=5)
    windows = reader.windows()
    assert 48 <= windows["check"] < 90  # a sleep of 50 ms, on a loaded machine
    assert len(windows["runs"]) == 2 and 18 <= windows["runs"][0] < 60 and 28 <= windows["runs"][1] < 70
    assert windows["disorder"] == "'end run' out of order"


def test_the_tripwire_names_what_was_replaced_and_when():
    from glm_asr_course import timer
    from glm_asr_course.model.engine import GreedyModel

    tripwire = integrity.Tripwire(grading_worker)
    tripwire.check("at the start")
    assert tripwire.replaced() == []
    original_ms_between, original_perf_counter = timer.ms_between, time.perf_counter
    try:
        timer.ms_between = lambda start, end: 0.0
        tripwire.check("after its import")
        time.perf_counter = lambda: 0.0
        tripwire.check("after the check run")
    finally:
        timer.ms_between, time.perf_counter = original_ms_between, original_perf_counter
    tripwire.check("after the timed runs")  # put back: still reported, as first seen

    class Model(GreedyModel):
        def __init__(self):
            self.generate = lambda *args: [[1]]

    tripwire.check_model(Model(), "course", "after the model was loaded")
    assert tripwire.replaced() == [
        "glm_asr_course.timer.ms_between (after its import)", "time.perf_counter (after the check run)",
        "the model's generate (an attribute of its own) (after the model was loaded)",
        f"the model ({__name__}.Model, not the course model's class) (after the model was loaded)"]


def test_a_run_below_the_roofline_floor_did_not_do_the_work():
    assert integrity.below_floor([0.02, 5.0], 1.3) == \
        "a timed run of 0.02 ms is below the transcription's roofline floor, 1.3 ms"
    assert integrity.below_floor([1.3, 5.0], 1.3) == "" and integrity.below_floor([], 1.3) == ""


def test_a_tampered_submission_keeps_its_correctness_and_is_never_faster():
    task = Task("mallory", "submission", "triton", "course", "key")

    class Plan:
        expected = None

    base = {"status": "DONE", "note": "", "log": "", "seconds": 1.0, "seen": {"check": 900.0, "runs": [10.0] * 5},
            "worker": {"e2e": e2e(900.0, [10.0, 10.1, 9.9, 10.0, 10.0]), "rows": [], "random_weights": True,
                       "header": {"precision": "fp32"}, "floors": {"3": {"floor_ms": 1.0}}}}
    fast = {"e2e": e2e(900.0, [5.0, 5.1, 4.9, 5.0, 5.0]), "rows": [], "random_weights": True,
            "header": {"precision": "fp32"}}
    records = {"baseline-triton-course": base, "baseline-transformers": None,
               "mallory": {"status": "DONE", "note": "", "log": "", "seconds": 1.0, "worker": fast,
                           "seen": {"check": 900.0, "runs": [5.0] * 5}}}
    row = class_report.student_row(Plan(), task, records)
    assert row["status"] == "PASS" and row["correct_and_faster"] and row["grader_clock_ms"] == 5.0
    records["mallory"] = dict(records["mallory"], status="TAMPERED", note="replaced in its process: time.perf_counter")
    row = class_report.student_row(Plan(), task, records)
    assert (row["status"], row["correctness"], row["correct_and_faster"]) == ("TAMPERED", "PASS", False)
    assert row["time_ms"] is None and row["speedup_vs_course"] is None and row["ids_equal_course_baseline"]
    # Faster than the floor: the work was not done, whatever the clocks say.
    below = dict(fast, e2e=e2e(0.5, [0.5, 0.5, 0.5]))
    records["mallory"] = {"status": "DONE", "note": "", "log": "", "seconds": 1.0, "worker": below,
                          "seen": {"check": 0.5, "runs": [0.5] * 3}}
    row = class_report.student_row(Plan(), task, records)
    assert (row["status"], row["correctness"], row["correct_and_faster"]) == ("TAMPERED", "PASS", False)
    assert row["note"] == "a timed run of 0.5 ms is below the transcription's roofline floor, 1 ms"
