#!/usr/bin/env python3
"""Tile sweep of the cuTile fast path's kernels at the model's real shapes, on a GPU.

    python -m glm_asr_lab.tuning.sweep_cutile_fast [--precision bf16|tf32]
        [--only gemv,head,gemm,prefill,flash,decode,norm,hints,long_gemm]

Each candidate is checked against torch (one line per failure; the GEMVs are checked by the
self-checks instead) and timed as a CUDA graph of 20 launches (glm_asr_course.timer), so the ~14 us
host cost of an eager cuTile launch is not what is measured. The GEMVs cycle through 20 weight
copies, as the decode step reads each layer's weights once; the other launches reuse their
operands, which L2 holds where they fit. Prints one line per candidate
(µs per launch, GB/s of the operands' minimum traffic or TFLOP/s) and the best of each shape; the
chosen tiles go into the tile functions of glm_asr_cutile_example/fast_*.py by hand, with the
figures in docs/performance.md. The hints section times the linear launches and the encoder's flash
attention at the table's tiles with each of ct.kernel's compiler hints (occupancy, num_ctas,
num_worker_warps); winners go into fast_linear.KERNEL_HINTS_BY_GPU, keyed by the GPU's name. The
long_gemm section times the encoder's GEMMs over several windows at each large tile under each hint,
and the norm section the LayerNorm and RMSNorm at each rows-a-block under each occupancy: where
`gpu_check.sh long_clips` found cuTile slowest against Triton on long clips.
"""

import argparse
import itertools
import statistics
import sys

import torch


from glm_asr_course.timer import time_repeats  # noqa: E402


COPIES = 20  # distinct weights a gemv timing cycles through (20 x 8 MB, the smallest, is 3x the L2)
# ct.kernel's compiler options, one at a time. num_worker_warps sizes the warp groups of a kernel the
# compiler warp-specialises (cuda.tile 1.7 with tileiras 13.3+; 4 and 8 only before 13.5).
HINT_SETS = ({}, {"occupancy": 1}, {"occupancy": 2}, {"occupancy": 4}, {"num_ctas": 2},
             {"num_worker_warps": 4}, {"num_worker_warps": 8})
# The long_gemm and norm sections': a GEMM tile under each hint that gained somewhere (KERNEL_HINTS_BY_GPU), and a
# memory-bound norm under rising occupancy (more resident blocks, more loads in flight). 256 x 128 tiles and
# occupancy 1 never won (2026-11-27 d, call 2).
LONG_GEMM_TILES = ((64, 128, 64), (128, 128, 64), (128, 256, 64))
LONG_GEMM_HINTS = ({}, {"occupancy": 2}, {"occupancy": 4}, {"num_ctas": 2}, {"num_worker_warps": 8})
NORM_HINTS = ({}, {"occupancy": 2}, {"occupancy": 4}, {"occupancy": 8}, {"occupancy": 16})


