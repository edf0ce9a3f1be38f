#!/usr/bin/env python3
"""Time the Triton example's fast-path linear launches over a grid of tile configurations, at the real shapes.

    python -m glm_asr_lab.tuning.sweep_linear [--dtype bfloat16] [--sections decode,prefill,encoder] [--json PATH]

What ``fast_linear._linear_config`` picks is a hand-made table; this is how its entries are chosen. For
each GEMM of the real model (sizes from transformers' default GlmAsrConfig) and each candidate
configuration it times the launch as the model runs it (the same prologue / epilogue), prints the
candidates best first with GB/s of weight bytes (decode, prefill) or TFLOP/s (encoder), and marks
the configuration the table picks today on this GPU. A GPU whose best one-row tile beats the rule gets an
entry in ``fast_linear.GEMV_TILES_BY_GPU``, keyed by the name CUDA gives it.

Timing: a CUDA graph of back-to-back launches, each on its own copy of the weight so that no launch
finds its weight in L2 (the copies together are well over the L2 size), as in the decode graph
where every layer reads fresh weights. GPU only.
"""

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch


from glm_asr_course.model.checkpoint import default_config_dict  # noqa: E402
from glm_asr_course.model.config import ModelConfig  # noqa: E402
from glm_asr_course.timer import time_repeats  # noqa: E402
from glm_asr_triton_example import fast_linear  # noqa: E402

L2_FLUSH_BYTES = 512 << 20  # the weight copies of one timing cover this much (L2: 50-60 MiB)


def add_report_arguments(parser: argparse.ArgumentParser):
    """--top and --json, which every Triton sweep takes."""
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--json", help="write every timing as JSON")


def require_gpu(tool: str, interpreted: bool):
    """Exit with one line unless kernels run on a GPU; then seed torch (the same inputs every run)."""
    if not torch.cuda.is_available() or interpreted:
        sys.exit(f"{tool} times GPU kernels: it needs CUDA (and TRITON_INTERPRET unset)")
    torch.manual_seed(0)


def graph_time_us(launch, copies: int, repeats: int = 5) -> float:
    """Median time of one launch, from a CUDA graph of `copies` launches (launch(i) uses copy i)."""
    def every_copy():
        for i in range(copies):
            launch(i)

    return statistics.median(time_repeats(every_copy, "cuda", warmup=1, repeats=repeats, graph=True)) * 1000 / copies


