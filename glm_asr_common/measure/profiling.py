"""Reading the named regions the tracks mark in their forward pass (glm_asr_common.model.regions), so
that time can be attributed to components. Three ways, all here:

* ``RegionTimer``: while one is active, every region also records a CUDA event (a perf_counter on a
  CPU) at entry and exit, so a whole transcription splits into per-component times without the
  profiler's overhead (regions inside a CUDA graph capture are skipped: a replayed graph is timed as
  the region around ``replay()``).
* ``parse_trace``: the Chrome trace torch.profiler writes for one transcription → every device kernel
  (on a CPU: every torch op's self time) attributed to the innermost enclosing region, with the torch
  op that launched it (for its class and recorded shapes); kernels replayed from a CUDA graph go to
  the region around the replay, or, with ``split_graph_replays`` and an eager run of the same work,
  to the regions they have there.
* NVTX ranges (``GLM_ASR_NVTX=1``, glm_asr_common.model.regions), for ``benchmark_detailed.py --nsys``.

``component_of`` maps a region and its ancestors to a component (encoder, projector, prefill, decode)
and a part of it (conv / layers / norm; embed / layers / head); ``summarize`` adds instances up.
"""

import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import torch

from ..model import regions as named_regions

COMPONENTS = ("encoder", "projector", "prefill", "decode")
PARTS = {"encoder": ("conv", "layers", "norm", "other"), "projector": (),
         "prefill": ("embed", "layers", "head", "other"), "decode": ("embed", "layers", "head", "other")}
_PART_OF = {"encoder.conv": "conv", "encoder.layer": "layers", "encoder.norm": "norm",
            "decoder.embed": "embed", "decoder.layer": "layers", "decoder.head": "head"}


# ---------------------------------------------------------------------------------------------
# Region instances → components
# ---------------------------------------------------------------------------------------------


def component_of(chain: list[str]) -> tuple[str, str]:
    """(component, part) of a region given its name chain, innermost first.

    The nearest region that decides it wins: encoder* → encoder, projector → projector, decoder.step
    → decode, decoder.prefill → prefill; decoder.embed/layer/head outside both (the prompt embedding
    of a track that embeds before its prefill region) count as prefill. The part is the nearest
    named part (conv/layers/norm, embed/layers/head), else "other".
    """
    component = "prefill"
    for name in chain:
        if name.startswith("encoder"):
            component = "encoder"
            break
        if name == "projector":
            component = "projector"
            break
        if name == "decoder.step":
            component = "decode"
            break
        if name == "decoder.prefill":
            break
    part = "other"
    for name in chain:
        if name in _PART_OF and _PART_OF[name] in PARTS[component]:
            part = _PART_OF[name]
            break
        if name in ("encoder", "decoder.step", "decoder.prefill", "projector"):
            break
    return component, ("" if component == "projector" else part)


@dataclass
class Regions:
    """Region instances in start order (parents before children), each with an exclusive value (ms)."""

    names: list = field(default_factory=list)
    parents: list = field(default_factory=list)   # index of the enclosing region, -1 at top level
    exclusive: list = field(default_factory=list)  # ms not covered by a nested region

    def chain(self, i: int) -> list[str]:
        out = []
        while i >= 0:
            out.append(self.names[i])
            i = self.parents[i]
        return out

    def inclusive(self) -> list[float]:
        incl = list(self.exclusive)
        for i in range(len(incl) - 1, -1, -1):
            if self.parents[i] >= 0:
                incl[self.parents[i]] += incl[i]
        return incl

    def assignments(self) -> list[tuple[str, str]]:
        return [component_of(self.chain(i)) for i in range(len(self.names))]


