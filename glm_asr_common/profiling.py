"""Named regions the tracks mark in their forward pass, so profilers can attribute time to components.

``region(name)`` is a torch.profiler range (and an NVTX range when nsys is recording): free enough to
leave in the forward pass, visible to benchmark_detailed.py and Nsight Systems. Names used by every
track: encoder (the whole encode_audio), encoder.conv, encoder.layer, encoder.norm, projector,
decoder.embed, decoder.prefill, decoder.layer, decoder.head, decoder.step (one decode step).

Three ways to read them, all here:

* ``RegionTimer``: while one is active, every region also records a CUDA event (a perf_counter on a
  CPU) at entry and exit, so a whole transcription splits into per-component times without the
  profiler's overhead (regions inside a CUDA graph capture are skipped: a replayed graph is timed as
  the region around ``replay()``).
* ``parse_profile``: a torch.profiler trace of one transcription → every device kernel (on a CPU:
  every torch op's self time) attributed to the innermost enclosing region, with the torch op that
  launched it (for its class and recorded shapes).
* NVTX: ``GLM_ASR_NVTX=1`` in the environment turns the NVTX ranges on (``benchmark_detailed.py --nsys``).

``component_of`` maps a region and its ancestors to a component (encoder, projector, prefill, decode)
and a part of it (conv / layers / norm; embed / layers / head); ``summarize`` adds instances up.
"""

import os
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

NVTX = {"enabled": os.environ.get("GLM_ASR_NVTX", "0") not in ("", "0", "false", "False")}

REGION_NAMES = ("encoder", "encoder.conv", "encoder.layer", "encoder.norm", "projector", "decoder.embed",
                "decoder.prefill", "decoder.layer", "decoder.head", "decoder.step")
COMPONENTS = ("encoder", "projector", "prefill", "decode")
PARTS = {"encoder": ("conv", "layers", "norm", "other"), "projector": (),
         "prefill": ("embed", "layers", "head", "other"), "decode": ("embed", "layers", "head", "other")}
_PART_OF = {"encoder.conv": "conv", "encoder.layer": "layers", "encoder.norm": "norm",
            "decoder.embed": "embed", "decoder.layer": "layers", "decoder.head": "head"}

_TIMER = None  # the active RegionTimer, if any


@contextmanager
def region(name: str):
    nvtx = NVTX["enabled"] and torch.cuda.is_available()
    timer = _TIMER
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
        global _TIMER
        if self.cuda:
            torch.cuda.synchronize()
        self._names, self._parents, self._starts, self._ends, self._stack = [], [], [], [], []
        self._base = self._mark()
        _TIMER = self
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
        global _TIMER
        _TIMER = None
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


@dataclass
class KernelRecord:
    """One device kernel (or, on a CPU, one torch op's self time) of a profiled run."""

    name: str
    ms: float
    region: int            # index into ProfileResult.regions, -1 outside every region
    torch_op: str | None   # outermost torch op below the region that launched it, if any
    cost: tuple | None     # (FLOPs, bytes) share from that op's recorded shapes, if known
    call: object = None    # CPU: the op call this self time belongs to (calls = distinct values); GPU: None


@dataclass
class ProfileResult:
    regions: Regions               # exclusive = kernel ms attributed directly to the instance
    kernels: list                  # KernelRecord
    wall_ms: float                 # the profiled transcription, synchronised (profiler overhead included)
    device: str
    tokens: list = field(default_factory=list)


def _is_cpu(evt) -> bool:
    return str(getattr(evt, "device_type", "CPU")).endswith("CPU")


def _activity(evt) -> str:
    return str(getattr(evt, "activity_type", "") or "").lower()


