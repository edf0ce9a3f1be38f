"""transformers' GlmAsrForConditionalGeneration: the reference every tool, test and report judges and times
the tracks against. Built on a track's canonical weights or read from a checkpoint, fed a track's
inputs, run greedily with the same stopping rules as the tracks (cut after the first eos). The lab scores runs
against it teacher-forced (glm_asr_lab/gpu/regret.py).
"""

import torch

from glm_asr_course.model.precision import torch_matmul_precision


def raw_config(model: str, random_weights: bool) -> dict:
    """config.json of ``model`` (--model; with --random-weights and no such directory, transformers' defaults)."""
    from glm_asr_course.model.checkpoint import default_config_dict, local_model_dir, read_raw_config, resolve_model_dir

    if random_weights:
        local = local_model_dir(model)
        if local is not None and (local / "config.json").is_file():
            return read_raw_config(local)
        return default_config_dict()
    return read_raw_config(resolve_model_dir(model, need_weights=False))


def build(raw: dict, weights: dict, dtype: torch.dtype, device: str):
    """transformers' model (sdpa attention) of config.json ``raw`` holding ``weights`` (canonical names)."""
    from transformers import GlmAsrConfig, GlmAsrForConditionalGeneration

    from glm_asr_course.model.checkpoint import transformers_name

    config = GlmAsrConfig(**raw)
    config._attn_implementation = "sdpa"
    with torch.device(device):  # rotary buffers need real memory; the random init is then replaced
        model = GlmAsrForConditionalGeneration(config).to(dtype)
    model.load_state_dict({transformers_name(k): v.to(dtype) for k, v in weights.items()}, assign=True, strict=True)
    model.tie_weights()
    return model.to(device, dtype).eval()


def from_checkpoint(model_dir, dtype: torch.dtype = torch.float32):
    """transformers' own loading of a checkpoint directory: the reference for the tracks' loader too."""
    from transformers import GlmAsrForConditionalGeneration

    return GlmAsrForConditionalGeneration.from_pretrained(str(model_dir), dtype=dtype).eval()


def model_inputs(inputs, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """A track's ASRInputs as the keyword arguments of transformers' forward and generate."""
    return dict(input_ids=torch.from_numpy(inputs.input_ids).to(device),
                attention_mask=torch.from_numpy(inputs.attention_mask).to(device),
                input_features=torch.from_numpy(inputs.input_features).to(device, dtype),
                input_features_mask=torch.from_numpy(inputs.input_features_mask).to(device))


def cut_at_eos(ids, eos) -> list[int]:
    """The ids up to and including the first eos: what a track's generate returns for a row."""
    out = []
    for token in ids:
        out.append(int(token))
        if int(token) in eos:
            break
    return out


@torch.inference_mode()
def generate(model, inputs, max_new_tokens: int, min_new_tokens: int, eos, dtype: torch.dtype = torch.float32,
             device: str = "cpu", **options) -> list[list[int]]:
    """Greedy ids of every row, each cut after its first eos. ``eos`` empty: the checkpoint's own.
    ``options``: more of transformers' generation settings (the cache, compilation)."""
    stop = {"eos_token_id": list(eos), "pad_token_id": list(eos)[0]} if eos else {}
    out = model.generate(**model_inputs(inputs, dtype, device), do_sample=False, max_new_tokens=max_new_tokens,
                         min_new_tokens=min_new_tokens, **stop, **options)
    return [cut_at_eos(row, set(eos)) for row in out[:, inputs.input_ids.shape[1]:].tolist()]


class HFTrack:
    """transformers' model with the same canonical weights, its modules marked with the same regions.

    Forward hooks open and close glm_asr_course.model.regions.region around the audio tower (encoder,
    conv1/conv2, layers, norm), the projector, the embedding, the decoder layers, the final norm and
    lm_head; the first forward call of a generate() is decoder.prefill, later ones decoder.step.
    Logits processing and the greedy pick run in transformers' generate loop: outside every region.
    """

    def __init__(self, raw: dict, weights: dict, cfg, device: str, precision):
        from glm_asr_course.model.regions import region

        self.hf = build(raw, weights, precision.dtype, device)
        self.cfg, self.device, self.precision = cfg, device, precision
        self._open, self._calls = [], 0

        def push(name):
            cm = region(name)
            cm.__enter__()
            self._open.append(cm)

        def pop(*_):
            if self._open:
                self._open.pop().__exit__(None, None, None)

        tower, lm = self.hf.model.audio_tower, self.hf.model.language_model
        marks = [(tower, "encoder"), (tower.conv1, "encoder.conv"), (tower.conv2, "encoder.conv"),
                 (tower.norm, "encoder.norm"), (self.hf.model.multi_modal_projector, "projector"),
                 (lm.embed_tokens, "decoder.embed"), (lm.norm, "decoder.head"), (self.hf.lm_head, "decoder.head")]
        marks += [(layer, "encoder.layer") for layer in tower.layers]
        marks += [(layer, "decoder.layer") for layer in lm.layers]
        for module, name in marks:
            module.register_forward_pre_hook(lambda m, a, n=name: push(n))
            module.register_forward_hook(pop)

        def top(m, a):
            push("decoder.prefill" if self._calls == 0 else "decoder.step")
            self._calls += 1

        self.hf.register_forward_pre_hook(top)
        self.hf.register_forward_hook(pop)

    def generate(self, inputs, max_new_tokens: int, min_new_tokens: int = 0) -> list[list[int]]:
        self._calls = 0
        with torch_matmul_precision(self.precision):
            return generate(self.hf, inputs, max_new_tokens, min_new_tokens, self.cfg.eos_token_ids,
                            self.precision.dtype, self.device)
