"""transformers as a speed anchor: its own transcription timed with the one timer (measure.timer), in the
settings glm_asr_lab/gpu/fastpath.py sets the fast paths against."""

from glm_asr_course.model.precision import torch_matmul_precision
from glm_asr_course.reference.hf_model import generate
from glm_asr_course.timer import spread, time_call, time_repeats


def time_generate(model, inputs, tokens: int, eos, precision, device: str, *, warmup: int, runs: int,
                  static_cache: bool = False, compile_mode: str | None = None,
                  compile_backend: str = "inductor") -> dict:
    """transformers' own transcription of ``tokens`` tokens (eos banned until then) as a speed anchor.

    Default: its eager model with the dynamic KV cache. ``static_cache``: a StaticCache, allocated once for
    prompt + tokens (cache_implementation="static"). ``compile_mode`` (needs the static cache): generate
    also compiles the forward it calls for each token after the prefill (torch.compile through its
    CompileConfig, e.g. "reduce-overhead": CUDA graphs; "max-autotune-no-cudagraphs"), on any device, so
    a CPU test runs the same path (with ``compile_backend="eager"``, dynamo without code generation).
    The first call, which compiles and captures, is timed alone ("first_call_ms"); then ``warmup``
    untimed and ``runs`` timed calls (glm_asr_course.timer). Returns the setting in words, those
    times, their mean and standard deviation, and the first call's ids.
    """
    from transformers import CompileConfig

    if compile_mode is not None and not static_cache:
        raise ValueError("compiling transformers' decode step needs the static cache")
    options = {}
    setting = "eager, sdpa, dynamic cache"
    if static_cache:
        options["cache_implementation"] = "static"
        setting = "sdpa, static cache"
        if compile_mode is None:
            options["disable_compile"] = True
        else:
            config = CompileConfig(mode=compile_mode, backend=compile_backend)
            config._compile_all_devices = True  # transformers' switch for compiling off a GPU too
            options["compile_config"] = config
            setting += f", torch.compile(mode={compile_mode!r}, backend={compile_backend!r}) of the decode step"

    def transcribe():
        with torch_matmul_precision(precision):
            return generate(model, inputs, tokens, tokens, eos, precision.dtype, device, **options)[0]

    first_ms, ids = time_call(transcribe, device)
    times = time_repeats(transcribe, device, warmup=warmup, repeats=runs)
    return {"setting": setting, "first_call_ms": first_ms, "ids": ids} | spread(times)