def profile_run(fn, device: str, *, record_shapes: bool = True) -> ProfileResult:
    """Run ``fn`` (one transcription returning its token list) under torch.profiler and parse it."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    with profile(activities=activities, record_shapes=record_shapes) as prof:
        start = time.perf_counter()
        tokens = fn()
        sync()
        wall_ms = (time.perf_counter() - start) * 1000
    result = parse_profile(list(prof.events()), device, wall_ms)
    result.tokens = tokens
    return result


def _regions_at(cpu, region_idx, times) -> list:
    """Innermost region instance open at each time (None where the time is None, -1 outside all).

    The regions of one transcription come from the Python thread that runs generate(), properly
    nested, so a sweep over their start-ordered intervals with a stack answers every query.
    """
    spans = sorted(((cpu[i].time_range.start, cpu[i].time_range.end, region_idx[i])
                    for i in range(len(cpu)) if region_idx[i] >= 0), key=lambda s: (s[0], -s[1]))
    order = sorted((t, q) for q, t in enumerate(times) if t is not None)
    out: list = [None] * len(times)
    stack, j = [], 0
    for t, q in order:
        while j < len(spans) and spans[j][0] <= t:
            while stack and stack[-1][1] <= spans[j][0]:
                stack.pop()
            stack.append(spans[j])
            j += 1
        while stack and stack[-1][1] <= t:
            stack.pop()
        out[q] = stack[-1][2] if stack else -1
    return out


def parse_profile(events, device: str, wall_ms: float) -> ProfileResult:
    """Attribute kernels (CUDA) or torch-op self times (CPU) to the innermost enclosing region."""
    from .roofline import shape_cost, torch_op_class

    # Host-side ops and annotations; device-runtime calls (cudaLaunchKernel ...) are linked to an op.
    cpu = [e for e in events if _is_cpu(e) and not getattr(e, "is_async", False)
           and getattr(e, "linked_correlation_id", 0) == 0
           and _activity(e) not in ("cuda_runtime", "cuda_driver", "runtime", "driver")]
    cpu.sort(key=lambda e: (e.thread, e.time_range.start, -e.time_range.end))
    parent = [-1] * len(cpu)
    stacks: dict = {}
    for i, e in enumerate(cpu):
        stack = stacks.setdefault(e.thread, [])
        while stack and cpu[stack[-1]].time_range.end <= e.time_range.start:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)

    def is_region(e) -> bool:
        return e.name in REGION_NAMES and (getattr(e, "is_user_annotation", False) or
                                           _activity(e) == "user_annotation" or not e.name.startswith("aten::"))

    region_idx = [-1] * len(cpu)  # region instance index of each region event
    region_of = [-1] * len(cpu)   # innermost region instance enclosing each event (itself for regions)
    top_op = [-1] * len(cpu)      # outermost non-region op under that region (itself possible)
    order = sorted(range(len(cpu)), key=lambda i: (cpu[i].time_range.start, -cpu[i].time_range.end))
    regions = Regions()
    for i in order:  # parents come before children in start order
        e, p = cpu[i], parent[i]
        if is_region(e):
            region_idx[i] = len(regions.names)
            regions.names.append(e.name)
            regions.parents.append(region_of[p] if p >= 0 else -1)
            regions.exclusive.append(0.0)
            region_of[i] = region_idx[i]
        else:
            region_of[i] = region_of[p] if p >= 0 else -1
            top_op[i] = i if (p < 0 or region_idx[p] >= 0) else top_op[p]

    def op_info(i):
        """(torch op name, (flops, bytes) of the whole op) for CPU event i's outermost torch op."""
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
        name = next((cpu[k].name for k in chain if torch_op_class(cpu[k].name)), cpu[t].name)
        cost = None
        for k in chain:
            ev = cpu[k]
            cost = shape_cost(ev.name, getattr(ev, "input_shapes", None), getattr(ev, "input_dtypes", None),
                              getattr(ev, "concrete_inputs", None))
            if cost:
                return name, (k, cost)
        return name, None

    kernels: list[KernelRecord] = []
    owners: list[int] = []  # CPU event index whose op cost the kernel shares (-1 none)
    if device == "cuda":
        # Two id spaces: CPU ops carry torch's correlation ids (a kernel's linked_correlation_id points
        # there), kernels and launch calls carry CUPTI's (a kernel's id is its launch call's id).
        index_of = {e.id: i for i, e in enumerate(cpu)}
        launches = {e.id: e for e in events if _is_cpu(e) and _activity(e) in ("cuda_runtime", "cuda_driver")}
        device_events = [e for e in events if not _is_cpu(e) and e.name not in REGION_NAMES
                         and any(a in _activity(e) for a in ("kernel", "memcpy", "memset"))]
        if device_events and hasattr(device_events[0], "linked_correlation_id"):
            # A record_function range pushes a *user* correlation id, so a kernel launched straight from
            # a region (a Triton launcher, a CUDA-graph replay) is not linked to it: find the region
            # from the time of its launch call (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch).
            launch_region = _regions_at(cpu, region_idx, [launches[e.id].time_range.start if e.id in launches
                                                          else None for e in device_events])
            for e, at_launch in zip(device_events, launch_region):
                corr = getattr(e, "linked_correlation_id", 0)
                i = index_of.get(corr, -1) if corr else -1
                name, cost = op_info(i) if i >= 0 else (None, None)
                region = at_launch if at_launch is not None else (region_of[i] if i >= 0 else -1)
                kernels.append(KernelRecord(e.name, (e.time_range.end - e.time_range.start) / 1000, region, name,
                                            cost[1] if cost else None))
                owners.append(cost[0] if cost else -1)
        else:  # older torch: kernels hang off the CPU op that launched them
            for i, e in enumerate(cpu):
                for k in getattr(e, "kernels", []):
                    name, cost = op_info(i)
                    kernels.append(KernelRecord(k.name, k.duration / 1000, region_of[i], name,
                                                cost[1] if cost else None))
                    owners.append(cost[0] if cost else -1)
    else:
        # CPU: a "kernel" is a torch op's self time; a region's own self time is host Python.
        child_time = [0.0] * len(cpu)
        for i, e in enumerate(cpu):
            if parent[i] >= 0:
                child_time[parent[i]] += e.time_range.end - e.time_range.start
        for i, e in enumerate(cpu):
            self_ms = max(0.0, (e.time_range.end - e.time_range.start - child_time[i]) / 1000)
            if self_ms <= 0:
                continue
            if region_idx[i] >= 0:
                kernels.append(KernelRecord("(host: Python between ops)", self_ms, region_idx[i], None, None,
                                            ("region", i)))
                owners.append(-1)
            else:
                # Grouped by the torch op the model called (aten::linear, not its aten::t/mm/copy_ inside).
                name, cost = op_info(i)
                kernels.append(KernelRecord(name or e.name, self_ms, region_of[i], name, cost[1] if cost else None,
                                            ("op", top_op[i] if top_op[i] >= 0 else i)))
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
    for k in kernels:
        if k.region >= 0:
            regions.exclusive[k.region] += k.ms
    return ProfileResult(regions, kernels, wall_ms, device)


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