def flush_copies(nbytes: int) -> int:
    """How many copies of an operand of nbytes cover L2_FLUSH_BYTES (at least 2)."""
    return max(2, -(-L2_FLUSH_BYTES // nbytes))


def weight_copies(rows: int, cols: int, dtype, scale: float) -> list[torch.Tensor]:
    return [(torch.randn(rows, cols, device="cuda") * scale).to(dtype)
            for _ in range(flush_copies(rows * cols * dtype.itemsize))]


def decode_problems(cfg: ModelConfig) -> list[dict]:
    d = cfg.decoder
    qkv = (d.num_heads + 2 * d.num_kv_heads) * d.head_dim
    return [
        dict(name="decode qkv (rmsnorm prologue)", N=qkv, K=d.hidden_size, prologue="rmsnorm", residual=False),
        dict(name="decode o (+residual)", N=d.hidden_size, K=d.num_heads * d.head_dim, prologue="none", residual=True),
        dict(name="decode gate|up (rmsnorm prologue)", N=2 * d.intermediate_size, K=d.hidden_size,
             prologue="rmsnorm", residual=False),
        dict(name="decode down (swiglu prologue, +residual)", N=d.hidden_size, K=d.intermediate_size,
             prologue="swiglu", residual=True),
    ]


def decode_configs(dtype, kinds: tuple[str, ...] = ("gemv",)) -> list[tuple[str, dict]]:
    """Candidates for one row. "gemv": the CUDA-core kernel. "gemm" / "tma": a 16-row tensor-core tile
    (rows past the one real row read as zeros) whose loads the compiler pipelines through shared
    memory (plain loads with split K, or TMA, optionally one program per SM)."""
    out = []
    if "gemv" in kinds:
        for block_n, k_bytes, warps, stages, split in itertools.product((2, 4, 8, 16), (2048, 4096), (4, 8),
                                                                        (2, 4), (1, 2)):
            if split == 1 or block_n >= 8:  # narrow tiles already give every SM several programs
                out.append(("gemv", dict(BLOCK_N=block_n, BLOCK_K=k_bytes // dtype.itemsize, SPLIT_K=split,
                                         num_warps=warps, num_stages=stages)))
    if "gemm" in kinds:
        for block_n, k_bytes, stages, split in itertools.product((16, 32, 64), (512, 1024), (3, 5), (1, 2)):
            out.append(("gemm", dict(BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=k_bytes // dtype.itemsize, GROUP_M=1,
                                     SPLIT_K=split, num_warps=4, num_stages=stages)))
    if "tma" in kinds:
        for block_n, k_bytes, stages, persistent in itertools.product((16, 32, 64), (128, 256), (4, 8),
                                                                      (False, True)):
            out.append(("tma", dict(BLOCK_M=16, BLOCK_N=block_n, BLOCK_K=k_bytes // dtype.itemsize, GROUP_M=1,
                                    SPLIT_K=1, PERSISTENT=persistent, num_warps=4, num_stages=stages)))
    return out


def time_decode(problem: dict, dtype, configs, sms: int) -> list[dict]:
    """Each candidate with the problem's prologue where its kernel takes it: the tiled kernels get
    "rmsnorm" as a separate rmsnorm launch (counted) and run without "swiglu" (marked)."""
    N, K, prologue = problem["N"], problem["K"], problem["prologue"]
    weights = weight_copies(N, K, dtype, K ** -0.5)
    x = torch.randn(1, 2 * K if prologue == "swiglu" else K, device="cuda").to(dtype)
    norm = torch.randn(K, device="cuda").to(dtype) if prologue == "rmsnorm" else None
    residual = torch.randn(1, N, device="cuda").to(dtype) if problem["residual"] else None
    out = torch.empty(1, N, device="cuda", dtype=dtype)
    chosen = fast_linear._linear_config(1, N, K, dtype, False, sms, gpu=torch.cuda.get_device_name())
    rows = []
    for config in [chosen] + [c for c in configs if c != chosen]:
        own = prologue if config[0] == "gemv" or prologue != "swiglu" else "none"
        x_in = x[:, :K] if own == "none" and prologue == "swiglu" else x

        def launch(i, config=config, own=own, x_in=x_in):
            fast_linear._launch_linear(x_in, weights[i % len(weights)], None, residual, out, False, False, "tf32",
                                       prologue=own, norm_weight=norm, eps=1e-5, config=config)

        try:
            us = graph_time_us(launch, len(weights))
        except Exception as error:  # e.g. out of shared memory for a large tile: skip the candidate
            print(f"  skipped {config[0]} {config[1]}: {type(error).__name__}: {str(error).splitlines()[0][:100]}")
            continue
        rows.append(dict(kind=config[0] + ("" if own == prologue else " (no prologue)"), config=config[1], us=us,
                         gbps=N * K * dtype.itemsize / us / 1e3, chosen=config == chosen))
    return rows


def gemm_problems(cfg: ModelConfig, section: str, prefill_rows: int) -> list[dict]:
    if section == "prefill":
        d = cfg.decoder
        M = prefill_rows
        return [
            dict(name=f"prefill qkv M={M}", M=M, N=(d.num_heads + 2 * d.num_kv_heads) * d.head_dim,
                 K=d.hidden_size, gated=False, bias=False, gelu=False, residual=False),
            dict(name=f"prefill o M={M} (+residual)", M=M, N=d.hidden_size, K=d.num_heads * d.head_dim,
                 gated=False, bias=False, gelu=False, residual=True),
            dict(name=f"prefill gate|up M={M} (swiglu)", M=M, N=d.intermediate_size, K=d.hidden_size,
                 gated=True, bias=False, gelu=False, residual=False),
            dict(name=f"prefill down M={M} (+residual)", M=M, N=d.hidden_size, K=d.intermediate_size,
                 gated=False, bias=False, gelu=False, residual=True),
        ]
    e = cfg.encoder
    M = e.max_positions
    return [
        dict(name=f"encoder qkv M={M}", M=M, N=3 * e.hidden_size, K=e.hidden_size, gated=False, bias=True,
             gelu=False, residual=False),
        dict(name=f"encoder o M={M} (+residual)", M=M, N=e.hidden_size, K=e.hidden_size, gated=False, bias=True,
             gelu=False, residual=True),
        dict(name=f"encoder fc1 M={M} (gelu)", M=M, N=e.intermediate_size, K=e.hidden_size, gated=False,
             bias=True, gelu=True, residual=False),
        dict(name=f"encoder fc2 M={M} (+residual)", M=M, N=e.hidden_size, K=e.intermediate_size, gated=False,
             bias=True, gelu=False, residual=True),
    ]


def gemm_configs(section: str, dtype) -> list[tuple[str, dict]]:
    out = []
    if section == "prefill":
        for block_m, block_n, block_k, split in itertools.product((32, 64), (32, 64, 128), (64, 128), (1, 2, 4)):
            out.append(("gemm", dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=1, SPLIT_K=split,
                                     num_warps=4, num_stages=3)))
        return out
    # Encoder: 128-byte K steps (one swizzled row of a TMA tile), plain loads or TMA, and for TMA one
    # program per tile or one per SM.
    block_k = 128 // dtype.itemsize
    for (block_m, block_n, warps), stages in itertools.product(((128, 128, 4), (128, 128, 8), (128, 256, 8)), (3, 4)):
        out.append(("gemm", dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SPLIT_K=1,
                                 num_warps=warps, num_stages=stages)))
    tma_tiles = ((128, 128, 4), (128, 128, 8), (128, 256, 8), (256, 128, 8))
    for (block_m, block_n, warps), stages, persistent in itertools.product(tma_tiles, (3, 4), (False, True)):
        out.append(("tma", dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, SPLIT_K=1,
                                PERSISTENT=persistent, num_warps=warps, num_stages=stages)))
    return out


