"""glm_asr_scratch's compiled path (compiled_model.py: model.py's layers in the engine's static KV cache,
CUDA graphs and greedy loop, the layers compiled) against transformers on the tiny checkpoint, IEEE fp32.

On a CPU the path compiles nothing and captures nothing (utils/gpu_check.sh runs it compiled on the GPU);
here dynamo also traces its layers with the eager backend, to show each compiles as one graph per shape.
tests/test_parity.py runs it end to end like every path (two windows, a left-padded batch, bf16).
"""

import pytest
import torch
from torch._dynamo.utils import counters

from glm_asr_course.model.audio import load_audio
from glm_asr_course.reference.hf_model import model_inputs
from glm_asr_course.tracks import open_checkpoint, track_paths
from glm_asr_scratch.compiled_model import load_model
from parity import hf_generate, hf_model, inputs_for, rel_err

pytestmark = pytest.mark.slow  # whole models end to end


@pytest.fixture(scope="module")
def batch(tiny_ckpt, clips):
    """The tiny checkpoint and a left-padded batch of two clips."""
    ckpt = open_checkpoint(str(tiny_ckpt), torch.float32)
    inputs = inputs_for(ckpt, [load_audio(clips["short"]), load_audio(clips["other"])])
    assert inputs.pad_lengths.min() == 0 < inputs.pad_lengths.max(), "the batch must pad one row"
    return ckpt, inputs


def test_the_folder_keeps_model_py_as_its_default():
    assert track_paths("glm_asr_scratch") == ["course", "compiled"]


@torch.no_grad()
def test_static_cache_holds_transformers_keys_and_values_slot_by_slot(tiny_ckpt, batch):
    """After 12 greedy tokens, every real slot of every layer's static cache (prompt and 11 decode steps)
    holds the keys and values transformers' generate cached there, and nothing is written past them:
    a cache written one slot off, or at the wrong row's padding, fails here by name."""
    ckpt, inputs = batch
    new_tokens = 12
    model = load_model(ckpt.config, ckpt.weights, "cpu", "fp32")
    ids = model.generate(inputs, new_tokens, new_tokens)
    reference = hf_model(tiny_ckpt).generate(**model_inputs(inputs), do_sample=False, max_new_tokens=new_tokens,
                                             min_new_tokens=new_tokens, return_dict_in_generate=True)

    state, written = model.state, inputs.input_ids.shape[1] + new_tokens - 1
    assert state.cache_len > written, "the cache is preallocated past what the run writes"
    for layer, hf_layer in enumerate(reference.past_key_values.layers):
        for name, ours, theirs in (("keys", state.k_cache[layer], hf_layer.keys),
                                   ("values", state.v_cache[layer], hf_layer.values)):
            assert theirs.shape[2] == written
            for row, pad in enumerate(inputs.pad_lengths):
                err = rel_err(ours[row, :, pad:written], theirs[row, :, pad:written])
                assert err <= 1e-5, f"layer {layer} {name}, row {row}: relative error {err:.2e}"
            assert not ours[:, :, written:].any(), f"layer {layer} {name}: slots past {written} written"
    assert ids == reference.sequences[:, inputs.input_ids.shape[1]:].tolist()
    assert len({t for row in ids for t in row}) > 6, "degenerate reference: the decode steps prove little"

    # The same static cache serves the next transcription, whatever the last one left in it.
    assert model.generate(inputs, new_tokens, new_tokens) == ids and model.state is state


def test_layers_trace_as_one_graph_per_shape(tiny_ckpt, batch):
    """torch.compile of the layers (dynamo, eager backend: the same tracing as on a GPU, no code generated):
    no graph breaks, and one graph each for the encoder layer, the decoder over the prompt and the decode
    step, whatever the number of layers; a second transcription compiles nothing; transformers' ids."""
    ckpt, inputs = batch
    assert ckpt.config.encoder.num_layers > 1 and ckpt.config.decoder.num_layers > 1
    torch._dynamo.reset()
    counters.clear()
    model = load_model(ckpt.config, ckpt.weights, "cpu", "fp32", compile_options={"backend": "eager"})
    expected = hf_generate(hf_model(tiny_ckpt), inputs, 6, 6, ckpt.config.eos_token_ids)
    assert model.generate(inputs, 6, 6) == expected
    assert counters["stats"]["unique_graphs"] == 3 and not counters["graph_break"], dict(counters)
    assert model.generate(inputs, 6, 6) == expected
    assert counters["stats"]["unique_graphs"] == 3