def summarize(regions: Regions, total_ms: float | None = None) -> dict:
    """Flat metrics of one run: component totals and parts, per-step and per-layer times (ms).

    Keys: "<component>" and "<component>.<part>" (exclusive sums), "decode.steps",
    "decode.step_median", "outside" (total − all regions, when total_ms is given), "total";
    plus lists "layers.encoder", "layers.prefill" (per layer instance) and "layers.decode"
    (per layer index, median over the steps), "steps" (per decode step).
    """
    out = {c: 0.0 for c in COMPONENTS}
    for c, parts in PARTS.items():
        for p in parts:
            out[f"{c}.{p}"] = 0.0
    assigned = regions.assignments()
    for (comp, part), value in zip(assigned, regions.exclusive):
        out[comp] += value
        if part:
            out[f"{comp}.{part}"] += value
    incl = regions.inclusive()
    enc_layers, prefill_layers, steps, step_layers = [], [], [], []
    step_of = {}
    for i, name in enumerate(regions.names):
        if name == "decoder.step":
            step_of[i] = len(steps)
            steps.append(incl[i])
            step_layers.append([])
    for i, name in enumerate(regions.names):
        if name == "encoder.layer":
            enc_layers.append(incl[i])
        elif name == "decoder.layer":
            j = regions.parents[i]
            while j >= 0 and j not in step_of:
                j = regions.parents[j]
            if j >= 0:
                step_layers[step_of[j]].append(incl[i])
            elif assigned[i][0] == "prefill":
                prefill_layers.append(incl[i])
    n_layers = max((len(s) for s in step_layers), default=0)
    decode_layers = [statistics.median([s[k] for s in step_layers if len(s) > k]) for k in range(n_layers)]
    out["decode.steps"] = len(steps)
    out["decode.step_median"] = statistics.median(steps) if steps else 0.0
    regions_ms = sum(out[c] for c in COMPONENTS)
    if total_ms is not None:
        out["outside"] = total_ms - regions_ms
        out["total"] = total_ms
    out["layers.encoder"] = enc_layers
    out["layers.prefill"] = prefill_layers
    out["layers.decode"] = decode_layers
    out["steps"] = steps
    return out


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(q1, median, q3); one value gives it three times."""
    if not values:
        return 0.0, 0.0, 0.0
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, med, q3


def aggregate(runs: list[dict]) -> dict:
    """Median and quartiles over runs of every scalar metric; per-index medians of the layer lists."""
    out = {}
    for key, value in runs[0].items():
        if isinstance(value, list):
            n = min(len(r[key]) for r in runs)
            out[key] = [statistics.median([r[key][k] for r in runs]) for k in range(n)]
        else:
            q1, med, q3 = quartiles([r[key] for r in runs])
            out[key] = {"median": med, "q1": q1, "q3": q3}
    return out


# ---------------------------------------------------------------------------------------------
# Region timer: CUDA events (or perf_counter) at every region entry and exit
# ---------------------------------------------------------------------------------------------


class RegionTimer:
    """``with RegionTimer(device) as t: model.generate(...)`` → ``t.regions`` and ``t.total_ms``.

    On CUDA each mark is an event recorded on the current stream, so a region's time is the GPU
    time between the points where its first launch and its end were queued: kernel time plus the
    idle gaps while the GPU waited for the host. Marks cost a few µs of host time each.
    """

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        self.regions = Regions()
        self.total_ms = 0.0

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1000

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
        self._names, self._parents, self._starts, self._ends, self._stack = [], [], [], [], []
        self._base = self._mark()
        named_regions.set_timer(self)
        return self

    def enter(self, name: str):
        if self.cuda and torch.cuda.is_current_stream_capturing():
            return None
        idx = len(self._names)
        self._names.append(name)
        self._parents.append(self._stack[-1] if self._stack else -1)
        self._starts.append(self._mark())
        self._ends.append(None)
        self._stack.append(idx)
        return idx

    def exit(self, idx):
        if idx is None:
            return
        self._ends[idx] = self._mark()
        if self._stack and self._stack[-1] == idx:
            self._stack.pop()
        elif idx in self._stack:
            self._stack.remove(idx)

    def __exit__(self, *exc):
        named_regions.set_timer(None)
        end = self._mark()
        if self.cuda:
            torch.cuda.synchronize()
        self.total_ms = self._ms(self._base, end)
        durations = [self._ms(s, e) if e is not None else 0.0 for s, e in zip(self._starts, self._ends)]
        exclusive = list(durations)
        for i, parent in enumerate(self._parents):
            if parent >= 0:
                exclusive[parent] -= durations[i]
        self.regions = Regions(self._names, self._parents, exclusive)
        return False


def timed_run(model, inputs, max_new_tokens: int, min_new_tokens: int, device: str) -> tuple[dict, list[int]]:
    """One transcription under a RegionTimer → (summarize(...) metrics, tokens of row 0)."""
    with RegionTimer(device) as timer:
        tokens = model.generate(inputs, max_new_tokens, min_new_tokens)[0]
    return summarize(timer.regions, timer.total_ms), tokens


# ---------------------------------------------------------------------------------------------
# torch.profiler trace → kernels attributed to regions
# ---------------------------------------------------------------------------------------------
#
# The input is the profiler's Chrome trace (``export_chrome_trace``): the one form that holds the
# same fields on every torch release. FunctionEvent attributes do not: activity_type and
# linked_correlation_id only came to them in 2026 (pytorch PRs 177662, 178597), after the torch 2.11
# of the H200 run whose Triton and graph-replayed kernels a FunctionEvent-based parser lost.
# Events used ("ph": "X", ts/dur in µs):
#
#   cpu_op, user_annotation      host ops and record_function ranges (the regions), on (pid, tid),
#                                args "External id" (and "Input Dims" / "Input type" / "Concrete Inputs")
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
    torch_op: str | None   # outermost torch op below the region that launched it, if any
    cost: tuple | None     # (FLOPs, bytes) share from that op's recorded shapes, if known
    call: object = None    # CPU: the op call this self time belongs to (calls = distinct values); GPU: None
    start: int = 0         # start in the trace's clock (ns): kernel order
    replay: int | None = None  # correlation id of the CUDA-graph launch that replayed it, if one did


@dataclass
class ProfileResult:
    regions: Regions               # exclusive = kernel ms attributed directly to the instance
    kernels: list                  # KernelRecord
    wall_ms: float                 # the profiled transcription, synchronised (profiler overhead included)
    device: str
    tokens: list = field(default_factory=list)
    replayed_split: tuple = (0, 0)  # (replayed kernels placed in eager regions, replayed kernels): split_graph_replays


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
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def profile_run(fn, device: str, *, record_shapes: bool = True) -> ProfileResult:
    """Run ``fn`` (one transcription returning its token list) under torch.profiler and parse its trace."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    with profile(activities=activities, record_shapes=record_shapes) as prof:
        start = time.perf_counter()
        tokens = fn()
        sync()
        wall_ms = (time.perf_counter() - start) * 1000
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
    to the region around the replay; ``split_graph_replays`` can place them further down.
    """
    from .roofline import shape_cost, torch_op_class

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
            if span.name in named_regions.REGION_NAMES:
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

    region_idx = [-1] * len(host)  # region instance index of each region range
    region_of = [-1] * len(host)   # innermost region instance enclosing each range (itself for regions)
    top_op = [-1] * len(host)      # outermost non-region op under that region (itself possible)
    regions = Regions()
    for i, s in enumerate(host):
        p = parent[i]
        if s.name in named_regions.REGION_NAMES:
            region_idx[i] = len(regions.names)
            regions.names.append(s.name)
            regions.parents.append(region_of[p] if p >= 0 else -1)
            regions.exclusive.append(0.0)
            region_of[i] = region_idx[i]
        else:
            region_of[i] = region_of[p] if p >= 0 else -1
            top_op[i] = i if (p < 0 or region_idx[p] >= 0) else top_op[p]

    def op_info(i):
        """(torch op name, (host index, (flops, bytes) of the whole op)) for host range i's outermost op."""
        t = top_op[i]
        if t < 0:
            return None, None
        # The outermost op may be a wrapper (aten::linear → aten::addmm): take the outermost one
        # with a known class and the first one on the way down with a shape formula.
        chain, j = [], i
        while j >= 0 and region_idx[j] < 0:
            chain.append(j)
            if j == t:
                break
            j = parent[j]
        chain.reverse()
        name = next((host[k].name for k in chain if torch_op_class(host[k].name)), host[t].name)
        for k in chain:
            a = host[k].args
            cost = shape_cost(host[k].name, a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs"))
            if cost:
                return name, (k, cost)
        return name, None

    kernels: list[KernelRecord] = []
    owners: list[int] = []  # host range whose op cost the kernel shares (-1 none)
    if device == "cuda":
        by_external, region_by_external = {}, {}
        for i, s in enumerate(host):
            if s.args.get("External id") is not None:
                (region_by_external if region_idx[i] >= 0 else by_external).setdefault(s.args["External id"], i)
        device_events.sort(key=lambda s: s.start)
        where, replay, queries, asked, unlaunched = [], [], [], [], []
        for k, d in enumerate(device_events):
            launch = launches.get(d.args.get("correlation"))
            replay.append(d.args.get("correlation") if launch is not None and "graphlaunch" in launch.name.lower()
                          else None)
            i = by_external.get(d.args.get("External id"), -1)
            if i < 0 and launch is not None:
                queries.append((launch.thread, launch.start))
                asked.append(k)
            elif i < 0:
                unlaunched.append(k)
            where.append(i)
        for k, i in zip(asked, _innermost_at(host, queries)):
            where[k] = i
        spans = _innermost_at(gpu_regions, [(device_events[k].thread, device_events[k].start) for k in unlaunched])
        for k, a in zip(unlaunched, spans):
            if a >= 0:
                where[k] = region_by_external.get(gpu_regions[a].args.get("External id"), -1)
        for d, i, rep in zip(device_events, where, replay):
            name, cost = op_info(i) if i >= 0 else (None, None)
            kernels.append(KernelRecord(d.name, (d.end - d.start) / 1e6, region_of[i] if i >= 0 else -1, name,
                                        cost[1] if cost else None, start=d.start, replay=rep))
            owners.append(cost[0] if cost else -1)
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
                kernels.append(KernelRecord("(host: Python between ops)", self_ms, region_idx[i], None, None,
                                            ("region", i), start=s.start))
                owners.append(-1)
            else:
                # Grouped by the torch op the model called (aten::linear, not its aten::t/mm/copy_ inside).
                name, cost = op_info(i)
                kernels.append(KernelRecord(name or s.name, self_ms, region_of[i], name, cost[1] if cost else None,
                                            ("op", top_op[i] if top_op[i] >= 0 else i), start=s.start))
                owners.append(cost[0] if cost else -1)

    # An op's shape cost is shared by the kernels it launched, in proportion to their time.
    by_owner: dict = {}
    for k, owner in zip(kernels, owners):
        if owner >= 0:
            by_owner.setdefault(owner, []).append(k)
    for group in by_owner.values():
        total = sum(k.ms for k in group) or 1.0
        for k in group:
            flops, nbytes = k.cost
            k.cost = (flops * k.ms / total, nbytes * k.ms / total)
    result = ProfileResult(regions, kernels, wall_ms, device)
    _tally(result)
    return result


def _tally(result: ProfileResult):
    """Each region instance's exclusive value = the kernel ms attributed to it."""
    result.regions.exclusive = [0.0] * len(result.regions.names)
    for k in result.kernels:
        if k.region >= 0:
            result.regions.exclusive[k.region] += k.ms


def split_graph_replays(graphed: ProfileResult, eager: ProfileResult) -> tuple[int, int]:
    """Place kernels replayed from CUDA graphs in the regions the same work has when run eagerly.

    Inside a replay no region runs, so ``parse_trace`` leaves its kernels in the region around the
    replay (a whole prompt phase in decoder.prefill, a step in decoder.step). A graph replays the
    launches of its capture in order, and the eager run (use_cuda_graph=False) launches the same
    kernels under their regions: the n-th replay inside the n-th instance of region R is matched with
    the kernels of the n-th eager instance of R, by name, in order (longest common subsequence), and
    each matched kernel moves to a copy of its eager region, nested under R. Unmatched kernels stay in R.
    Changes ``graphed`` in place; returns (kernels placed, replayed kernels).
    """
    import difflib

    groups: dict = {}
    for k in graphed.kernels:
        if k.replay is not None:
            groups.setdefault((k.replay, k.region), []).append(k)
    total = sum(len(g) for g in groups.values())
    regs, eregs = graphed.regions, eager.regions
    seen_of = {}  # region instance → its occurrence number among instances of that name
    counts: dict = {}
    for i, name in enumerate(regs.names):
        seen_of[i] = counts.get(name, 0)
        counts[name] = seen_of[i] + 1
    eager_instances: dict = {}
    for j, name in enumerate(eregs.names):
        eager_instances.setdefault(name, []).append(j)
    eager_kernels = sorted((k for k in eager.kernels if k.region >= 0), key=lambda k: k.start)
    placed = 0
    for (_, region), group in sorted(groups.items(), key=lambda item: item[1][0].start):
        if region < 0 or region >= len(seen_of):
            continue
        instances = eager_instances.get(regs.names[region])
        if not instances:
            continue
        root = instances[min(seen_of[region], len(instances) - 1)]
        inside = {root}
        for j in range(root + 1, len(eregs.names)):
            if eregs.parents[j] in inside:
                inside.add(j)
        reference = [k for k in eager_kernels if k.region in inside]
        copy_of = {root: region}

        def copy(j):
            if j not in copy_of:
                p = copy(eregs.parents[j])
                copy_of[j] = len(regs.names)
                regs.names.append(eregs.names[j])
                regs.parents.append(p)
                regs.exclusive.append(0.0)
            return copy_of[j]

        group.sort(key=lambda k: k.start)
        matcher = difflib.SequenceMatcher(None, [k.name for k in reference], [k.name for k in group], autojunk=False)
        for a, b, size in matcher.get_matching_blocks():
            for ref, k in zip(reference[a:a + size], group[b:b + size]):
                k.region = copy(ref.region)
                if k.torch_op is None and ref.torch_op is not None:
                    k.torch_op, k.cost = ref.torch_op, ref.cost
                placed += 1
    _tally(graphed)
    graphed.replayed_split = (placed, total)
    return placed, total


# ---------------------------------------------------------------------------------------------
# benchmark_student.py --profile
# ---------------------------------------------------------------------------------------------


def print_component_summary(session, args, log=print):
    """Per-component lines (median of --runs timed transcriptions with region timers)."""
    device = session.device
    runs = []
    for _ in range(max(1, args.runs)):
        metrics, _ = timed_run(session.model, session.inputs, args.max_new_tokens, args.min_new_tokens, device)
        runs.append(metrics)
    agg = aggregate(runs)
    med = {k: v["median"] for k, v in agg.items() if isinstance(v, dict)}
    graph = getattr(session.model, "use_cuda_graph", False) and device == "cuda"
    log("=" * 60)
    log(f"PROFILE (median of {len(runs)} runs; region timers, {'CUDA events' if device == 'cuda' else 'CPU clock'})")
    log("=" * 60)
    enc_layers = len(runs[0]["layers.encoder"])
    dec_layers = len(runs[0]["layers.prefill"])
    steps = int(med["decode.steps"])
    total = med["total"] or 1.0
    rows = [
        ("Encoder", med["encoder"], f"conv {med['encoder.conv']:.1f}, {enc_layers} layers "
         f"{med['encoder.layers']:.1f}, norm {med['encoder.norm']:.1f}"),
        ("Projector", med["projector"], ""),
        ("Prefill", med["prefill"], f"embed {med['prefill.embed']:.1f}, {dec_layers} layers "
         f"{med['prefill.layers']:.1f}, head {med['prefill.head']:.1f}"),
        ("Decode", med["decode"], f"{steps} steps, {med['decode.step_median']:.2f} ms/step median"
         + (" (CUDA graph: per-layer split hidden)" if graph else
            f"; layers {med['decode.layers']:.1f}, head {med['decode.head']:.1f}")),
        ("Outside regions", med["outside"], "host loop, syncs, input copies"),
    ]
    for name, ms, detail in rows:
        log(f"{name + ':':<17}{ms:9.1f}ms {100 * ms / total:5.1f}%" + (f"  ({detail})" if detail else ""))
    log(f"{'Total:':<17}{med['total']:9.1f}ms  (components + outside; see benchmark_detailed.py for kernels)")
