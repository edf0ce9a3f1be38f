"""Where a decode step replayed from a CUDA graph spends its time, launch by launch.

With programmatic dependent launch a kernel starts before the one ahead of it ends and waits inside it,
so kernel durations overlap and their sum overstates the step. Here each kernel is charged with the
time its end adds past the latest end before it in the replay ("added"). The added times of a replay
sum to its span, first start to last end: they say which launches the step waits for. Idle is the
part of the span in which no kernel of the replay ran (a drain no kernel overlapped). replay_us times a
replay with CUDA events instead, without a profiler (sweep_step, persistent_chain).
"""

from statistics import median

import torch

from glm_asr_lab.measure.components import component_of


def replay_breakdown(kernels: list) -> dict:
    """Span, busy, idle and kernel-sum µs of one replay's kernels (KernelRecord), and each one's added µs
    in start order."""
    kernels = sorted(kernels, key=lambda k: k.start_us)
    start = kernels[0].start_us
    latest_end = busy_until = start
    busy, added = 0.0, []
    for k in kernels:
        end = k.start_us + 1000 * k.ms
        added.append(max(0.0, end - latest_end))
        latest_end = max(latest_end, end)
        # Busy time: the union of the kernels' intervals (they arrive in start order).
        busy += max(0.0, end - max(k.start_us, busy_until))
        busy_until = max(busy_until, end)
    span = latest_end - start
    return {"span_us": span, "busy_us": busy, "idle_us": span - busy,
            "kernel_sum_us": sum(1000 * k.ms for k in kernels), "added_us": added, "kernels": kernels}


def decode_step_launches(profile) -> dict | None:
    """The decode-step replays of a profiled run with CUDA graphs, as medians over the replays: span, busy,
    idle and kernel sum, and per launch (kernel name, grid, block) its launches a step, duration and added
    µs a step, largest added first. None when no decode step was replayed."""
    replays: dict = {}
    for k in profile.kernels:
        if k.replay is not None and k.region >= 0 and component_of(profile.regions.chain(k.region))[0] == "decode":
            replays.setdefault(k.replay, []).append(k)
    if not replays:
        return None
    steps = [replay_breakdown(kernels) for kernels in replays.values()]
    per_launch: dict = {}
    for n, step in enumerate(steps):
        for k, added in zip(step["kernels"], step["added_us"]):
            row = per_launch.setdefault((k.name, k.launch), [[0, 0.0, 0.0] for _ in steps])[n]
            row[0] += 1
            row[1] += 1000 * k.ms
            row[2] += added
    launches = [{"kernel": name, "grid": list(launch[0]) if launch else [], "block": list(launch[1]) if launch else [],
                 "per_step": median(r[0] for r in rows), "duration_us": median(r[1] for r in rows),
                 "added_us": median(r[2] for r in rows)}
                for (name, launch), rows in per_launch.items()]
    launches.sort(key=lambda row: -row["added_us"])
    return {"replays": len(steps), **{key: median(s[key] for s in steps)
                                      for key in ("span_us", "busy_us", "idle_us", "kernel_sum_us")},
            "launches": launches}


def replay_us(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """Median µs of one replay of a CUDA graph over groups of 20 replays back to back, after 10 untimed."""
    for _ in range(10):
        graph.replay()
    groups = []
    for _ in range(max(1, replays // 20)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            graph.replay()
        end.record()
        end.synchronize()
        groups.append(start.elapsed_time(end) * 1000 / 20)
    return median(groups)
