"""The one timer of every measurement here: a transcription, a kernel launch, a region, a device peak.

On a GPU a time is the span between two CUDA events recorded on the current stream: what the GPU took,
the gaps where it waited for the host included. On a CPU it is the host clock (perf_counter).
``time_repeats`` adds what a launch's time needs: untimed warm-up calls (compilation, autotuning), a
write of ``L2_FLUSH_BYTES`` before each timed call on a GPU (so no call finds its operands left in L2
by the call before), and a CUDA-graph mode that times replays, without the host's launch cost;
``time_launches`` combines the two for a kernel's launch.
"""

import statistics
import time

import torch

L2_FLUSH_BYTES = 256 << 20  # several times the largest L2 (50-60 MiB on an H100 / H200)


def synchronize(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def mark(device: str):
    """A point in time: a CUDA event recorded now on the current stream, or the host clock."""
    if device != "cuda":
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def ms_between(start, end) -> float:
    """Milliseconds from one mark to a later one (a CUDA event pair must have completed)."""
    return (end - start) * 1000 if isinstance(start, float) else start.elapsed_time(end)


def time_call(fn, device: str) -> tuple[float, object]:
    """One call of ``fn``, synchronised before and after: (its ms, its result)."""
    synchronize(device)
    start = mark(device)
    result = fn()
    end = mark(device)
    synchronize(device)
    return ms_between(start, end), result


def time_repeats(fn, device: str, *, warmup: int, repeats: int, flush: bool = False,
                 graph: bool = False) -> list[float]:
    """ms of each of ``repeats`` timed calls of ``fn`` after ``warmup`` untimed ones.

    ``flush`` (GPU): each timed call follows an L2 flush. ``graph`` (GPU): ``fn`` is captured once into a
    CUDA graph after the warm-up (at least one call: nothing may compile during a capture) and each
    repeat times one replay; a caller whose ``fn`` launches n times divides by n.
    """
    gpu = device == "cuda"
    for _ in range(max(warmup, 1 if graph else 0)):
        fn()
    if graph and gpu:
        synchronize(device)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            fn()
        fn = captured.replay
        fn()  # the first replay uploads the graph
    buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device) if flush and gpu else None
    synchronize(device)
    times = []
    for _ in range(repeats):
        if buffer is not None:
            buffer.zero_()  # queued ahead of the start mark: the GPU is still flushing when fn's launches arrive
        start = mark(device)
        fn()
        end = mark(device)
        synchronize(device)
        times.append(ms_between(start, end))
    return times


def time_launches(fn, device: str, *, warmup: int, repeats: int) -> tuple[list[float], str]:
    """ms of the GPU work of each of ``repeats`` calls of ``fn`` (kernel launches), each after an L2 flush,
    and how they were timed: "graph" (``fn`` captured once, each repeat a replay) or, where ``fn`` cannot be
    captured (a launcher that synchronises, say), "eager". A replay costs the host a few µs, hidden behind
    the flush; an eager Python launch can cost more than the flush takes (Triton's launcher: about 100 µs
    on an H200 for the fast GEMM, more than its kernel), and the events would time the GPU waiting for it.
    On a CPU: the calls themselves ("eager")."""
    for _ in range(warmup):  # outside the capture's try: a launch that fails here fails the timing
        fn()
    if device == "cuda":
        try:
            return time_repeats(fn, device, warmup=0, repeats=repeats, flush=True, graph=True), "graph"
        except RuntimeError:  # the capture failed; nothing of it is left on the stream
            torch.cuda.synchronize()
    return time_repeats(fn, device, warmup=0, repeats=repeats, flush=True), "eager"


def spread(times: list[float]) -> dict:
    """Timed runs as a result's fields: the runs, their mean and standard deviation (0 for one run)."""
    return {"runs_ms": times, "mean_ms": statistics.fmean(times),
            "std_ms": statistics.stdev(times) if len(times) > 1 else 0.0}


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(q1, median, q3); one value gives it three times."""
    if len(values) < 2:
        return (values[0],) * 3 if values else (0.0, 0.0, 0.0)
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3
