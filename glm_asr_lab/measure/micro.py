"""Micro-benchmarks of benchmark_detailed.py --attention-only / --linear-only: the attention and linear
launches of the real model's shapes (or a checkpoint's), each timed in torch and through every folder's
public launcher of it (glm_asr_course.timer.time_launches: on a GPU an L2 flush before each call,
each call a CUDA-graph replay where it can be captured), checked against torch on the same inputs, with
the roofline floor of its FLOPs and bytes.
"""

import functools
import importlib
import inspect
import os

import torch
import torch.nn.functional as F

from glm_asr_course.errors import UserError
from glm_asr_course.model import course_model
from glm_asr_course.model.audio import load_audio
from glm_asr_course.model.checkpoint import read_config, resolve_model_dir
from glm_asr_course.model.config import ModelConfig
from glm_asr_course.model.frontend import SYNTHETIC_PREFIX_LEN, SYNTHETIC_SUFFIX_LEN, audio_tokens_of
from glm_asr_course.model.precision import get_precision
from glm_asr_course.reference.hf_model import raw_config
from glm_asr_lab.measure import roofline
from glm_asr_course.timer import quartiles, time_launches


def model_config(model: str, random_weights: bool):
    """The sizes the micro-benchmarks take: --model's config.json, or --random-weights' defaults."""
    if random_weights:
        return ModelConfig.from_dict(raw_config(model, random_weights))
    return read_config(resolve_model_dir(model, need_weights=False))


def default_seq_len(audio: str, cfg) -> int:
    """The prompt length ``audio`` gives: 3 text ids + one per audio token + 12 text ids."""
    tokens = int(audio_tokens_of(len(load_audio(audio)), cfg).sum())
    return tokens + SYNTHETIC_PREFIX_LEN + SYNTHETIC_SUFFIX_LEN


def bench_us(fn, device: str, runs: int) -> tuple[float, float, float, str]:
    """(q1, median, q3) µs of ``fn`` after 3 untimed calls, and how it was timed: on a GPU each call follows
    an L2 flush and is replayed from a CUDA graph ("graph") where it can be captured, else launched
    ("eager"; timer.time_launches)."""
    times, timing = time_launches(fn, device, warmup=3, repeats=runs)
    return (*(ms * 1000 for ms in quartiles(times)), timing)


# The launchers the micro-benchmarks time, by module: a fast path's fused kernels and the course path's.
MICRO_LAUNCHERS = (("fast_attention", ("flash_attention", "decode_attention")),
                   ("fast_linear", ("linear", "swiglu_linear")),
                   ("layers", ("linear_tf32",)))


def folder_launchers(folder: str) -> dict:
    """The folder's kernel launchers that the micro-benchmarks know, where it has them; a folder that
    runs the course model also gets its attention, composed of the folder's three kernels."""
    found = {}
    for module, names in MICRO_LAUNCHERS:
        try:
            mod = importlib.import_module(f"{folder}.{module}")
        except ImportError:
            continue
        for name in names:
            if callable(getattr(mod, name, None)):
                found[name] = getattr(mod, name)
    try:
        ops = course_model.track_ops(folder)
    except (ImportError, UserError):  # not a course-model folder (the PyTorch track)
        return found
    found["encoder_attention"] = functools.partial(course_model.encoder_attention, ops)
    found["decoder_attention"] = functools.partial(course_model.decoder_attention, ops)
    return found


def _bthd_to_bhtd(out):
    return out.transpose(1, 2)


def _writes_into_out(launcher) -> bool:
    """Whether a fast path's attention launcher writes into an ``out`` it must be given, with q, k, v and out
    (B, H, T, D) (the cuTile track's convention), rather than returning its output (the Triton track's)."""
    out = inspect.signature(launcher).parameters.get("out")
    return out is not None and out.default is inspect.Parameter.empty


