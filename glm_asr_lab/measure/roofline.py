"""FLOPs and bytes of every logical operation of one transcription, device peaks, roofline verdicts.

Everything is computed from the checkpoint's ``ModelConfig`` and the
transcription's sizes (windows, prompt length, decode steps), so the same formulas serve the real
model and the tiny test checkpoints, and every track (Triton, cuTile, scratch, transformers) is
measured against the same numerators: a fused kernel and an unfused chain of torch ops do the same
*useful* work, and the faster one shows the higher effective GB/s and TFLOP/s.

Formulas (e = bytes per element of the activation dtype, B = batch rows, "elements" count values):

  GEMM  y = x W^T (+ bias), x (M, K), W (N, K)
        FLOPs = 2·M·N·K (+ M·N for the bias)        bytes = e·(M·K + N·K + M·N) (+ e·N for the bias)
        The minimum traffic: each operand read once, the output written once. For decode (M = B)
        the weight term N·K dominates: the step streams every weight matrix once.
  attention  softmax(q k^T / √D) v, Hq query heads, Hkv key/value heads (GQA), head dim D
        FLOPs = 4·D·Hq·B·pairs  (2·D for q·k and 2·D for p·v per visible (query, key) pair;
                softmax's exp/max/sum, O(pairs) per head, not counted)
        pairs = Tq·Tk, or Tq(Tq+1)/2 when causal with Tq = Tk (masked blocks are skipped)
        bytes = e·B·D·(2·Hq·Tq + 2·Hkv·Tk)  (q read, output written, K and V read once: flash-style)
        decode: Tq = 1, Tk = L (the cache length including the new token).
  conv1d (kernel k, padding 1)  FLOPs = 2·B·T_out·C_out·C_in·k + B·T_out·C_out (bias)
        bytes = e·(B·C_in·T_in + C_out·C_in·k + C_out + B·C_out·T_out)
  LayerNorm over N, M rows   FLOPs = 8·M·N     bytes = e·(2·M·N + 2·N)
  RMSNorm over N, M rows     FLOPs = 4·M·N     bytes = e·(2·M·N + N)
  pointwise: GELU 8 FLOPs/element (erf counted as 6), SiLU·up 5/element, residual add 1/element;
        bytes = e·(elements read + elements written)
  RoPE (own class): 3 FLOPs per rotated element; reads and writes the rotated q, k once plus two fp32
        table rows per position; the decoder's op also reads v and writes k, v into the KV cache
  embedding  FLOPs = 0, bytes = e·2·M·H + 8·M (ids)     argmax  FLOPs = M·V, bytes = 4·M·V (fp32 logits)

A fused kernel (GELU in the GEMM epilogue, argmax inside the lm_head kernel, ...) simply has no kernel
of that class: the class's useful work is then counted nowhere else, and its row says "fused".

Device peaks are measured, not taken from data sheets: a device-to-device copy (bytes read + written
per second) and a large matmul per dtype (bf16, fp32 with TF32 allowed, fp32 IEEE), cached per device
name in ``~/.cache/glm_asr/device_peaks.json`` ($GLM_ASR_CACHE_DIR or $XDG_CACHE_HOME/glm_asr override).
On a CPU the same measurements run on the CPU (small sizes): the report says so.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from glm_asr_course.model.config import ModelConfig
from glm_asr_course.timer import time_repeats

# Bytes per element, by dtype or by precision name (glm_asr_course/model/precision.py: bf16, tf32, fp32).
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "bf16": 2, "tf32": 4, "fp32": 4}


@dataclass
class Op:
    """One logical operation; flops and bytes are totals over its calls."""

    phase: str
    cls: str
    name: str
    flops: float
    bytes: float

    def scaled(self, times: int) -> "Op":
        return Op(self.phase, self.cls, self.name, self.flops * times, self.bytes * times)


def gemm(phase, name, M, N, K, e, *, bias=False, cls="gemm") -> Op:
    flops = 2.0 * M * N * K + (M * N if bias else 0)
    nbytes = e * (M * K + N * K + M * N + (N if bias else 0))
    return Op(phase, cls, name, flops, float(nbytes))


def causal_pairs(tq: int, tk: int) -> int:
    """Visible (query, key) pairs when query i (of the last tq positions of tk) sees keys 0 .. tk-tq+i."""
    return tq * (tk - tq) + tq * (tq + 1) // 2


def attention(phase, name, *, batch, q_heads, kv_heads, tq, tk, head_dim, e, causal) -> Op:
    pairs = causal_pairs(tq, tk) if causal else tq * tk
    flops = 4.0 * head_dim * q_heads * batch * pairs
    nbytes = e * batch * head_dim * (2 * q_heads * tq + 2 * kv_heads * tk)
    return Op(phase, "attention", name, flops, float(nbytes))


def conv1d(phase, name, *, batch, c_in, c_out, t_in, t_out, kernel, e) -> Op:
    flops = 2.0 * batch * t_out * c_out * c_in * kernel + batch * t_out * c_out
    nbytes = e * (batch * c_in * t_in + c_out * c_in * kernel + c_out + batch * c_out * t_out)
    return Op(phase, "conv", name, flops, float(nbytes))


def layernorm(phase, name, M, N, e) -> Op:
    return Op(phase, "norm", name, 8.0 * M * N, float(e * (2 * M * N + 2 * N)))


def rmsnorm(phase, name, M, N, e) -> Op:
    return Op(phase, "norm", name, 4.0 * M * N, float(e * (2 * M * N + N)))


def pointwise(phase, name, elements, e, *, flops_per_element, reads=1, writes=1) -> Op:
    return Op(phase, "pointwise", name, float(flops_per_element * elements), float(e * elements * (reads + writes)))


def embedding(phase, name, M, H, e) -> Op:
    return Op(phase, "embedding", name, 0.0, float(e * 2 * M * H + 8 * M))


def argmax(phase, name, M, V) -> Op:
    return Op(phase, "argmax", name, float(M * V), float(4 * M * V))


def encoder_frames(mel_frames: int) -> tuple[int, int]:
    """Frames after conv1 (kernel 3, padding 1, stride 1) and conv2 (stride 2): 3000 -> 3000 -> 1500."""
    t1 = (mel_frames + 2 - 3) // 1 + 1
    return t1, (t1 + 2 - 3) // 2 + 1


def encoder_ops(cfg: ModelConfig, *, windows: int, mel_frames: int, e: int) -> list[Op]:
    """conv stem, every encoder layer and the final LayerNorm for ``windows`` windows of ``mel_frames``."""
    c = cfg.encoder
    t1, t2 = encoder_frames(mel_frames)
    M, H, I = windows * t2, c.hidden_size, c.intermediate_size
    width = c.num_heads * c.head_dim
    ops = [
        conv1d("encoder", "enc.conv1", batch=windows, c_in=c.num_mel_bins, c_out=H, t_in=mel_frames, t_out=t1,
               kernel=3, e=e),
        pointwise("encoder", "enc.conv1.gelu", windows * t1 * H, e, flops_per_element=8),
        conv1d("encoder", "enc.conv2", batch=windows, c_in=H, c_out=H, t_in=t1, t_out=t2, kernel=3, e=e),
        pointwise("encoder", "enc.conv2.gelu", M * H, e, flops_per_element=8),
    ]
    layer = [
        layernorm("encoder", "enc.ln1", M, H, e),
        gemm("encoder", "enc.q", M, width, H, e, bias=True),
        gemm("encoder", "enc.k", M, width, H, e, bias=False),
        gemm("encoder", "enc.v", M, width, H, e, bias=True),
        Op("encoder", "rope", "enc.rope", 3.0 * 2 * M * c.num_heads * c.rotary_dim,
           float(e * 2 * (2 * M * c.num_heads * c.rotary_dim) + 4 * 2 * t2 * c.rotary_dim)),
        attention("encoder", "enc.attention", batch=windows, q_heads=c.num_heads, kv_heads=c.num_heads, tq=t2,
                  tk=t2, head_dim=c.head_dim, e=e, causal=False),
        gemm("encoder", "enc.o", M, H, width, e, bias=True),
        pointwise("encoder", "enc.residual", M * H, e, flops_per_element=1, reads=2),
        layernorm("encoder", "enc.ln2", M, H, e),
        gemm("encoder", "enc.fc1", M, I, H, e, bias=True),
        pointwise("encoder", "enc.gelu", M * I, e, flops_per_element=8),
        gemm("encoder", "enc.fc2", M, H, I, e, bias=True),
        pointwise("encoder", "enc.residual", M * H, e, flops_per_element=1, reads=2),
    ]
    ops += [op.scaled(c.num_layers) for op in layer]
    ops.append(layernorm("encoder", "enc.norm", M, H, e))
    return ops


def projector_ops(cfg: ModelConfig, *, windows: int, mel_frames: int, e: int) -> list[Op]:
    rows = windows * (encoder_frames(mel_frames)[1] // cfg.merge_factor)
    k1, n1, n2 = cfg.encoder.intermediate_size, cfg.projector_hidden_size, cfg.decoder.hidden_size
    return [
        gemm("projector", "proj.linear_1", rows, n1, k1, e, bias=True),
        pointwise("projector", "proj.gelu", rows * n1, e, flops_per_element=8),
        gemm("projector", "proj.linear_2", rows, n2, n1, e, bias=True),
    ]


def decoder_ops(cfg: ModelConfig, phase: str, *, batch: int, tokens: int, cache_len: int, e: int) -> list[Op]:
    """One decoder pass over ``tokens`` new positions per row whose keys end at ``cache_len`` (the prefill:
    the prompt; a decode step: one token over the cache, itself included): the embedding, every layer,
    then the final RMSNorm, lm_head and argmax of each row's last position (what greedy decoding needs)."""
    d = cfg.decoder
    M, H, I = batch * tokens, d.hidden_size, d.intermediate_size
    q_w, kv_w = d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim
    rope_elems = M * (d.num_heads + d.num_kv_heads) * d.rotary_dim
    # RoPE on q and k plus the cache write of k and v: read q, k, v once, write q and the cache rows.
    rope_bytes = e * M * (q_w + 2 * kv_w) * 2 + 4 * 2 * M * d.rotary_dim
    layer = [
        rmsnorm(phase, "dec.ln1", M, H, e),
        gemm(phase, "dec.q", M, q_w, H, e),
        gemm(phase, "dec.k", M, kv_w, H, e),
        gemm(phase, "dec.v", M, kv_w, H, e),
        Op(phase, "rope", "dec.rope+kv_write", 3.0 * rope_elems, float(rope_bytes)),
        attention(phase, "dec.attention", batch=batch, q_heads=d.num_heads, kv_heads=d.num_kv_heads, tq=tokens,
                  tk=cache_len, head_dim=d.head_dim, e=e, causal=True),
        gemm(phase, "dec.o", M, H, q_w, e),
        pointwise(phase, "dec.residual", M * H, e, flops_per_element=1, reads=2),
        rmsnorm(phase, "dec.ln2", M, H, e),
        gemm(phase, "dec.gate", M, I, H, e),
        gemm(phase, "dec.up", M, I, H, e),
        pointwise(phase, "dec.swiglu", M * I, e, flops_per_element=5, reads=2),
        gemm(phase, "dec.down", M, H, I, e),
        pointwise(phase, "dec.residual", M * H, e, flops_per_element=1, reads=2),
    ]
    return ([embedding(phase, "dec.embed", M, H, e)] + [op.scaled(d.num_layers) for op in layer]
            + [rmsnorm(phase, "dec.norm", batch, H, e),
               gemm(phase, "lm_head", batch, d.vocab_size, H, e, cls="lm_head"),
               argmax(phase, "argmax", batch, d.vocab_size)])


