"""Named regions the tracks mark in their forward pass, so profilers can attribute time to components.

``region(name)`` is a torch.profiler range (and an NVTX range when nsys is recording): free enough to
leave in the forward pass, visible to benchmark_detailed.py and Nsight Systems. Names used by every
track: encoder (the whole encode_audio), encoder.conv, encoder.layer, encoder.norm, projector,
decoder.embed, decoder.prefill, decoder.layer, decoder.head, decoder.step (one decode step).
glm_asr_lab.measure.trace reads them; a RegionTimer (measure.components) also times them while it is set here.
NVTX: ``GLM_ASR_NVTX=1`` in the environment turns the NVTX ranges on (``benchmark_detailed.py --nsys``).
"""

import os
from contextlib import contextmanager
from contextvars import ContextVar

import torch

NVTX = {"enabled": os.environ.get("GLM_ASR_NVTX", "0") not in ("", "0", "false", "False")}

REGION_NAMES = ("encoder", "encoder.conv", "encoder.layer", "encoder.norm", "projector", "decoder.embed",
                "decoder.prefill", "decoder.layer", "decoder.head", "decoder.step")

# The active timer (measure.components.RegionTimer) of the measurement in progress in this context, if any.
_TIMER: ContextVar = ContextVar("region_timer", default=None)


def set_timer(timer) -> None:
    """Make ``timer`` (an object with enter(name) -> mark and exit(mark)) see every region, or None."""
    _TIMER.set(timer)


@contextmanager
def region(name: str):
    nvtx = NVTX["enabled"] and torch.cuda.is_available()
    timer = _TIMER.get()
    mark = timer.enter(name) if timer is not None else None
    if nvtx:
        torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if nvtx:
            torch.cuda.nvtx.range_pop()
        if timer is not None:
            timer.exit(mark)
