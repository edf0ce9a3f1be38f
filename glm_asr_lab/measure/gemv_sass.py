#!/usr/bin/env python3
"""What each track's compiler makes of the decode step's one-row GEMVs, compiled for Hopper on any machine.

    python -m glm_asr_lab.measure.gemv_sass [--gpu "NVIDIA H100 80GB HBM3"] [--json PATH]

Run it without TRITON_INTERPRET, with cuda-tile and its compiler installed (source utils/setup-cutile.sh).

The two fast paths run the same GEMV algorithm: lane-wise partial sums over K steps, the first weight step loaded
before the PDL wait, the RMSNorm prologue recomputed by every block. On a GPU cuTile's launches still add more
to a decode step than Triton's (docs/performance.md, 2026-11-28 a). This compiles the o, gate|up and down GEMVs
of both tracks as the fast paths launch them for the named GPU (tiles, compiler hints), at the model's shapes,
and reads the machine code (Triton's for sm_90a, cuTile's for sm_90): registers a thread, threads and shared
memory a block, blocks an SM (what those allow), and the load instructions. LDG moves global memory into
registers; UTMALDG is a TMA copy into shared memory, which LDS then reads into registers. Shared memory is
what the code declares plus, for Triton, what its launch asks for (the kernel's metadata).

cuTile's launches are taken from an emulated run that records them (GLM_ASR_CUTILE_RECORD), in a process of
its own, since the cuTile runtime picks the emulator or the compiler when it is imported.
"""

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

import torch

from glm_asr_course.tracks import REPO_ROOT
from glm_asr_lab.measure.occupancy import blocks_an_sm

H100 = "NVIDIA H100 80GB HBM3"
LOADS = ("LDG", "UTMALDG", "LDS", "LDGSTS")  # the load instructions counted, by their first word
SMS = 132  # the H100's and the H200's: how many programs fast_linear's rule plans for


def decode_gemvs(cfg) -> dict[str, tuple[int, int]]:
    """(N, K) of the decode step's o, gate|up and down weights (gate|up: both halves), from the config."""
    d = cfg.decoder
    return {"o": (d.hidden_size, d.num_heads * d.head_dim), "gate_up": (2 * d.intermediate_size, d.hidden_size),
            "down": (d.hidden_size, d.intermediate_size)}


def record_cutile_launches(shapes: dict[str, tuple[int, int]]) -> None:
    """Launch cuTile's three GEMVs as its fast path does for one decode row, emulated, with the tiles a GPU gets
    (the emulator's own tiles are larger). Run with GLM_ASR_CUTILE=emulate and GLM_ASR_CUTILE_RECORD set."""
    from glm_asr_cutile_example import fast_linear

    bf16 = torch.bfloat16
    (n_o, k_o), (n_gu, k_gu), (n_down, k_down) = shapes["o"], shapes["gate_up"], shapes["down"]
    x = torch.zeros(1, n_o, dtype=bf16)
    # linear_tiles picks larger tiles for the emulator, which pays per block; the GPU's are what is compiled.
    with mock.patch.object(fast_linear, "EMULATED", False):
        fast_linear.linear(torch.zeros(1, k_o, dtype=bf16), torch.zeros(n_o, k_o, dtype=bf16), accumulate_into=x,
                           precision="ieee")
        fast_linear.llama_mlp(x, torch.ones(k_gu, dtype=bf16), 1e-5, torch.zeros(n_gu, k_gu, dtype=bf16),
                              torch.zeros(n_down, k_down, dtype=bf16), precision="ieee")


def cutile_cubins(signatures: list[dict], gpu: str) -> list[tuple[str, bytes, int]]:
    """(constants, cubin, 0: no shared memory beyond what the code declares) of each recorded GEMV launch,
    compiled with the GPU's hints. The process must have GLM_ASR_CUTILE=compile (main sets it)."""
    from glm_asr_cutile_example import fast_linear
    from glm_asr_lab.cutile_compile_check import _import_compiler, kernel_signature

    ct, compilation = _import_compiler()
    out = []
    for entry in signatures:
        constants = {p["param"]: p["value"] for p in entry["params"] if p["kind"] == "constant"}
        kind = "gated gemv" if constants["GATED"] else "gemv"
        tile = (2 * constants["BLOCK_N"] if constants["GATED"] else constants["BLOCK_N"], constants["BLOCK_K"])
        hints = fast_linear.kernel_hints(gpu, kind, tile, 1)
        kernel = ct.kernel(fast_linear.gemv_kernel._pyfunc, **hints)
        buffer = io.BytesIO()
        compilation.export_kernel(kernel, [kernel_signature(ct, compilation, entry["params"])], buffer,
                                  gpu_code="sm_90", output_format="cubin")
        described = " ".join(f"{k}={v}" for k, v in constants.items() if k in ("GATED", "ACCUMULATE", "BLOCK_N",
                                                                                 "BLOCK_K", "PROLOGUE"))
        out.append((f"{described} {hints or ''}".strip(), buffer.getvalue(), 0))
    return out


