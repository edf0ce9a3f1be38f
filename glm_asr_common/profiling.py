"""Named regions the tracks mark in their forward pass, so profilers can attribute time to components.

``region(name)`` is a torch.profiler range (and an NVTX range when nsys is recording): free enough to
leave in the forward pass, visible to benchmark_detailed.py and Nsight Systems. Names used by every
track: encoder.conv, encoder.layer, encoder.norm, projector, decoder.embed, decoder.layer, decoder.head.
"""

from contextlib import contextmanager

import torch

NVTX = {"enabled": False}


@contextmanager
def region(name: str):
    nvtx = NVTX["enabled"] and torch.cuda.is_available()
    if nvtx:
        torch.cuda.nvtx.range_push(name)
    with torch.profiler.record_function(name):
        yield
    if nvtx:
        torch.cuda.nvtx.range_pop()
