"""Region instances → component times: encoder, projector, prefill, decode, each split in parts and
layers. The instances come from a ``RegionTimer`` (a timer mark at every region entry and exit of one
transcription, glm_asr_course.model.regions) or from a profiler trace (glm_asr_lab.measure.trace).
"""

import statistics
from dataclasses import dataclass, field

import torch

from glm_asr_course.model import regions
from glm_asr_course.timer import mark, ms_between, quartiles, synchronize

COMPONENTS = ("encoder", "projector", "prefill", "decode")
PARTS = {"encoder": ("conv", "layers", "norm", "other"), "projector": (),
         "prefill": ("embed", "layers", "head", "other"), "decode": ("embed", "layers", "head", "other")}
_PART_OF = {"encoder.conv": "conv", "encoder.layer": "layers", "encoder.norm": "norm",
            "decoder.embed": "embed", "decoder.layer": "layers", "decoder.head": "head"}


def component_of(chain: list[str]) -> tuple[str, str]:
    """(component, part) of a region given its name chain, innermost first.

    The nearest region that decides it wins: encoder* → encoder, projector → projector, decoder.step
    → decode, decoder.prefill → prefill; decoder.embed/layer/head outside both (the prompt embedding
    of a track that embeds before its prefill region) count as prefill. The part is the nearest
    named part (conv/layers/norm, embed/layers/head), else "other".
    """
    component = "prefill"
    for name in chain:
        if name.startswith("encoder") or name == "projector":
            component = "encoder" if name.startswith("encoder") else "projector"
            break
        if name in ("decoder.step", "decoder.prefill"):
            component = "decode" if name == "decoder.step" else "prefill"
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


def summarize(regions: Regions, total_ms: float | None = None) -> dict:
    """Flat metrics of one run: component totals and parts, per-step and per-layer times (ms).

    Keys: "<component>" and "<component>.<part>" (exclusive sums), "decode.steps",
    "decode.step_median", "outside" (total − all regions, when total_ms is given), "total";
    plus lists "layers.encoder", "layers.prefill" (per layer instance) and "layers.decode"
    (per layer index, median over the steps), "steps" (per decode step).
    """
    out = {c: 0.0 for c in COMPONENTS} | {f"{c}.{p}": 0.0 for c, parts in PARTS.items() for p in parts}
    assigned = [component_of(regions.chain(i)) for i in range(len(regions.names))]
    for (comp, part), value in zip(assigned, regions.exclusive):
        out[comp] += value
        if part:
            out[f"{comp}.{part}"] += value
    incl = regions.inclusive()
    step_of = {i: n for n, i in enumerate(i for i, name in enumerate(regions.names) if name == "decoder.step")}
    steps = [incl[i] for i in step_of]
    enc_layers, prefill_layers, step_layers = [], [], [[] for _ in steps]
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
    out["decode.steps"] = len(steps)
    out["decode.step_median"] = statistics.median(steps) if steps else 0.0
    if total_ms is not None:
        out["outside"] = total_ms - sum(out[c] for c in COMPONENTS)
        out["total"] = total_ms
    out["layers.encoder"] = enc_layers
    out["layers.prefill"] = prefill_layers
    out["layers.decode"] = [statistics.median([s[k] for s in step_layers if len(s) > k]) for k in range(n_layers)]
    out["steps"] = steps
    return out


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


class RegionTimer:
    """``with RegionTimer(device) as t: model.generate(...)`` → ``t.regions`` and ``t.total_ms``.

    Each region entry and exit is a timer mark (glm_asr_course.timer: a CUDA event on the current
    stream), so a region's time is the GPU time between the points where its first launch and its end
    were queued: kernel time plus the idle gaps while the GPU waited for the host. Regions inside a
    CUDA graph capture are skipped: a replayed graph counts for the region around ``replay()``.
    """

    def __init__(self, device: str):
        self.device = device
        self.regions = Regions()
        self.total_ms = 0.0

    def __enter__(self):
        synchronize(self.device)
        self._names, self._parents, self._starts, self._ends, self._stack = [], [], [], [], []
        self._base = mark(self.device)
        regions.set_timer(self)
        return self

    def enter(self, name: str):
        if self.device == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        self._names.append(name)
        self._parents.append(self._stack[-1] if self._stack else -1)
        self._starts.append(mark(self.device))
        self._ends.append(None)
        self._stack.append(len(self._names) - 1)
        return self._stack[-1]

    def exit(self, idx):
        if idx is None:
            return
        self._ends[idx] = mark(self.device)
        if idx in self._stack:
            self._stack.remove(idx)

    def __exit__(self, *exc):
        regions.set_timer(None)
        end = mark(self.device)
        synchronize(self.device)
        self.total_ms = ms_between(self._base, end)
        durations = [ms_between(s, e) if e is not None else 0.0 for s, e in zip(self._starts, self._ends)]
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
