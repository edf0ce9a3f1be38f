"""The kernels of a profiled transcription as operator rows: each kernel's class (from the torch op that
launched it, its name, its region), grouped per (phase, class, name) and per (phase, class), with the
FLOPs and bytes of the logical operations (glm_asr_lab.measure.roofline) and a roofline verdict.
"""

import re

from glm_asr_lab.measure import roofline
from glm_asr_lab.measure.components import component_of

# Operator classes, in report order. "copy" is host<->device transfers and memsets; "other" unknown.
CLASSES = ("conv", "gemm", "attention", "norm", "rope", "pointwise", "embedding", "lm_head", "argmax", "copy", "other")
PHASES = ("encoder", "projector", "prefill", "decode", "outside")

_TORCH_OP_CLASSES = [
    (r"scaled_dot_product|flash_attention|efficient_attention|_attention", "attention"),
    (r"conv1d|convolution|conv2d", "conv"),
    (r"aten::(linear|addmm|mm|matmul|bmm|baddbmm)$", "gemm"),
    (r"layer_norm|rms_norm|aten::(mean|pow|rsqrt|var|var_mean)$", "norm"),
    (r"aten::(embedding|index_select|index|index_put_|_index_put_impl_|masked_scatter_?)$", "embedding"),
    (r"aten::(argmax|max|topk)$", "argmax"),
]

# Checked in order on the lower-cased kernel name.
_KERNEL_CLASSES = [
    (r"memcpy|memset", "copy"),
    (r"lm_head|greedy_head", "lm_head"),
    (r"attn|attention|flash|fmha|sdpa", "attention"),
    (r"conv|fprop|implicit_gemm", "conv"),
    (r"argmax|arg_max|topk", "argmax"),
    (r"gemm|gemv|linear|matmul|cutlass|xmma|cublas|splitk|wgmma|_mm_|sm\d+_|ampere_|hopper", "gemm"),
    (r"norm", "norm"),
    (r"rope|rotary", "rope"),
    (r"embed|index_select|indexselect|gather|index_put|scatter", "embedding"),
    (r"elementwise|vectorized|gelu|silu|swiglu|act|add|mul|cat|fill|copy|where|pow|rsqrt|reduce|"
     r"softmax|neg|exp|cast|aten::", "pointwise"),
]

# Helper launches whose work is part of another kernel's logical op (split-K sums, partial combines).
_AUX = r"epilogue|combine|argmax_reduce|splitkreduce|splitk_reduce"


def torch_op_class(op_name: str) -> str | None:
    return next((cls for pattern, cls in _TORCH_OP_CLASSES if re.search(pattern, op_name)), None)


def kernel_class(kernel_name: str) -> str:
    name = kernel_name.lower()
    return next((cls for pattern, cls in _KERNEL_CLASSES if re.search(pattern, name)), "other")


def is_aux_kernel(kernel_name: str) -> bool:
    return re.search(_AUX, kernel_name.lower()) is not None


def classify(kernel, chain) -> tuple[str, str, str]:
    """(phase, part, class) of one kernel record: torch op ancestry first, then the kernel's name, then
    its region (a GEMM in a head region is the lm_head)."""
    phase, part = ("outside", "") if kernel.region < 0 else component_of(chain)
    if kernel.name.startswith("(host"):
        return phase, part, "host"
    cls = torch_op_class(kernel.torch_op) if kernel.torch_op else None
    if cls is None or cls == "gemm" and kernel_class(kernel.name) == "copy":
        cls = kernel_class(kernel.name)
    return phase, part, "lm_head" if cls == "gemm" and part == "head" else cls


def operator_tables(profile, ops: list, peaks, dtype: str) -> tuple[list[dict], list[dict]]:
    """Per-operator rows (phase, class, kernel name) and per-class rows (phase, class).

    A class's FLOPs and bytes are its logical work (roofline.transcription_ops), the measure of every
    track alike; its kernels share them in proportion to their time ("model" for a class of one kernel,
    "model~" where shared). Helper launches (split-K sums, partial combines) do part of another kernel's
    work and get none ("-").
    """
    chains, groups = {}, {}
    for k in profile.kernels:
        if k.region not in chains:
            chains[k.region] = profile.regions.chain(k.region) if k.region >= 0 else []
        phase, _, cls = classify(k, chains[k.region])
        g = groups.setdefault((phase, cls, k.name), {"phase": phase, "class": cls, "kernel": k.name, "calls": 0,
                                                     "ms": 0.0, "aux": is_aux_kernel(k.name), "seen": set()})
        if k.call is None or k.call not in g["seen"]:  # a CPU op's self times split over inner ops: one call
            g["calls"] += 1
            g["seen"].add(k.call)
        g["ms"] += k.ms
    logical = roofline.by_class(ops)
    total_ms = sum(g["ms"] for g in groups.values()) or 1.0
    by_class: dict[tuple, list] = {}
    for g in groups.values():
        by_class.setdefault((g["phase"], g["class"]), []).append(g)
    for key, rows in by_class.items():
        working = [g for g in rows if not g["aux"]] if key in logical else []
        working_ms = sum(g["ms"] for g in working) or 1.0
        for g in rows:
            g.update(flops=None, bytes=None, source="-")
        for g in working:
            share = g["ms"] / working_ms
            g.update(flops=logical[key][0] * share, bytes=logical[key][1] * share,
                     source="model" if len(working) == 1 else "model~")

    def verdicts(flops, nbytes, ms, calls, cls) -> dict:
        fields = roofline.assess(flops, nbytes, ms / 1000, calls, peaks, dtype)
        return fields | ({"verdict": "host (Python)"} if cls == "host" else {})

    operators = [{"phase": g["phase"], "class": g["class"], "kernel": g["kernel"], "calls": g["calls"],
                  "total_ms": g["ms"], "pct": 100 * g["ms"] / total_ms, "mean_us": 1000 * g["ms"] / g["calls"],
                  "flops": g["flops"], "bytes": g["bytes"], "source": g["source"], "aux": g["aux"]}
                 | verdicts(g["flops"], g["bytes"], g["ms"], g["calls"], g["class"])
                 for g in sorted(groups.values(), key=lambda g: -g["ms"])]
    phase_order = {p: i for i, p in enumerate(PHASES)}
    class_order = {c: i for i, c in enumerate(CLASSES + ("host",))}
    classes = []
    for key in sorted(set(by_class) | set(logical),
                      key=lambda k: (phase_order.get(k[0], 99), class_order.get(k[1], 99))):
        rows = by_class.get(key, [])
        ms, calls = sum(g["ms"] for g in rows), sum(g["calls"] for g in rows)
        model_flops, model_bytes = logical.get(key, (None, None))
        flops, nbytes = (model_flops, model_bytes) if not rows or any(g["flops"] is not None for g in rows) \
            else (None, None)
        classes.append({"phase": key[0], "class": key[1], "kernels": len(rows), "calls": calls, "total_ms": ms,
                        "pct": 100 * ms / total_ms, "flops": flops, "bytes": nbytes, "model_flops": model_flops,
                        "model_bytes": model_bytes}
                       | (verdicts(flops, nbytes, ms, calls, key[1]) if rows else
                          dict.fromkeys(roofline.ROOF_FIELDS) | {"verdict": "no kernel (fused/decomposed)"}))
    return operators, classes
