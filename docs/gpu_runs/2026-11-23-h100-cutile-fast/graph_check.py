"""Do decode CUDA graphs capture cuTile launches in glm_asr_common.engine? The cuTile fast path on
full-size random weights, the test clip, 13 tokens: with the engine's graphs (prompt phase and decode
step captured, then replayed) and without; same ids, and the time per decode step of each."""
import sys
import time
from pathlib import Path

import torch

from glm_asr_common.audio import load_audio  # noqa: E402
from glm_asr_common.frontend import prepare_inputs  # noqa: E402
from glm_asr_common.runtime import import_track, open_checkpoint  # noqa: E402

precision = sys.argv[1] if len(sys.argv) > 1 else "bf16"
ckpt = open_checkpoint("zai-org/GLM-ASR-Nano-2512", torch.bfloat16 if precision == "bf16" else torch.float32,
                       random_weights=True, device="cuda")
model = import_track("glm_asr_cutile_example", "fast", "cuda").load_model(ckpt.config, ckpt.weights, "cuda", precision)
inputs = prepare_inputs([load_audio("test_audio.wav")], ckpt.config, ckpt.processor)


def run(graphs: bool, steps=13, reps=5):
    model.use_cuda_graph = graphs
    ids = model.generate(inputs, steps, steps)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        ids = model.generate(inputs, steps, steps)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return ids, sorted(times)[len(times) // 2] * 1e3


with_graphs, ms_graphs = run(True)
state = model.state
print(f"graphs on: decode graph captured: {state.graph is not None}, prompt graphs: {len(state.prompt_graphs)}, "
      f"{ms_graphs:.2f} ms per transcription (13 tokens)")
without, ms_eager = run(False)
print(f"graphs off: {ms_eager:.2f} ms per transcription")
print(f"same ids with and without graphs: {with_graphs == without} ({len(set(with_graphs[0]))} distinct of {len(with_graphs[0])})")
