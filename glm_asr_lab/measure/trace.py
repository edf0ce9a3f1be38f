"""torch.profiler's view of one transcription: every device kernel (on a CPU: every torch op's self time)
attributed to the innermost region around it (glm_asr_course.model.regions), with the torch op that
launched it, which names its operator class where the kernel's own name does not.
Kernels replayed from a CUDA graph go to the region around the replay (no region runs inside one):
the same kernels, launched one by one with the graphs off, each go to their own region.
"""

import gzip
import json
import os
import tempfile
from dataclasses import dataclass, field

from glm_asr_course.model.regions import REGION_NAMES
from glm_asr_lab.measure.components import Regions
from glm_asr_lab.measure.operators import kernel_class, torch_op_class
from glm_asr_course.timer import time_call


# The input is the profiler's Chrome trace (``export_chrome_trace``): the one form that holds the
# same fields on every torch release. FunctionEvent attributes do not: activity_type and
# linked_correlation_id only came to them in 2026 (pytorch PRs 177662, 178597), after the torch 2.11
# of the H200 run whose Triton and graph-replayed kernels a FunctionEvent-based parser lost.
# Events used ("ph": "X", ts/dur in µs):
#
#   cpu_op, user_annotation      host ops and record_function ranges (the regions), on (pid, tid),
#                                args "External id"
#   cuda_runtime, cuda_driver    launch calls on the host thread, args "correlation" (CUPTI's id)
#   kernel, gpu_memcpy/memset    device work; args "correlation" = its launch call's, "External id" =
#                                the host op around the launch, absent when there is none
#
# A kernel launched by a torch op links to it through "External id". One launched straight from a
# region has no op around it, so no "External id": a Triton launcher (cuLaunchKernel[Ex]) and a
# CUDA-graph replay (cudaGraphLaunch: every kernel of the graph carries the launch's correlation id).
# Those are placed by the time of their launch call, in the innermost host range open then. A kernel
# whose launch call is missing from the trace falls back on the innermost gpu_user_annotation (a
# region's span on the kernel's stream) around it.

HOST_CATEGORIES = ("cpu_op", "user_annotation")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
GPU_ANNOTATION = "gpu_user_annotation"  # a region's span on a stream; "External id" = the host range's


@dataclass
class KernelRecord:
    """One device kernel (or, on a CPU, one torch op's self time) of a profiled run."""

    name: str
    ms: float
    region: int            # index into ProfileResult.regions, -1 outside every region
    torch_op: str | None = None  # the torch op below the region that launched it, if any
    call: object = None    # CPU: the op call this self time belongs to (calls = distinct values); GPU: None
    replay: int | None = None  # correlation id of the CUDA-graph launch that replayed it, if one did
    start_us: float = 0.0  # GPU: when it started on the device (the trace's clock); CPU: 0
    launch: tuple = ()     # GPU: (grid, block) as the trace gives them, e.g. ((256, 1, 1), (128, 1, 1))


@dataclass
class ProfileResult:
    regions: Regions               # exclusive = kernel ms attributed directly to the instance
    kernels: list                  # KernelRecord, in start order
    wall_ms: float                 # the profiled transcription, synchronised (profiler overhead included)
    tokens: list = field(default_factory=list)


@dataclass
class _Span:
    name: str
    cat: str
    thread: tuple
    start: int  # ns
    end: int
    args: dict


def _ns(us) -> int:
    return int(round(float(us) * 1000))


def load_trace(path) -> dict:
    """A Chrome trace written by torch.profiler (``.json`` or ``.json.gz``)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def profile_run(fn, device: str) -> ProfileResult:
    """Run ``fn`` (one transcription returning its token list) under torch.profiler and parse its trace."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        wall_ms, tokens = time_call(fn, device)
    with tempfile.TemporaryDirectory(prefix="glm_asr_trace_") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        trace = load_trace(path)
    result = parse_trace(trace, device, wall_ms)
    result.tokens = tokens
    return result


def _innermost_at(spans: list, queries: list) -> list[int]:
    """Index of the innermost span open at each (thread, ns) query, -1 where none is.

    The spans of one thread nest (one Python thread runs generate()), so a sweep over them in start
    order with a stack answers every query of that thread.
    """
    out = [-1] * len(queries)
    wanted: dict = {}
    for q, (thread, t) in enumerate(queries):
        wanted.setdefault(thread, []).append((t, q))
    for thread, qs in wanted.items():
        mine = sorted((s.start, -s.end, i) for i, s in enumerate(spans) if s.thread == thread)
        stack, j = [], 0
        for t, q in sorted(qs):
            while j < len(mine) and mine[j][0] <= t:
                while stack and spans[stack[-1]].end <= mine[j][0]:
                    stack.pop()
                stack.append(mine[j][2])
                j += 1
            while stack and spans[stack[-1]].end <= t:
                stack.pop()
            out[q] = stack[-1] if stack else -1
    return out


