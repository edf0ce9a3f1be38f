"""Measuring a transcription, one job a module:

    timer       the one timer: a call, repeats (L2 flush, warm-up, CUDA-graph replays), CUDA events or the clock
    roofline    FLOPs and bytes of the real shapes, measured device peaks, the floor and verdicts
    components  region instances → component, part and layer times; the region timer
    trace       torch.profiler's Chrome trace → kernels in the regions around them
    timeline    a CUDA-graph-replayed decode step, launch by launch: what each kernel's end adds to the step
    operators   kernels → operator and class rows with FLOPs, bytes and verdicts
    breakdown   benchmark_detailed's measurements of one transcription and its report
    micro       benchmark_detailed's attention / linear micro-benchmarks
    plots       every plot
    transformers_anchor  transformers' own transcription timed as a speed anchor (eager, static cache, compiled)
"""