def triton_cubins(shapes: dict[str, tuple[int, int]], gpu: str) -> dict[str, tuple[str, bytes, int]]:
    """(tile, cubin, shared bytes its launch asks for) of Triton's o, gate|up and down GEMVs as fast_linear
    launches them on ``gpu``: o (+residual), gate|up (RMSNorm prologue), down (SwiGLU prologue, +residual). The arguments a launch passes
    as None (no bias, no split-K partials, no norm weight without the RMSNorm prologue) are constants, as there."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from glm_asr_triton_example import fast_linear

    prologues = {"o": ("none", True), "gate_up": ("rmsnorm", False), "down": ("swiglu", True)}
    out = {}
    for name, (n, k) in shapes.items():
        prologue, residual = prologues[name]
        kind, cfg = fast_linear._linear_config(1, n, k, torch.bfloat16, False, SMS, gpu=gpu)
        assert kind == "gemv", (name, kind)
        cfg = dict(cfg)
        warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
        signature = {p: "*bf16" for p in ("x_ptr", "w_ptr", "bias_ptr", "residual_ptr", "out_ptr", "norm_weight_ptr")}
        signature |= dict(partial_ptr="*fp32", N="i32", K="i32", stride_wn="i32", k_per_split="i32", eps="fp32")
        constants = dict(APPLY_GELU=False, PROLOGUE=prologue, PDL=True, bias_ptr=None, **cfg)
        if not residual:
            constants["residual_ptr"] = None
        if cfg["SPLIT_K"] == 1:
            constants["partial_ptr"] = None
        if prologue != "rmsnorm":
            constants["norm_weight_ptr"] = None
        order = list(fast_linear.gemv_kernel.arg_names)
        signature = {p: "constexpr" if p in constants else signature[p] for p in order}
        # Pointers and sizes as a launch specialises them: 16-byte aligned, multiples of 16.
        attrs = {(order.index(p),): [["tt.divisibility", 16]] for p in order
                 if signature[p] != "constexpr" and signature[p] != "fp32"}
        compiled = triton.compile(ASTSource(fast_linear.gemv_kernel, signature, constants, attrs=attrs),
                                  target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
        tile = f"BLOCK_N={cfg['BLOCK_N']} BLOCK_K={cfg['BLOCK_K']} SPLIT_K={cfg['SPLIT_K']}"
        out[name] = (tile, compiled.asm["cubin"], compiled.metadata.shared)
    return out


def cuobjdump() -> str:
    import triton.backends.nvidia

    return str(Path(triton.backends.nvidia.__file__).parent / "bin" / "cuobjdump")


def machine_code(cubin: bytes, launch_shared: int) -> dict:
    """Registers, shared memory (what the code declares + ``launch_shared``), threads a block (the code's
    required block size), blocks an SM and the load instructions of one kernel's cubin, read by cuobjdump."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        read = {flag: subprocess.run([cuobjdump(), flag, file.name], capture_output=True, text=True, check=True).stdout
                for flag in ("-res-usage", "-sass", "-elf")}
    registers = int(re.search(r"REG:(\d+)", read["-res-usage"]).group(1))
    shared = int(re.search(r"SHARED:(\d+)", read["-res-usage"]).group(1)) + launch_shared
    threads = int(re.search(r"EIATTR_REQNTID\s+Format:\s+\S+\s+Value:\s+(0x[0-9a-f]+)", read["-elf"]).group(1), 16)
    # LDG but not LDGDEPBAR, LDS but not LDSM (a matrix load of the reduction).
    loads = Counter(m.group(1) for m in re.finditer(r"\b(LDGSTS|UTMALDG|LDG|LDS)(?=[.\s])", read["-sass"]))
    return dict(registers=registers, shared_bytes=shared, threads=threads,
                blocks_an_sm=blocks_an_sm(registers, threads, shared),
                loads={name: loads.get(name, 0) for name in LOADS})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default=H100, help="the GPU whose tiles and hints the launches take")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)  # the recording subprocess
    args = parser.parse_args(argv)
    from glm_asr_course.model.checkpoint import default_config_dict
    from glm_asr_course.model.config import ModelConfig

    shapes = decode_gemvs(ModelConfig.from_dict(default_config_dict()))
    if args.record:
        record_cutile_launches(shapes)
        return 0
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("gemv_sass compiles for the GPU: run it without TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    from glm_asr_lab.cutile_compile_check import toolchain_missing

    os.environ["GLM_ASR_CUTILE"] = "compile"  # before anything imports the cuTile runtime, which reads it once
    missing = toolchain_missing()
    if missing:
        print(f"gemv_sass: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "launches.json"
        env = dict(os.environ, GLM_ASR_CUTILE="emulate", GLM_ASR_CUTILE_RECORD=str(record), TRITON_INTERPRET="1")
        recorded = subprocess.run([sys.executable, "-m", "glm_asr_lab.measure.gemv_sass", "--record", str(record)],
                                  env=env, cwd=REPO_ROOT, capture_output=True, text=True)
        if recorded.returncode:
            last = (recorded.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"gemv_sass: recording cuTile's launches failed: {last}", file=sys.stderr)
            return 1
        signatures = [s for s in json.loads(record.read_text()) if s["kernel"].endswith("fast_linear.gemv_kernel")]
    # The recording launches o, gate|up, down in that order; each is one signature.
    cutile = dict(zip(shapes, cutile_cubins(signatures, args.gpu), strict=True))
    triton_side = triton_cubins(shapes, args.gpu)
    rows = []
    print(f"The decode step's one-row GEMVs compiled for Hopper (Triton sm_90a, cuTile sm_90) with {args.gpu}'s tiles "
          "and hints, bf16")
    print(f"{'launch':8s} {'track':7s} {'regs':>4s} {'threads':>7s} {'shared B':>8s} {'blocks/SM':>9s}  "
          + "  ".join(f"{name:>7s}" for name in LOADS) + "  launch options")
    for name in shapes:
        for track, (options, cubin, launch_shared) in (("triton", triton_side[name]), ("cutile", cutile[name])):
            code = machine_code(cubin, launch_shared)
            rows.append(dict(launch=name, track=track, options=options, **code))
            print(f"{name:8s} {track:7s} {code['registers']:4d} {code['threads']:7d} {code['shared_bytes']:8d} "
                  f"{code['blocks_an_sm']:9d}  " + "  ".join(f"{code['loads'][n]:7d}" for n in LOADS) + f"  {options}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