def transcription_ops(cfg: ModelConfig, *, windows: int, mel_frames: int, prompt_len: int, decode_steps: int,
                      dtype: str, batch: int = 1) -> list[Op]:
    """Every logical op of one transcription: encoder, projector, prefill, ``decode_steps`` decode steps.

    Decode step s (1-based) attends over prompt_len + s keys: the prompt, the s − 1 tokens written by
    earlier steps and its own.
    """
    e = ELEMENT_BYTES[dtype]
    ops = encoder_ops(cfg, windows=windows, mel_frames=mel_frames, e=e)
    ops += projector_ops(cfg, windows=windows, mel_frames=mel_frames, e=e)
    ops += decoder_ops(cfg, "prefill", batch=batch, tokens=prompt_len, cache_len=prompt_len, e=e)
    for step in range(1, decode_steps + 1):
        ops += decoder_ops(cfg, "decode", batch=batch, tokens=1, cache_len=prompt_len + step, e=e)
    return ops


def totals(ops: list[Op], *, phase: str | None = None, classes=None) -> tuple[float, float]:
    """(FLOPs, bytes) summed over ops of a phase and/or a set of classes."""
    sel = [op for op in ops if (phase is None or op.phase == phase) and (classes is None or op.cls in classes)]
    return sum(op.flops for op in sel), sum(op.bytes for op in sel)


