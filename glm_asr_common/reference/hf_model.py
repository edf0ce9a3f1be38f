"""transformers' GlmAsrForConditionalGeneration on a track's canonical weights: the reference every
report times and compares against (benchmark_detailed.py --baseline hf, benchmark.sh --compare)."""

import torch

from ..model.precision import torch_matmul_precision


def raw_config(args) -> dict:
    """config.json of --model (or transformers' defaults for --random-weights without one)."""
    from glm_asr_common.model.checkpoint import default_config_dict, local_model_dir, read_raw_config, resolve_model_dir

    if args.random_weights:
        local = local_model_dir(args.model)
        if local is not None and (local / "config.json").is_file():
            return read_raw_config(local)
        return default_config_dict()
    return read_raw_config(resolve_model_dir(args.model, need_weights=False))


class HFTrack:
    """transformers' model with the same canonical weights, its modules marked with the same regions.

    Forward hooks open and close glm_asr_common.model.regions.region around the audio tower (encoder,
    conv1/conv2, layers, norm), the projector, the embedding, the decoder layers, the final norm and
    lm_head; the first forward call of a generate() is decoder.prefill, later ones decoder.step.
    Logits processing and the greedy pick run in transformers' generate loop: outside every region.
    """

    def __init__(self, raw: dict, weights: dict, cfg, device: str, precision):
        from transformers import GlmAsrConfig, GlmAsrForConditionalGeneration

        from glm_asr_common.model.checkpoint import transformers_name
        from glm_asr_common.model.regions import region

        config = GlmAsrConfig(**raw)
        config._attn_implementation = "sdpa"
        dtype = precision.dtype
        with torch.device(device):  # rotary buffers need real memory; the random init is replaced below
            model = GlmAsrForConditionalGeneration(config).to(dtype)
        model.load_state_dict({transformers_name(k): v for k, v in weights.items()}, assign=True, strict=True)
        model.tie_weights()
        self.hf = model.to(device, dtype).eval()
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

    @torch.inference_mode()
    def generate(self, inputs, max_new_tokens: int, min_new_tokens: int = 0) -> list[list[int]]:
        d = self.device
        self._calls = 0
        eos = list(self.cfg.eos_token_ids)
        with torch_matmul_precision(self.precision):
            out = self.hf.generate(
                input_ids=torch.from_numpy(inputs.input_ids).to(d),
                attention_mask=torch.from_numpy(inputs.attention_mask).to(d),
                input_features=torch.from_numpy(inputs.input_features).to(d, self.precision.dtype),
                input_features_mask=torch.from_numpy(inputs.input_features_mask).to(d),
                do_sample=False, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                eos_token_id=eos, pad_token_id=eos[0])
        rows = []
        for row in out[:, inputs.input_ids.shape[1]:].tolist():
            ids = []
            for t in row:
                ids.append(int(t))
                if int(t) in eos:
                    break
            rows.append(ids)
        return rows