def timed(fn, reps=COPIES):
    """µs per launch: the median replay of a CUDA graph of ``reps`` launches."""
    def graph_body():
        for _ in range(reps):
            fn()

    return statistics.median(time_repeats(graph_body, "cuda", warmup=1, repeats=10, graph=True)) * 1e3 / reps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", choices=["bf16", "tf32"], default="bf16")
    parser.add_argument("--only", default="gemv,head,gemm,prefill,flash,decode,norm,hints,long_gemm")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    from glm_asr_course.runtimes import gpu_name
    from glm_asr_cutile_example import fast_attention, fast_head, fast_linear

    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    e = dtype.itemsize
    dev = "cuda"
    parts = set(args.only.split(","))
    torch.manual_seed(0)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, device=dev) * scale).to(dtype)

    def report(name, shape, candidates, work, unit):
        best = None
        for tiles, fn, check in candidates:
            try:
                err = check(fn())
                us = timed(fn)
            except Exception as exc:  # a tile the compiler refuses: say so, go on
                print(f"  {name:10} {shape:28} {str(tiles):22} failed: {type(exc).__name__}: {str(exc)[:90]}")
                continue
            rate = work / (us * 1e-6) / 1e9
            flag = "" if err < 3e-2 else f"  WRONG (err {err:.1e})"
            print(f"  {name:10} {shape:28} {str(tiles):22} {us:9.1f} us {rate:9.1f} {unit}{flag}", flush=True)
            if not flag and (best is None or us < best[1]):
                best = (tiles, us)
        if best:
            print(f"BEST {name:10} {shape:28} {best[0]} {best[1]:.1f} us")

    def rel(out, ref):
        return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())

    if "gemv" in parts:
        # The decode step's four launches as the model makes them, each on COPIES distinct weights in turn:
        # a step reads every layer's weights once, so no launch may find its weight in L2 (50 MB).
        H, F, QKV = 2048, 6144, 3072
        norm_w = rand(H)
        problems = (("q|k|v (rmsnorm)", QKV, H, dict(prologue=fast_linear.RMSNORM, norm_weight=norm_w, eps=1e-5)),
                    ("o (+x)", H, H, dict(accumulate=True)),
                    ("gate|up (rmsnorm, swiglu)", 2 * F, H,
                     dict(gated=True, prologue=fast_linear.RMSNORM, norm_weight=norm_w, eps=1e-5)),
                    ("down (+x)", H, F, dict(accumulate=True)))
        for name, N, K, how in problems:
            weights = [rand(N, K, scale=K ** -0.5) for _ in range(COPIES)]
            x = rand(1, K)
            out = torch.empty(1, N // 2 if how.get("gated") else N, device=dev, dtype=dtype)
            turn = itertools.count()
            cands = []
            for block_n, kbytes in itertools.product((4, 8, 16, 32), (512, 1024, 2048, 4096)):
                tiles = ("gemv", (block_n, kbytes // e))
                cands.append((tiles[1], lambda t=tiles: fast_linear._launch(
                    x, weights[next(turn) % COPIES], None, out, precision="tf32", tiles=t, **how),
                    lambda _: 0.0))
            chosen = fast_linear.linear_tiles(1, N, K, dtype, gpu=gpu_name(x.device))[1]
            print(f"{name}: the table's tiles {chosen}" + (" (a gated block: half the rows each)"
                                                           if how.get("gated") else ""))
            report("gemv", f"{name} {N}x{K}", cands, N * K * e / 1e0, "GB/s")
    if "hints" in parts:
        # Each linear launch at the table's tiles, with each compiler hint alone. The decode GEMVs cycle
        # through COPIES weights as above; the GEMMs (an encoder window, a 5-minute clip's prompt and
        # encoder) reuse theirs.
        H, F, QKV = 2048, 6144, 3072
        norm_w = rand(H)
        problems = (("q|k|v gemv", 1, QKV, H, dict(prologue=fast_linear.RMSNORM, norm_weight=norm_w, eps=1e-5)),
                    ("o gemv", 1, H, H, dict(accumulate=True)),
                    ("gate|up gemv", 1, 2 * F, H, dict(gated=True, prologue=fast_linear.RMSNORM, norm_weight=norm_w,
                                                       eps=1e-5)),
                    ("down gemv", 1, H, F, dict(accumulate=True)),
                    # The 5-minute clip's prompt (M = 3,765).
                    ("q|k|v", 3765, QKV, H, {}),
                    ("o", 3765, H, H, dict(accumulate=True)),
                    ("gate|up", 3765, 2 * F, H, dict(gated=True)),
                    ("down", 3765, H, F, dict(accumulate=True)))
        # The encoder's four GEMMs over one window (a short clip), two, and ten (the 5-minute clip): the
        # best hint can change with the rows (KERNEL_HINTS_BY_GPU's min_rows).
        problems += tuple((f"enc {name} x{windows}", 1500 * windows, N, K, how) for windows in (1, 2, 10)
                          for name, N, K, how in (("q|k|v", 3840, 1280, {}), ("o", 1280, 1280, dict(accumulate=True)),
                                                  ("fc1", 5120, 1280, dict(gelu=True)),
                                                  ("fc2", 1280, 5120, dict(accumulate=True))))
        for name, M, N, K, how in problems:
            copies = COPIES if M == 1 else 1
            weights = [rand(N, K, scale=K ** -0.5) for _ in range(copies)]
            x = rand(M, K)
            out = torch.empty(M, N // 2 if how.get("gated") else N, device=dev, dtype=dtype)
            turn = itertools.count()

            # report() runs the candidates before the next problem: these closures see this one's operands.
            def run(weight, hints):
                return fast_linear._launch(x, weight, None, out, precision="tf32", hints=hints, **how)

            def once(hints):
                """One launch on the first weight into a zeroed output (an accumulating launch adds to it)."""
                out.zero_()
                return run(weights[0], hints).clone()

            # A hint changes how the kernel is compiled, not what it computes: each candidate is held to
            # the compiler's defaults, which the self-checks hold to torch.
            plain = once({})
            cands = [(hints or "defaults", lambda h=hints: run(weights[next(turn) % copies], h),
                      lambda _, h=hints: rel(once(h), plain))
                     for hints in HINT_SETS]
            work, unit = (N * K * e, "GB/s") if M == 1 else (2 * M * N * K / 1e3, "TFLOP/s")
            chosen = fast_linear.linear_tiles(M, N, K, dtype, how.get("gelu", False), gpu_name(x.device),
                                              how.get("gated", False))[1]
            print(f"{name}: the table's tiles {chosen}")
            report("hints", f"{name} {M}x{N}x{K}", cands, work, unit)
        # The encoder's flash attention over one window and ten, at its default tiles.
        T, H, D = 1500, 20, 64
        for windows in (1, 10):
            qkv = rand(windows, T, 3, H, D)
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
            out = torch.empty(windows, T, H, D, device=dev, dtype=dtype).transpose(1, 2)
            ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            cands = [(hints or "defaults", lambda h=hints, q=q, k=k, v=v, out=out: fast_attention.flash_attention(
                q, k, v, D ** -0.5, out, causal=False, precision="tf32", hints=h),
                lambda o, ref=ref: rel(o, ref)) for hints in HINT_SETS]
            report("hints", f"enc flash x{windows} T={T} H={H} D={D}", cands, 4 * windows * T * T * H * D / 1e3,
                   "TFLOP/s")
    if "head" in parts:
        V, H = 59264, 2048
        x, w_lm, norm_w = rand(1, H), rand(V, H, scale=H ** -0.5), rand(H)
        banned = torch.tensor([0], device=dev)
        ban = torch.zeros(1, dtype=torch.int32, device=dev)
        ids = torch.empty(1, dtype=torch.int64, device=dev)
        expected = int(((x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype).float()
                        * norm_w.float()).to(dtype).float().matmul(w_lm.float().T).argmax())
        cands = []
        for block_v in (8, 16, 32, 64):
            for kbytes in (512, 1024, 2048, 4096):
                tiles = (block_v, kbytes // e)
                cands.append((tiles, lambda t=tiles: fast_head.greedy_head(x, norm_w, 1e-5, w_lm, banned, ban, ids,
                                                                           tiles=t),
                              lambda out: 0.0 if int(out[0]) == expected else 1.0))
        report("head", f"{V}x{H}", cands, V * H * e, "GB/s")
    if "gemm" in parts or "prefill" in parts:
        shapes = []
        if "gemm" in parts:
            shapes += [(1500, 3840, 1280), (1500, 1280, 1280), (1500, 5120, 1280), (1500, 1280, 5120)]
        if "prefill" in parts:
            shapes += [(59, 3072, 2048), (59, 2048, 2048), (59, 2048, 6144)]
        for M, N, K in shapes:
            x, w = rand(M, K), rand(N, K, scale=K ** -0.5)
            ref = x.float() @ w.float().T
            cands = []
            tile_set = ((128, 128), (128, 256), (256, 128), (64, 128), (128, 64)) if M > 64 else \
                ((64, 16), (64, 32), (64, 64), (32, 32), (16, 32))
            for block_m, block_n in tile_set:
                for kbytes in (64, 128, 256):
                    tiles = ("gemm", (block_m, block_n, kbytes // e))
                    cands.append((tiles[1], lambda t=tiles: fast_linear.linear(x, w, precision="tf32", tiles=t),
                                  lambda out: rel(out, ref)))
            report("gemm", f"{M}x{N}x{K}", cands, 2 * M * N * K / 1e3, "TFLOP/s")
    if "flash" in parts:
        T, H, D = 1500, 20, 64
        qkv = rand(1, T, 3, H, D)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        out = torch.empty(1, T, H, D, device=dev, dtype=dtype).transpose(1, 2)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        cands = []
        for block_m in (64, 128, 256):
            for block_n in (32, 64, 128):
                tiles = (block_m, block_n, D)
                cands.append((tiles, lambda t=tiles: fast_attention.flash_attention(q, k, v, D ** -0.5, out, causal=False,
                                                                                    precision="tf32", tiles=t),
                              lambda o: rel(o, ref)))
        report("flash", f"T={T} H={H} D={D}", cands, 4 * T * T * H * D / 1e3, "TFLOP/s")
    if "decode" in parts:
        # A short transcription's cache (the test clip: 59 prompt slots + 13 tokens), a longer one, and the
        # 5-minute clip's (a 3,765-token prompt + 13 tokens, in a cache of 3,840 slots).
        B, Hq, Hkv, D = 1, 16, 4, 128
        for Tmax, valid in ((256, 72), (1024, 600), (3840, 3778)):
            q = rand(B, Hq, D)
            kc, vc = rand(B, Hkv, Tmax, D), rand(B, Hkv, Tmax, D)
            valid_len = torch.tensor([valid], dtype=torch.int32, device=dev)
            start = torch.zeros(B, dtype=torch.int32, device=dev)
            out = torch.empty(B, Hq, D, device=dev, dtype=dtype)
            ref = torch.nn.functional.scaled_dot_product_attention(q[:, :, None], kc[:, :, :valid], vc[:, :, :valid],
                                                                   enable_gqa=True)[:, :, 0]
            cands = []
            # 128-key steps too: Triton's decode attention runs fastest with them (2026-11-27 c, call 2).
            for split, block_n, block_g in itertools.product((32, 64, 128, 256), (32, 64, 128), (4, 16)):
                if block_n > split:
                    continue
                cands.append(((split, block_n, block_g), lambda s=split, t=(block_n, block_g):
                              fast_attention.decode_attention(q, kc, vc, valid_len, start, D ** -0.5, out,
                                                              precision="tf32", split_size=s, tiles=t),
                              lambda o: rel(o, ref)))
            report("decode", f"cache {Tmax} live {valid}", cands, 2 * valid * Hkv * D * e, "GB/s")
    if "long_gemm" in parts:
        long_gemms(rand, rel, report, dtype)
    if "norm" in parts:
        norms(rand, rel, report, dtype)
    return 0


def long_gemms(rand, rel, report, dtype, windows=(1, 2, 10), window_rows=1500):
    """The encoder's four GEMMs over ``windows`` windows of ``window_rows`` frames (`gpu_check.sh long_clips`,
    2026-11-27 d: cuTile's were 1.47x Triton's over ten): the table's own launch, then each LONG_GEMM_TILES
    tile under each hint, each held to torch. Winners go into fast_linear.WIDE_TILES_BY_GPU and
    KERNEL_HINTS_BY_GPU."""
    from glm_asr_course.runtimes import gpu_name
    from glm_asr_cutile_example import fast_linear

    for count in windows:
        M = window_rows * count
        for name, N, K, how in (("q|k|v", 3840, 1280, {}), ("o", 1280, 1280, dict(accumulate=True)),
                                ("fc1", 5120, 1280, dict(gelu=True)), ("fc2", 1280, 5120, dict(accumulate=True))):
            x, w = rand(M, K), rand(N, K, scale=K ** -0.5)
            out = torch.empty(M, N, device=x.device, dtype=dtype)
            ref = x.float() @ w.float().T
            if how.get("gelu"):
                ref = torch.nn.functional.gelu(ref)

            def run(tiles, hints, x=x, w=w, out=out, how=how):
                return fast_linear._launch(x, w, None, out, precision="tf32", tiles=tiles, hints=hints, **how)

            def once(tiles, hints, out=out, run=run):
                """One launch into a zeroed output (an accumulating launch adds to it)."""
                out.zero_()
                return run(tiles, hints).clone()

            # The table's launch first (tiles and hints both None), then each tile under each hint.
            configs = [(None, None, "table")] + [(("gemm", tile), hints, (tile, hints or "defaults"))
                                                 for tile in LONG_GEMM_TILES for hints in LONG_GEMM_HINTS]
            cands = [(label, lambda t=tiles, h=hints, run=run: run(t, h),
                      lambda _, t=tiles, h=hints, once=once, ref=ref: rel(once(t, h), ref))
                     for tiles, hints, label in configs]
            gpu = gpu_name(x.device)
            chosen = fast_linear.linear_tiles(M, N, K, dtype, how.get("gelu", False), gpu)[1]
            print(f"enc {name} x{count}: the table's tiles {chosen}, hints "
                  f"{fast_linear.kernel_hints(gpu, 'gemm', chosen, M) or 'defaults'}")
            report("long gemm", f"enc {name} {M}x{N}x{K}", cands, 2 * M * N * K / 1e3, "TFLOP/s")


def norms(rand, rel, report, dtype, windows=(1, 2, 10), window_rows=1500, prompt_rows=(59, 3765)):
    """LayerNorm over the encoder's ``windows`` and RMSNorm over ``prompt_rows`` prompt tokens (2026-11-27 d:
    cuTile's read about 1 TB/s, Triton's LayerNorm 2.3 and its RMSNorm 3.5) at each rows-a-block under each
    NORM_HINTS occupancy, held to torch. Winners go into fast_linear.NORM_ROWS_BY_GPU and KERNEL_HINTS_BY_GPU."""
    from glm_asr_cutile_example import fast_linear

    shapes = [("layernorm", window_rows * count, 1280) for count in windows]
    shapes += [("rmsnorm", rows, 2048) for rows in prompt_rows]
    for kind, rows, width in shapes:
        x, weight, bias = rand(rows, width), rand(width), rand(width)
        if kind == "layernorm":
            kernel, params = fast_linear.layernorm_kernel, (weight, bias)
            ref = torch.nn.functional.layer_norm(x.float(), (width,), weight.float(), bias.float(), 1e-5)
        else:
            kernel, params = fast_linear.rmsnorm_kernel, (weight,)
            ref = torch.nn.functional.rms_norm(x.float(), (width,), weight.float(), 1e-5)
        # fast_linear's own launcher, its rows a block and hints overridden.
        cands = [((per_block, hints or "defaults"),
                  lambda p=per_block, h=hints, kind=kind, kernel=kernel, x=x, params=params: fast_linear._norm(
                      kind, kernel, x, params, 1e-5, per_block=p, hints=h),
                  lambda o, ref=ref: rel(o, ref))
                 for per_block, hints in itertools.product((1, 2, 4, 8), NORM_HINTS)]
        report(kind, f"{rows}x{width}", cands, 2 * rows * width * dtype.itemsize, "GB/s")


if __name__ == "__main__":
    sys.exit(main())