def by_class(ops: list[Op]) -> dict[tuple[str, str], tuple[float, float]]:
    """{(phase, class): (FLOPs, bytes)}."""
    out: dict[tuple[str, str], list[float]] = {}
    for op in ops:
        acc = out.setdefault((op.phase, op.cls), [0.0, 0.0])
        acc[0] += op.flops
        acc[1] += op.bytes
    return {k: (v[0], v[1]) for k, v in out.items()}


def cache_dir() -> Path:
    if os.environ.get("GLM_ASR_CACHE_DIR"):
        return Path(os.environ["GLM_ASR_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "glm_asr"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU {cpu} ({torch.get_num_threads()} threads)"


@dataclass
class Peaks:
    device: str           # name as reported by the device
    kind: str             # "cuda" or "cpu"
    bandwidth: float      # bytes/s, device-to-device copy (read + write)
    matmul: dict          # dtype label -> FLOP/s: "bfloat16", "tf32", "float32" (IEEE)
    measured_at: str
    method: str
    source: str = "measured"  # or "cached"

    def flops_for(self, dtype: str) -> float:
        """Compute roof for a dtype or precision name: bf16 tensor cores; TF32 for fp32 activations
        ("float32", "tf32"); IEEE fp32 on the CUDA cores for precision "fp32"."""
        if dtype in ("bfloat16", "float16", "bf16"):
            return self.matmul["bfloat16"]
        if dtype == "fp32":
            return self.matmul["float32"]
        return self.matmul.get("tf32", self.matmul["float32"])

    def ridge(self, dtype: str) -> float:
        """FLOP/byte where the compute roof meets the bandwidth roof."""
        return self.flops_for(dtype) / self.bandwidth

    def describe(self) -> str:
        m = self.matmul
        tf = lambda x: f"{x / 1e12:,.1f}" if x >= 1e12 else f"{x / 1e12:.3g}"
        what = "CPU measurements, no GPU" if self.kind == "cpu" else "measured on this GPU"
        return (f"{self.device}: copy {self.bandwidth / 1e9:,.0f} GB/s; matmul bf16 {tf(m['bfloat16'])}, tf32 "
                f"{tf(m['tf32'])}, fp32 {tf(m['float32'])} TFLOP/s ({what}; {self.source})")

    def to_json(self) -> dict:
        return asdict(self)


def measure_peaks(device: str) -> Peaks:
    """Copy bandwidth and matmul FLOP/s of ``device`` ("cuda" or "cpu"), best of a few repetitions."""
    gpu = device == "cuda"

    def best_seconds(fn, reps: int) -> float:  # a peak is what the device can do: the best call, after an untimed one
        return min(time_repeats(fn, device, warmup=1, repeats=reps)) / 1000

    copy_bytes = (1 << 30) if gpu else (64 << 20)
    src = torch.ones(copy_bytes // 4, device=device)
    dst = torch.empty_like(src)
    bandwidth = 2 * copy_bytes / best_seconds(lambda: dst.copy_(src), 10 if gpu else 5)
    sizes = {"bfloat16": 8192 if gpu else 512, "tf32": 8192 if gpu else 1024, "float32": 8192 if gpu else 1024}
    precision = torch.get_float32_matmul_precision()
    matmul = {}
    try:
        for label, n in sizes.items():
            # "high" lets fp32 matmuls use TF32 tensor cores; "highest" keeps them IEEE fp32.
            torch.set_float32_matmul_precision("high" if label == "tf32" else "highest")
            a, b = (torch.randn(n, n, device=device).to(torch.bfloat16 if label == "bfloat16" else torch.float32)
                    for _ in range(2))
            matmul[label] = 2.0 * n ** 3 / best_seconds(lambda: a @ b, 5 if gpu else 3)
    finally:
        torch.set_float32_matmul_precision(precision)
    if not gpu:
        matmul["tf32"] = matmul["float32"]  # no TF32 on a CPU
    method = (f"copy of {copy_bytes >> 20} MiB fp32 (2x bytes); square matmuls n={sizes['bfloat16']} bf16, "
              f"n={sizes['float32']} fp32 (TF32 on/off); best of several runs")
    return Peaks(device_name(device), "cuda" if gpu else "cpu", bandwidth, matmul,
                 datetime.datetime.now().isoformat(timespec="seconds"), method)


def device_peaks(device: str, *, refresh: bool = False, log=print) -> Peaks:
    """Measured peaks of ``device``, from the per-device cache unless ``refresh`` or not cached yet."""
    name = device_name(device)
    path = cache_dir() / "device_peaks.json"
    try:
        cache = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        cache = {}
    if name in cache and not refresh:
        try:
            return Peaks(**cache[name] | {"source": f"cached in {path}"})
        except TypeError:  # an entry with other fields than these: measured again
            pass
    log(f"Measuring device peaks of {name} (copy bandwidth, matmul FLOP/s; cached afterwards) ...")
    peaks = measure_peaks(device)
    cache[name] = {k: v for k, v in peaks.to_json().items() if k != "source"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=2) + "\n")
        os.replace(tmp, path)
        peaks.source = f"measured now, cached in {path}"
    except OSError as err:
        peaks.source = f"measured now (cache not writable: {err.strerror})"
    return peaks


LATENCY_CALL_SECONDS = {"cuda": 20e-6, "cpu": 100e-6}
LOW_FRACTION = 0.10


ROOF_FIELDS = ("intensity", "tflops", "gbps", "pct_peak_flops", "pct_peak_bw", "pct_roof")


def assess(flops: float | None, nbytes: float | None, seconds: float, calls: int, peaks: Peaks, dtype: str) -> dict:
    """Achieved rates and a verdict for work (flops, nbytes) done in ``seconds`` over ``calls`` launches, as
    the report's columns: intensity (FLOP/byte), TFLOP/s, GB/s, % of each peak, % of the roof (the
    attainable min(peak, AI·BW) at that intensity), verdict.

    latency-bound: under 10 % of both peaks and short launches (mean under 20 µs on a GPU, 100 µs on a
    CPU): launch overhead and tail effects, not the roof, set the time. Otherwise the side of the ridge
    point (peak FLOP/s ÷ peak bandwidth) the arithmetic intensity falls on names the roof:
    memory-bound below it, compute-bound above; ", low" marks under 10 % of that roof.
    """
    short = seconds / max(calls, 1) < LATENCY_CALL_SECONDS.get(peaks.kind, 20e-6)
    if seconds <= 0 or flops is None or not nbytes:
        verdict = "-" if seconds <= 0 else "latency-bound?" if short else "n/a (no FLOP model)"
        return dict.fromkeys(ROOF_FIELDS) | {"verdict": verdict}
    peak_f, peak_b = peaks.flops_for(dtype), peaks.bandwidth
    pf, pb = flops / seconds / peak_f, nbytes / seconds / peak_b
    memory_side = flops / nbytes < peak_f / peak_b
    pct_roof = pb if memory_side else pf
    if max(pf, pb) < LOW_FRACTION and short:
        verdict = "latency-bound"
    else:
        verdict = ("memory-bound" if memory_side else "compute-bound") + (", low" if pct_roof < LOW_FRACTION else "")
    return {"intensity": flops / nbytes, "tflops": flops / seconds / 1e12, "gbps": nbytes / seconds / 1e9,
            "pct_peak_flops": 100 * pf, "pct_peak_bw": 100 * pb, "pct_roof": 100 * pct_roof, "verdict": verdict}


def floor_seconds(flops: float, nbytes: float, peaks: Peaks, dtype: str) -> float:
    """The roofline floor: the time the slower of the two roofs needs for this work."""
    return max(flops / peaks.flops_for(dtype), nbytes / peaks.bandwidth)


def transcription_floor(cfg: ModelConfig, inputs, tokens: int, dtype: str, peaks: Peaks) -> dict:
    """FLOPs, bytes and the floor time (ms) of one transcription of ``inputs`` (an ASRInputs) that makes
    ``tokens`` tokens. Its phases run one after another, each on the last one's output, so the floor
    is the sum of the phases' own floors: the compute-bound encoder's, the memory-bound prefill's and
    decode steps' (on the real model the whole transcription's FLOPs and bytes each alone give less)."""
    ops = transcription_ops(cfg, windows=inputs.input_features.shape[0], mel_frames=inputs.input_features.shape[-1],
                            prompt_len=inputs.input_ids.shape[1], decode_steps=max(tokens - 1, 0), dtype=dtype,
                            batch=inputs.batch_size)
    flops, nbytes = totals(ops)
    phases = dict.fromkeys(op.phase for op in ops)
    floor = sum(floor_seconds(*totals(ops, phase=phase), peaks, dtype) for phase in phases)
    return {"flops": flops, "bytes": nbytes, "floor_ms": floor * 1000}