def parse_trace(trace, device: str, wall_ms: float) -> ProfileResult:
    """Attribute kernels (CUDA) or torch-op self times (CPU) of a Chrome trace to the innermost region.

    ``trace``: the trace's JSON object (or its list of events). Kernels replayed from a CUDA graph go
    to the region around the replay.
    """
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    host, launches, device_events, gpu_regions = [], {}, [], []
    for e in events:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        cat = str(e.get("cat", "")).lower()
        if cat not in HOST_CATEGORIES + LAUNCH_CATEGORIES + DEVICE_CATEGORIES + (GPU_ANNOTATION,):
            continue
        start = _ns(e["ts"])
        span = _Span(str(e.get("name", "")), cat, (e.get("pid"), e.get("tid")), start,
                     start + _ns(e.get("dur", 0)), e.get("args") or {})
        if cat in HOST_CATEGORIES:
            host.append(span)
        elif cat == GPU_ANNOTATION:
            if span.name in REGION_NAMES:
                gpu_regions.append(span)
        elif cat in LAUNCH_CATEGORIES:
            if span.args.get("correlation") is not None:
                launches[span.args["correlation"]] = span
        else:
            device_events.append(span)

    # Host ranges in start order (parents before children), nested per thread.
    host.sort(key=lambda s: (s.start, -s.end))
    parent = [-1] * len(host)
    stacks: dict = {}
    for i, s in enumerate(host):
        stack = stacks.setdefault(s.thread, [])
        while stack and host[stack[-1]].end <= s.start:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)

    region_idx = [-1] * len(host)  # region instance of each region range
    region_of = [-1] * len(host)   # innermost region instance around each range (itself for a region)
    regions = Regions()
    for i, s in enumerate(host):
        p = parent[i]
        if s.name in REGION_NAMES:
            region_idx[i] = region_of[i] = len(regions.names)
            regions.names.append(s.name)
            regions.parents.append(region_of[p] if p >= 0 else -1)
        else:
            region_of[i] = region_of[p] if p >= 0 else -1

    def torch_op(i) -> tuple[int, str | None]:
        """The torch op the model called around host range i, (its outermost range, its name), or (-1, None)
        for a region: the name of the outermost op with a known class (aten::linear, not the aten::addmm
        inside it), else the outermost op's."""
        chain = []
        while i >= 0 and region_idx[i] < 0:
            chain.append(i)
            i = parent[i]
        if not chain:
            return -1, None
        chain.reverse()
        return chain[0], next((host[k].name for k in chain if torch_op_class(host[k].name)), host[chain[0]].name)

    kernels: list[KernelRecord] = []
    if device == "cuda":
        by_external, region_by_external = {}, {}
        for i, s in enumerate(host):
            if s.args.get("External id") is not None:
                (region_by_external if region_idx[i] >= 0 else by_external).setdefault(s.args["External id"], i)
        device_events.sort(key=lambda s: s.start)
        launch_of = [launches.get(d.args.get("correlation")) for d in device_events]
        where = [by_external.get(d.args.get("External id"), -1) for d in device_events]
        launched = [k for k, i in enumerate(where) if i < 0 and launch_of[k] is not None]
        for k, i in zip(launched, _innermost_at(host, [(launch_of[k].thread, launch_of[k].start) for k in launched])):
            where[k] = i
        unlaunched = [k for k, i in enumerate(where) if i < 0 and launch_of[k] is None]
        spans = _innermost_at(gpu_regions, [(device_events[k].thread, device_events[k].start) for k in unlaunched])
        for k, a in zip(unlaunched, spans):
            if a >= 0:
                where[k] = region_by_external.get(gpu_regions[a].args.get("External id"), -1)
        for d, i, launch in zip(device_events, where, launch_of):
            replay = launch is not None and "graphlaunch" in launch.name.lower()
            kernels.append(KernelRecord(d.name, (d.end - d.start) / 1e6, region_of[i] if i >= 0 else -1,
                                        torch_op(i)[1] if i >= 0 else None,
                                        replay=d.args["correlation"] if replay else None, start_us=d.start / 1e3,
                                        launch=(tuple(d.args.get("grid", ())), tuple(d.args.get("block", ())))))
    else:
        # CPU: a "kernel" is a torch op's self time; a region's own self time is host Python.
        child_time = [0] * len(host)
        for i, s in enumerate(host):
            if parent[i] >= 0:
                child_time[parent[i]] += s.end - s.start
        for i, s in enumerate(host):
            self_ms = max(0.0, (s.end - s.start - child_time[i]) / 1e6)
            if self_ms <= 0:
                continue
            if region_idx[i] >= 0:
                kernels.append(KernelRecord("(host: Python between ops)", self_ms, region_idx[i],
                                            call=("region", i)))
            else:
                # Grouped by the torch op the model called (aten::linear, not its aten::t/mm/copy_ inside).
                top, name = torch_op(i)
                kernels.append(KernelRecord(name, self_ms, region_of[i], name, ("op", top)))

    regions.exclusive = [0.0] * len(regions.names)
    for k in kernels:
        if k.region >= 0:
            regions.exclusive[k.region] += k.ms
    return ProfileResult(regions, kernels, wall_ms)


def graph_launches(profile: ProfileResult) -> dict:
    """A profiled run's CUDA-graph replays and the kernels it launched one by one outside them (copies
    aside): a transcription that is all graphs has one replay a token and no such kernel."""
    return {"graph_launches": len({k.replay for k in profile.kernels if k.replay is not None}),
            "kernels_outside_graphs": sum(k.replay is None and kernel_class(k.name) != "copy"
                                          for k in profile.kernels)}