def max_rel_error(out, ref) -> float:
    """max |out - ref| / max |ref| (the folder's kernel against torch at the same shape)."""
    ref = ref.float()
    return float((out.float().reshape(ref.shape) - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def attention_cases(cfg, seq_len: int, max_new_tokens: int, precision: str, device, dtype):
    """(name, shape text, logical Op, torch fn, {launcher: fn builder}, output → torch layout); the
    decoder's KV cache long enough for ``max_new_tokens`` after the prompt."""
    e = roofline.ELEMENT_BYTES[precision]
    dot = get_precision(precision).dot
    enc, dec = cfg.encoder, cfg.decoder
    gen = torch.Generator(device=device).manual_seed(0)
    rnd = lambda *shape: torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
    cases = []
    t = enc.max_positions
    q, k, v = (rnd(1, t, enc.num_heads, enc.head_dim) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    enc_out = torch.empty_like(q)  # token-major, as the course model's o_proj reads it
    scale = enc.head_dim ** -0.5

    def encoder_builder(f):
        if _writes_into_out(f):  # (B, H, T, D) views in and out; the output seen token-major again
            return lambda: f(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, enc_out.transpose(1, 2),
                             causal=False, precision=dot).transpose(1, 2)
        return lambda: f(q, k, v, scale, causal=False, precision=dot)

    cases.append(("encoder self-attention", f"T={t} H={enc.num_heads} D={enc.head_dim} non-causal",
                  roofline.attention("encoder", "enc.attention", batch=1, q_heads=enc.num_heads, kv_heads=enc.num_heads,
                                     tq=t, tk=t, head_dim=enc.head_dim, e=e, causal=False),
                  lambda: F.scaled_dot_product_attention(qt, kt, vt),
                  {"flash_attention": encoder_builder,
                   "encoder_attention": lambda f: (lambda: f(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                             scale, enc_out.transpose(1, 2), precision=dot)
                                                   .transpose(1, 2))},
                  _bthd_to_bhtd))
    cache_len = -(-(seq_len + max_new_tokens) // 256) * 256
    d_scale = dec.head_dim ** -0.5
    kc = rnd(1, dec.num_kv_heads, cache_len, dec.head_dim)
    vc = rnd(1, dec.num_kv_heads, cache_len, dec.head_dim)
    qp = rnd(1, seq_len, dec.num_heads, dec.head_dim)
    qpt = qp.transpose(1, 2).contiguous()
    kv_start = torch.zeros(1, dtype=torch.int32, device=device)
    prefill_out = torch.empty_like(qpt)

    def prefill_builder(f):
        if _writes_into_out(f):
            return lambda: f(qp.transpose(1, 2), kc[:, :, :seq_len], vc[:, :, :seq_len], d_scale, prefill_out,
                             causal=True, precision=dot, kv_start=kv_start).transpose(1, 2)
        return lambda: f(qp, kc, vc, d_scale, causal=True, precision=dot, kv_start=kv_start, kv_layout="bhtd")

    prefill_counters = torch.tensor([0, seq_len], dtype=torch.int32, device=device)
    decode_counters = torch.tensor([seq_len - 1, seq_len], dtype=torch.int32, device=device)

    def course_builder(q_bhtd, counters, causal, n_keys):
        # Its (B, H, T, D) output seen token-major (a free view), like the fast kernels' outputs.
        return lambda f: (lambda: f(q_bhtd, kc, vc, d_scale, causal=causal, n_keys=n_keys, kv_start=kv_start,
                                    cache_pos=counters[:1], valid_len=counters[1:], precision=dot).transpose(1, 2))

    cases.append(("decoder prefill attention", f"T={seq_len} Hq={dec.num_heads} Hkv={dec.num_kv_heads} "
                  f"D={dec.head_dim} causal",
                  roofline.attention("prefill", "dec.attention", batch=1, q_heads=dec.num_heads,
                                     kv_heads=dec.num_kv_heads, tq=seq_len, tk=seq_len, head_dim=dec.head_dim, e=e,
                                     causal=True),
                  lambda: F.scaled_dot_product_attention(qpt, kc[:, :, :seq_len], vc[:, :, :seq_len], is_causal=True,
                                                         enable_gqa=True),
                  {"flash_attention": prefill_builder,
                   "decoder_attention": course_builder(qpt, prefill_counters, True, seq_len)}, _bthd_to_bhtd))
    qd = rnd(1, 1, dec.num_heads, dec.head_dim)
    qdt = qd.transpose(1, 2).contiguous()
    valid = torch.tensor([seq_len], dtype=torch.int32, device=device)
    decode_out = torch.empty(1, dec.num_heads, dec.head_dim, device=device, dtype=dtype)

    def decode_builder(f):
        if _writes_into_out(f):  # q and out (B, H, D): one token, no time axis
            return lambda: f(qd[:, 0], kc, vc, valid, kv_start, d_scale, decode_out, precision=dot)[:, None]
        return lambda: f(qd, kc, vc, valid, kv_start, d_scale, precision=dot)

    cases.append(("decode attention (1 token)", f"KV={seq_len} (cache {cache_len}) Hq={dec.num_heads} "
                  f"Hkv={dec.num_kv_heads} D={dec.head_dim}",
                  roofline.attention("decode", "dec.attention", batch=1, q_heads=dec.num_heads,
                                     kv_heads=dec.num_kv_heads, tq=1, tk=seq_len, head_dim=dec.head_dim, e=e,
                                     causal=True),
                  lambda: F.scaled_dot_product_attention(qdt, kc[:, :, :seq_len], vc[:, :, :seq_len], enable_gqa=True),
                  {"decode_attention": decode_builder,
                   "decoder_attention": course_builder(qdt, decode_counters, False, cache_len)}, _bthd_to_bhtd))
    return cases


def linear_cases(cfg, seq_len: int, max_new_tokens: int, precision: str, device, dtype):
    e = roofline.ELEMENT_BYTES[precision]
    dot = get_precision(precision).dot
    enc, dec = cfg.encoder, cfg.decoder
    gen = torch.Generator(device=device).manual_seed(0)
    rnd = lambda *shape, s=1.0: (torch.randn(*shape, generator=gen, device=device) * s).to(dtype)
    frames = enc.max_positions
    rows = frames // cfg.merge_factor
    width = enc.num_heads * enc.head_dim
    q_w, kv_w = dec.num_heads * dec.head_dim, dec.num_kv_heads * dec.head_dim
    specs = [  # name, M, N, K, bias, activation (None / "gelu" / "swiglu")
        ("encoder qkv", frames, 3 * width, enc.hidden_size, True, None),
        ("encoder o", frames, enc.hidden_size, width, True, None),
        ("encoder fc1 +gelu", frames, enc.intermediate_size, enc.hidden_size, True, "gelu"),
        ("encoder fc2", frames, enc.hidden_size, enc.intermediate_size, True, None),
        ("projector 1 +gelu", rows, cfg.projector_hidden_size, enc.intermediate_size, True, "gelu"),
        ("projector 2", rows, dec.hidden_size, cfg.projector_hidden_size, True, None),
    ]
    for m, tag in ((seq_len, "prefill"), (1, "decode")):
        specs += [
            (f"{tag} qkv", m, q_w + 2 * kv_w, dec.hidden_size, False, None),
            (f"{tag} o", m, dec.hidden_size, q_w, False, None),
            (f"{tag} gate_up +swiglu", m, dec.intermediate_size, dec.hidden_size, False, "swiglu"),
            (f"{tag} down", m, dec.hidden_size, dec.intermediate_size, False, None),
        ]
    specs.append(("lm_head (decode)", 1, dec.vocab_size, dec.hidden_size, False, None))
    cases = []
    for name, M, N, K, bias, act in specs:
        x = rnd(M, K)
        w = rnd(2 * N if act == "swiglu" else N, K, s=K ** -0.5)
        b = rnd(N, s=0.1) if bias else None
        phase = name.split()[0]
        op = roofline.gemm(phase, name, M, 2 * N if act == "swiglu" else N, K, e, bias=bias)
        if act == "swiglu":
            def torch_fn(x=x, w=w, N=N):
                y = F.linear(x, w)
                return F.silu(y[:, :N]) * y[:, N:]
            builders = {"swiglu_linear": lambda f, x=x, w=w: (lambda: f(x, w, precision=dot))}
        else:
            def torch_fn(x=x, w=w, b=b, act=act):
                y = F.linear(x, w, b)
                return F.gelu(y) if act == "gelu" else y
            builders = {"linear": lambda f, x=x, w=w, b=b, act=act: (lambda: f(x, w, b, gelu=act == "gelu",
                                                                                  precision=dot))}
            if act is None:  # the course kernel has no fused epilogue: it times the plain products
                builders["linear_tf32"] = lambda f, x=x, w=w, b=b: (lambda: f(x, w, b, precision=dot))
        shape = f"M={M} N={2 * N if act == 'swiglu' else N} K={K}" + (" +bias" if bias else "")
        cases.append((name, shape, op, torch_fn, builders, lambda out: out))
    return cases


# The micro-benchmarks' kinds: --attention-only and --linear-only.
MICRO_CASES = {"attention": attention_cases, "linear": linear_cases}


def run_micro(options, kinds: list[str], seq_len: int | None, folders: list[str], peaks, device: str) -> dict:
    """Every case of ``kinds`` (of MICRO_CASES): torch and each folder's launcher, timed and checked, at the
    sizes of ``options``' model (a RunOptions of glm_asr_course.command_line, settled) and its
    precision, runs and token limit; ``seq_len``: the prompt length (None: the audio's)."""
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    precision = options.precision
    dtype = get_precision(precision).dtype
    cfg = model_config(options.model, options.random_weights)
    seq_len = seq_len or default_seq_len(options.audio, cfg)
    impls = [(f, folder_launchers(f)) for f in folders]
    runs = max(options.runs, 20) if device == "cuda" else options.runs
    sections = []
    for kind in kinds:
        rows = []
        for name, shape, op, torch_fn, builders, to_torch in MICRO_CASES[kind](cfg, seq_len, options.max_new_tokens,
                                                                               precision, device, dtype):
            tq1, tmed, tq3, torch_timing = bench_us(torch_fn, device, runs)
            reference = torch_fn()
            floor = roofline.floor_seconds(op.flops, op.bytes, peaks, precision) * 1e6
            row = {"op": name, "shape": shape, "flops": op.flops, "bytes": op.bytes, "floor_us": floor,
                   "torch_us": tmed, "torch_iqr_us": [tq1, tq3], "torch_timing": torch_timing, "impls": []}
            for folder, launchers in impls:
                launcher = next((n for n in builders if n in launchers), None)
                entry = {"folder": folder, "launcher": launcher, "us": None, "iqr_us": None, "timing": None,
                         "note": "", "max_rel_error": None}
                if launcher is None:  # no public launcher of it: torch itself is the folder's kernel
                    entry.update(us=tmed, iqr_us=[tq1, tq3], timing=torch_timing, note="torch", max_rel_error=0.0)
                else:
                    try:
                        fn = builders[launcher](launchers[launcher])
                        entry["max_rel_error"] = max_rel_error(to_torch(fn()), reference)
                        q1, entry["us"], q3, entry["timing"] = bench_us(fn, device, runs)
                        entry["iqr_us"] = [q1, q3]
                    except NotImplementedError:
                        entry["note"] = "not implemented"
                    except Exception as exc:  # a student kernel failing at this shape: report, go on
                        entry["note"] = f"failed: {type(exc).__name__}: {(str(exc) or ' ').splitlines()[0][:80]}"
                if entry["us"]:
                    roof = roofline.assess(op.flops, op.bytes, entry["us"] / 1e6, 1, peaks, precision)
                    entry.update({key: roof[key] for key in ("tflops", "gbps", "pct_roof", "verdict")},
                                 speedup_vs_torch=tmed / entry["us"])
                row["impls"].append(entry)
            rows.append(row)
        sections.append({"kind": kind, "rows": rows})
    return {"mode": "micro", "folders": folders, "device": device, "precision": precision, "seq_len": seq_len,
            "runs": runs, "peaks": peaks.to_json(), "sections": sections}
