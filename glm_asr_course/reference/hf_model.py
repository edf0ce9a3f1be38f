"""transformers' GlmAsrForConditionalGeneration: the reference every tool, test and report judges and times
the tracks against. Built on a track's canonical weights or read from a checkpoint, fed a track's
inputs, run greedily with the same stopping rules as the tracks (cut after the first eos), and scored
teacher-forced (how far a run's ids fall below the reference's best logit at each step).
"""

import dataclasses

import numpy as np
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


def forced_inputs(inputs, ids: list[int]):
    """The prompt followed by ``ids`` (all but the last) as text: the logits at positions prompt_len − 1
    onward are the next-token predictions of every step, each given the prefix ``ids`` holds."""
    extra = np.asarray([ids[:-1]], dtype=inputs.input_ids.dtype)
    return dataclasses.replace(
        inputs, input_ids=np.concatenate([inputs.input_ids, extra], 1),
        attention_mask=np.concatenate([inputs.attention_mask, np.ones_like(extra)], 1),
        audio_index=np.concatenate([inputs.audio_index, np.full_like(extra, -1)], 1))


def top2_gap(logits: torch.Tensor) -> float:
    """Best minus second-best logit of one step: how near a tie the reference's choice was."""
    best, second = logits.topk(2).values
    return float(best - second)


def teacher_forced_regret(model, feed: dict, ids: list[int]) -> tuple[float, int, float]:
    """How far greedy ids stray from the reference's own choice, given the same prefix.

    One forward over prompt + ids (``feed``: model_inputs of the prompt); at each step t, regret = max
    logit − logit of ids[t]. Returns (max regret, its step, the reference's top-2 gap at that step).
    """
    prompt_len = feed["input_ids"].shape[1]
    extra = torch.tensor([ids[:-1]], dtype=feed["input_ids"].dtype, device=feed["input_ids"].device)
    forced = dict(feed, input_ids=torch.cat([feed["input_ids"], extra], 1),
                  attention_mask=torch.cat([feed["attention_mask"], torch.ones_like(extra)], 1))
    logits = model(**forced).logits[0, prompt_len - 1:].float()
    chosen = logits.gather(1, torch.tensor(ids, device=logits.device)[:, None])[:, 0]
    regret = logits.max(1).values - chosen
    step = int(regret.argmax())
    return float(regret[step]), step, top2_gap(logits[step])


def same_context_regret(step_logits: torch.Tensor, ref_step_logits: torch.Tensor) -> tuple[float, int, list]:
    """Every step's choice (argmax of ``step_logits``, given the reference's prefix) scored by the fp32
    reference logits of that step: (summed regret, steps choosing another id than the reference, the
    regret of each such step). Unlike the free-running regret every run is judged on the same contexts,
    so two runs compare step by step: the measure of the bf16 / TF32 bar."""
    chosen = step_logits.float().argmax(-1)
    ref = ref_step_logits.float()
    regret = ref.max(-1).values - ref.gather(-1, chosen[:, None])[:, 0]
    flipped = chosen != ref.argmax(-1)
    return float(regret.sum()), int(flipped.sum()), regret[flipped].tolist()


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
