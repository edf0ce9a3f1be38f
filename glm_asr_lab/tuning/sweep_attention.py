#!/usr/bin/env python3
"""Time the Triton example's attention over a grid of tiles, at the model's real shapes.

    python -m glm_asr_lab.tuning.sweep_attention [--sections flash,decode] [--top 5] [--json PATH]

``fast_attention._flash_config`` and decode_attention's split and tiles are hand-made; this is how
they are checked on a GPU, in bf16. Shapes come from transformers' default GlmAsrConfig:
  encoder   non-causal over the whole 30 s window, q, k, v strided views into the fused QKV output,
            one window (a short clip: few programs, so the tiles decide how full the GPU is) and ten
            (the 5-minute clip)
  prefill   causal, GQA, keys and values read from the KV cache: the test clip's prompt and the
            5-minute clip's
  decode    one query row per head against the cache (split size, keys a step, warps): the test
            clip's cache (256 slots, 72 live), a longer one, and the 5-minute clip's (3,840 slots).
            Each launch reads its own copy of the cache, as each layer of a decode step does.
Each candidate is checked against torch's scaled_dot_product_attention before it is timed (a tile
that computes the wrong thing is reported, not ranked). Rates: attention FLOPs (4 T_q T_k H D, halved
when causal) per second; for decode, the live cache's bytes per second. GPU only.
"""

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
import triton

from glm_asr_course.model.checkpoint import default_config_dict
from glm_asr_course.model.config import ModelConfig
from glm_asr_lab.tuning.sweep_linear import add_report_arguments, flush_copies, graph_time_us, report, require_gpu
from glm_asr_triton_example import fast_attention

GRAPH_LAUNCHES = 8  # launches per timed graph (the inputs stay in L2, as in the model)
MAX_RELATIVE_ERROR = 3e-2  # bf16 rounds to 0.4 %; a wrong tile misses by far more


def problems(cfg: ModelConfig, prompt_tokens: tuple[int, ...]) -> list[dict]:
    e, d = cfg.encoder, cfg.decoder
    out = [dict(name=f"encoder {windows} window(s) T={e.max_positions} H={e.num_heads} D={e.head_dim}",
                batch=windows, T=e.max_positions, Hq=e.num_heads, Hkv=e.num_heads, D=e.head_dim, causal=False)
           for windows in (1, 10)]
    out += [dict(name=f"prefill T={T} Hq={d.num_heads} Hkv={d.num_kv_heads} D={d.head_dim}", batch=1, T=T,
                 Hq=d.num_heads, Hkv=d.num_kv_heads, D=d.head_dim, causal=True) for T in prompt_tokens]
    return out


def candidates(causal: bool) -> list[tuple[int, int, int, int]]:
    out = []
    for block_m, block_n, warps, stages in itertools.product((64, 128, 256), (32, 64, 128), (4, 8), (2, 3, 4)):
        if block_m * block_n > 128 * 128 or (causal and block_m % block_n):
            continue
        out.append((block_m, block_n, warps, stages))
    return out


def inputs(problem: dict, dtype: torch.dtype):
    """(q, k, v, kv_layout, kv_start, reference) laid out as the model lays them out."""
    B, T, Hq, Hkv, D = (problem[key] for key in ("batch", "T", "Hq", "Hkv", "D"))
    if not problem["causal"]:
        qkv = torch.randn(B, T, 3 * Hq, D, device="cuda").to(dtype)
        q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:2 * Hq], qkv[:, :, 2 * Hq:]
        ref = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
        return q, k, v, "bthd", None, ref.transpose(1, 2)
    q = torch.randn(B, T, Hq, D, device="cuda").to(dtype)
    cache_slots = T + 64
    k_cache, v_cache = (torch.randn(B, Hkv, cache_slots, D, device="cuda").to(dtype) for _ in range(2))
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k_cache[:, :, :T], v_cache[:, :, :T],
                                                           is_causal=True, enable_gqa=True)
    kv_start = torch.zeros(B, dtype=torch.int32, device="cuda")  # the model always passes one (no padding here)
    return q, k_cache, v_cache, "bhtd", kv_start, ref.transpose(1, 2)


def checked_us(launch, out: torch.Tensor, ref: torch.Tensor, label, launches: int) -> float | None:
    """µs a launch, or None (said in one line) when the candidate computes the wrong thing or cannot run.
    The error is each output row's, relative to that row's largest value: attention outputs average
    many value rows, so they are small and differ from row to row (a causal first row is one value
    row), and a bar set by the largest would pass a candidate that drops keys. out is filled with NaN
    first: rows a candidate leaves unwritten show, and NaN fails the test."""
    try:
        out.fill_(float("nan"))
        launch(0)
        row_error = (out.float() - ref.float()).abs().amax(-1) / ref.float().abs().amax(-1).clamp_min(1e-6)
        error = row_error.max().item()
        if not error <= MAX_RELATIVE_ERROR:
            print(f"  wrong {label}: max error {error:.3g}")
            return None
        return graph_time_us(launch, launches)
    except Exception as failure:  # e.g. out of shared memory for a large tile: skip the candidate
        print(f"  skipped {label}: {type(failure).__name__}: {str(failure).splitlines()[0][:100]}")
        return None


