"""The teacher-forced regret utils/gpu_parity.py judges the decode path by (glm_asr_common.reference.hf_model),
on a tiny checkpoint."""

import pytest
import torch

from glm_asr_common.model.audio import load_audio
from glm_asr_common.reference.hf_model import teacher_forced_regret
from parity import hf_generate, hf_kwargs, hf_model, inputs_for, track_model


@torch.no_grad()
def test_regret_is_zero_for_transformers_own_ids_and_large_for_others(tiny_ckpt, clips):
    _, ckpt = track_model("glm_asr_scratch", tiny_ckpt)
    inputs = inputs_for(ckpt, [load_audio(clips["short"])])
    hf, feed = hf_model(tiny_ckpt), hf_kwargs(inputs)
    ids = hf_generate(hf, inputs, 12, 12, [])[0]
    assert len(set(ids)) > 3  # a varied sequence, so the check below means something
    regret, _, _ = teacher_forced_regret(hf, feed, ids)
    assert regret == 0.0

    # Replace one id by transformers' least likely choice at that step: the regret finds that step.
    prompt_len = feed["input_ids"].shape[1]
    forced = dict(feed, input_ids=torch.cat([feed["input_ids"], torch.tensor([ids[:4]])], 1),
                  attention_mask=torch.cat([feed["attention_mask"], torch.ones(1, 4, dtype=torch.long)], 1))
    step_logits = hf(**forced).logits[0, prompt_len + 3]
    wrong = ids[:4] + [int(step_logits.argmin())] + ids[5:]
    regret, step, top2_gap = teacher_forced_regret(hf, feed, wrong)
    assert step == 4 and regret == pytest.approx(float(step_logits.max() - step_logits.min()), rel=1e-5)
    assert top2_gap >= 0.0
