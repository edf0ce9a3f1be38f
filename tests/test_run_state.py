"""A run's state is its own: the reference substitutions (--allow-reference, the demo's toggle) of one run
are neither seen nor changed by another in the same process, at the same time (two browser tabs of the
demo, each in its own thread) or one after the other."""

import threading

import pytest

from glm_asr_course.kernels import self_check, todo_kernels
from glm_asr_course.kernels.todo_kernels import KernelTodo, references_for, student_kernel
from glm_asr_course.model import regions

KERNELS = ["gelu_kernel", "silu_kernel"]


@student_kernel("gelu_kernel", reference="glm_asr_triton_example.layers", guide="GUIDE.md#gelu_kernel")
def gelu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE):
    """doc"""


def run(spec: str | None, started: threading.Barrier, outcome: dict):
    """One run: its own references, a launch while the other run is in progress too."""
    with references_for(spec, KERNELS, "the folder").active() as references:
        started.wait(timeout=30)
        try:
            outcome["kernel"] = gelu_kernel.resolve()
        except KernelTodo as todo:
            outcome["kernel"] = todo
        outcome["launches"] = todo_kernels.reference_launches()
        started.wait(timeout=30)  # both have launched before either run ends
    outcome["substituted"] = references.substituted()


def test_two_runs_at_once_do_not_share_their_references():
    started, allowed, refused = threading.Barrier(2), {}, {}
    threads = [threading.Thread(target=run, args=("all", started, allowed)),
               threading.Thread(target=run, args=(None, started, refused))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert allowed["kernel"] is gelu_kernel.reference_kernel() and allowed["launches"] == 1
    assert allowed["substituted"] == ["gelu_kernel"]
    assert isinstance(refused["kernel"], KernelTodo) and refused["launches"] == 0 and refused["substituted"] == []


def test_a_later_run_starts_afresh_and_leaves_the_earlier_record_alone():
    with references_for("gelu_kernel", KERNELS).active() as first:
        gelu_kernel.resolve()
    with pytest.raises(KernelTodo), references_for("silu_kernel", KERNELS).active() as second:
        gelu_kernel.resolve()
    assert first.substituted() == ["gelu_kernel"] and second.substituted() == []
    with pytest.raises(KernelTodo):  # outside any run nothing is allowed
        gelu_kernel.resolve()


def test_recordings_and_region_timers_belong_to_their_thread():
    """A report's recording of self-checks and a measurement's region timer, in one thread, are not
    another thread's."""
    seen = {}

    def elsewhere():
        seen["recording"], seen["timer"] = self_check._RECORDING.get(), regions._TIMER.get()

    with self_check.recording_checks() as recorded:
        regions.set_timer(object())
        try:
            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join(timeout=30)
        finally:
            regions.set_timer(None)
    assert recorded == [] and seen == {"recording": None, "timer": None}
