"""Teacher-forced regret against transformers' fp32 reference (gpu_check.sh parity and regret): how far a run's
greedy ids fall below the reference's best logit, step by step. The lab's measure of a TF32 or bf16 run, whose ids
may rightly differ from fp32 ones where the reference's top two logits nearly tie.
"""

import dataclasses

import numpy as np
import torch


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
