"""Probe: cuTile decode GEMV with load hints (latency=, allow_tma=) and kernel occupancy, at the model's
shapes on weights that miss L2. Variants are the production functions' source with the hints added,
written to a module of their own (the cuTile compiler reads a kernel's source)."""
import importlib.util, inspect, itertools, re, statistics, sys, tempfile
from pathlib import Path
import torch
from glm_asr_cutile_example import fast_linear as fl
from glm_asr_course.runtimes.cutile import launch
from glm_asr_course.timer import time_repeats

COPIES = 20
SRC = "\n\n".join(inspect.getsource(f) for f in (fl.gemv_input, fl.inverse_rms, fl.gemv_rows))
KSRC = inspect.getsource(fl.gemv_kernel.__dict__.get("_pyfunc", None) or fl.gemv_kernel._pyfunc)

def variant(latency, tma, occupancy):
    hint = (f", latency={latency}" if latency else "") + ("" if tma is None else f", allow_tma={tma}")
    src = SRC.replace("padding_mode=ZERO)", f"padding_mode=ZERO{hint})")
    ksrc = KSRC.replace("@ct.kernel", f"@ct.kernel(occupancy={occupancy})" if occupancy else "@ct.kernel")
    text = "from glm_asr_cutile_example.fast_linear import *\nfrom glm_asr_cutile_example.fast_linear import ct, ZERO, RMSNORM, round_as, swiglu, linear_epilogue\n\n" + src + "\n\n" + ksrc
    path = Path(tempfile.mkdtemp()) / f"gemv_v_{latency}_{tma}_{occupancy}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod.gemv_kernel

def timed(fn):
    def body():
        for _ in range(COPIES):
            fn()
    return statistics.median(time_repeats(body, "cuda", warmup=1, repeats=10, graph=True)) * 1e3 / COPIES

def main():
    dt = torch.bfloat16
    H, F, QKV = 2048, 6144, 3072
    rand = lambda *s, scale=1.0: (torch.randn(*s, device="cuda") * scale).to(dt)
    norm_w = rand(H)
    problems = (("q|k|v", QKV, H, True, False, False, (32, 256)), ("o", H, H, False, False, True, (16, 256)),
                ("gate|up", 2 * F, H, True, True, False, (16, 256)), ("down", H, F, False, False, True, (16, 256)))
    variants = [(None, None, None)] + [(l, None, None) for l in (1, 4, 7, 10)] + [(None, False, None)] + \
               [(None, None, o) for o in (1, 2, 4)] + [(10, False, None), (10, None, 2)]
    kernels = {}
    for v in variants:
        try:
            kernels[v] = variant(*v)
        except Exception as e:
            print("variant", v, "failed:", type(e).__name__, str(e)[:200]); sys.stdout.flush()
    print(torch.cuda.get_device_name())
    for name, N, K, rms, gated, acc, (bn, bk) in problems:
        ws = [rand(N, K, scale=K ** -0.5) for _ in range(COPIES)]
        x = rand(1, K); n_out = N // 2 if gated else N
        out = torch.zeros(1, n_out, device="cuda", dtype=dt)
        turn = itertools.count()
        ref = None
        for v, kern in kernels.items():
            def fn(kern=kern):
                w = ws[next(turn) % COPIES]
                launch((-(-n_out // bn), 1), kern, x, w, w[0], norm_w if rms else w[0], out, 1e-5,
                       fl.RMSNORM if rms else fl.AS_STORED, False, False, False, gated, bn, bk, pdl=True)
            try:
                out.zero_(); turn = itertools.count(); fn(); torch.cuda.synchronize()
                got = out.clone()
                if ref is None: ref = got
                same = torch.equal(got, ref)
                us = timed(fn)
                print(f"{name:8s} {N}x{K} tiles ({bn},{bk}) latency={v[0]} allow_tma={v[1]} occupancy={v[2]}: {us:6.2f} us  {N*K*2/us/1e3:7.1f} GB/s  same output as default: {same}")
            except Exception as e:
                print(f"{name} {v} failed: {type(e).__name__}: {str(e)[:200]}")
            sys.stdout.flush()

if __name__ == "__main__":
    main()