def time_gemm(problem: dict, dtype, configs, sms: int) -> list[dict]:
    M, N, K, gated = problem["M"], problem["N"], problem["K"], problem["gated"]
    weights = weight_copies(2 * N if gated else N, K, dtype, K ** -0.5)
    x = torch.randn(M, K, device="cuda").to(dtype)
    bias = torch.randn(N, device="cuda").to(dtype) if problem["bias"] else None
    residual = torch.randn(M, N, device="cuda").to(dtype) if problem["residual"] else None
    out = torch.empty(M, N, device="cuda", dtype=dtype)
    chosen = fast_linear._linear_config(M, N, K, dtype, gated, sms)
    weight_bytes = (2 if gated else 1) * N * K * dtype.itemsize
    flops = 2 * M * K * N * (2 if gated else 1)
    rows = []
    for config in [chosen] + [c for c in configs if c != chosen]:
        def launch(i, config=config):
            fast_linear._launch_linear(x, weights[i % len(weights)], bias, residual, out, problem["gelu"], gated,
                                  "tf32", config=config)

        try:
            us = graph_time_us(launch, len(weights))
        except Exception as error:  # e.g. out of shared memory for a large tile: skip the candidate
            print(f"  skipped {config[1]}: {type(error).__name__}: {str(error).splitlines()[0][:100]}")
            continue
        rows.append(dict(kind=config[0], config=config[1], us=us, gbps=weight_bytes / us / 1e3,
                         tflops=flops / us / 1e6, chosen=config == chosen))
    return rows


def report(name: str, rows: list[dict], top: int, rate: str):
    rows = sorted(rows, key=lambda r: r["us"])
    chosen = next((r for r in rows if r["chosen"]), None)
    print(f"\n{name}" + (f": table's choice {chosen['us']:.1f} us" if chosen else ""))
    for rank, row in enumerate(rows[:top] + ([chosen] if chosen and chosen not in rows[:top] else [])):
        cfg = f"{row['kind']:4} " + " ".join(f"{k}={v}" for k, v in row["config"].items())
        mark = "  <- table" if row["chosen"] else ""
        value = f"{row['tflops']:7.1f} TFLOP/s" if rate == "tflops" else f"{row['gbps']:7.0f} GB/s"
        print(f"  {row['us']:8.1f} us {value}  {cfg}{mark}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--sections", default="decode,prefill,encoder")
    parser.add_argument("--decode-kinds", default="gemv",
                        help="comma-separated kernels tried for one row: gemv, gemm (16-row tensor-core tile), tma")
    parser.add_argument("--prefill-rows", type=int, default=59, help="prompt length of the prefill GEMMs")
    add_report_arguments(parser)
    args = parser.parse_args()
    require_gpu("sweep_linear.py", fast_linear.INTERPRET)
    dtype = getattr(torch, args.dtype)
    cfg = ModelConfig.from_dict(default_config_dict())
    sms = fast_linear._sm_count(torch.device("cuda"))
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, {args.dtype}")
    results = {}
    for section in args.sections.split(","):
        start = time.time()
        if section == "decode":
            configs = decode_configs(dtype, tuple(args.decode_kinds.split(",")))
            for problem in decode_problems(cfg):
                results[problem["name"]] = rows = time_decode(problem, dtype, configs, sms)
                report(problem["name"], rows, args.top, "gbps")
        else:
            configs = gemm_configs(section, dtype)
            for problem in gemm_problems(cfg, section, args.prefill_rows):
                results[problem["name"]] = rows = time_gemm(problem, dtype, configs, sms)
                report(problem["name"], rows, args.top, "tflops" if section == "encoder" else "gbps")
        print(f"({section}: {time.time() - start:.0f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), dtype=args.dtype,
                                                   results=results), indent=1))


if __name__ == "__main__":
    main()