def time_problem(problem: dict, dtype: torch.dtype) -> list[dict]:
    q, k, v, layout, kv_start, ref = inputs(problem, dtype)
    out = torch.empty_like(ref, memory_format=torch.contiguous_format)
    scale = problem["D"] ** -0.5
    flops = 4 * problem["batch"] * problem["T"] ** 2 * problem["Hq"] * problem["D"] / (2 if problem["causal"] else 1)
    chosen = fast_attention._flash_config(max(16, triton.next_power_of_2(problem["D"])), dtype, "tf32")
    rows = []
    for tiles in [chosen] + [t for t in candidates(problem["causal"]) if t != chosen]:
        def launch(_, tiles=tiles):
            fast_attention.flash_attention(q, k, v, scale, causal=problem["causal"], precision="tf32",
                                           kv_layout=layout, kv_start=kv_start, out=out, tiles=tiles)

        us = checked_us(launch, out, ref, tiles, GRAPH_LAUNCHES)
        if us is None:
            continue
        rows.append(dict(kind="flash", config=dict(BLOCK_M=tiles[0], BLOCK_N=tiles[1], num_warps=tiles[2],
                                                   num_stages=tiles[3]),
                         us=us, tflops=flops / us / 1e6, chosen=tiles == chosen))
    return rows


def decode_caches(cfg: ModelConfig) -> list[dict]:
    d = cfg.decoder
    return [dict(name=f"decode cache {slots} live {live} Hq={d.num_heads} Hkv={d.num_kv_heads} D={d.head_dim}",
                 slots=slots, live=live, Hq=d.num_heads, Hkv=d.num_kv_heads, D=d.head_dim)
            for slots, live in ((256, 72), (1024, 600), (3840, 3778))]


def time_decode(problem: dict, dtype: torch.dtype) -> list[dict]:
    """Each (split size, keys a step, warps) against the launcher's default, on cache copies that
    together exceed L2."""
    slots, live, Hq, Hkv, D = (problem[key] for key in ("slots", "live", "Hq", "Hkv", "D"))
    cache_bytes = 2 * Hkv * slots * D * dtype.itemsize
    copies = flush_copies(cache_bytes)
    caches = [tuple(torch.randn(1, Hkv, slots, D, device="cuda").to(dtype) for _ in range(2)) for _ in range(copies)]
    q = torch.randn(1, 1, Hq, D, device="cuda").to(dtype)
    cache_len = torch.tensor([live], dtype=torch.int32, device="cuda")
    kv_start = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    k0, v0 = caches[0]
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k0[:, :, :live], v0[:, :, :live],
                                                           enable_gqa=True).transpose(1, 2)
    default_split, default_n, default_warps = fast_attention._decode_config(slots, dtype)  # the GPU's choice
    default = (default_split, (default_n, default_warps))
    configs = [default] + [(split, (block_n, warps)) for split, block_n, warps in
                           itertools.product((64, 128, 256, 512, 1024), (32, 64, 128), (4, 8))
                           if block_n <= split and (split, (block_n, warps)) != default]
    rows = []
    for config in configs:
        split, tiles = config

        def launch(i, split=split, tiles=tiles):
            k_cache, v_cache = caches[i % copies]
            fast_attention.decode_attention(q, k_cache, v_cache, cache_len, kv_start, D ** -0.5, out,
                                            precision="tf32", split_size=split, tiles=tiles)

        us = checked_us(launch, out, ref, config, copies)
        if us is None:
            continue
        rows.append(dict(kind="decode", config=dict(split=split, BLOCK_N=tiles[0], num_warps=tiles[1]), us=us,
                         gbps=cache_bytes * live / slots / us / 1e3, chosen=config == default))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default="flash,decode", help="comma-separated: flash (encoder and prefill), decode")
    parser.add_argument("--prompt-tokens", default="59,3765", help="comma-separated prompt lengths (prefill)")
    add_report_arguments(parser)
    args = parser.parse_args()
    require_gpu("sweep_attention.py", fast_attention.INTERPRET)
    dtype = torch.bfloat16
    cfg = ModelConfig.from_dict(default_config_dict())
    print(f"{torch.cuda.get_device_name()}, bf16")
    sections = args.sections.split(",")
    jobs = []
    if "flash" in sections:
        jobs += [(problem, time_problem, "tflops")
                 for problem in problems(cfg, tuple(int(t) for t in args.prompt_tokens.split(",")))]
    if "decode" in sections:
        jobs += [(problem, time_decode, "gbps") for problem in decode_caches(cfg)]
    results = {}
    for problem, time_candidates, rate in jobs:
        start = time.time()
        print(f"\n{problem['name']}", flush=True)
        results[problem["name"]] = rows = time_candidates(problem, dtype)
        report(problem["name"], rows, args.top, rate)
        if args.json:  # after every problem: a step stopped by its time limit keeps what it finished
            Path(args.json).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), dtype="bfloat16",
                                                       results=results), indent=1))
        print(f"({time.time() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
