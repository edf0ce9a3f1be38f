"""engine.GreedyModel's greedy loop, with each step queued ahead of the token read (as on a GPU) and without,
on a scripted model: the same tokens and streamed ids, the counters every step saw, and which steps run.

The scripted model has no arithmetic. Its decode step logs the counters it was given and writes, as token n
of each row, the row's script entry for the cache slot it read. The tests against transformers
(test_parity.py) run the real tracks through the same loop.
"""

import numpy as np
import pytest
import torch

from glm_asr_course.model.config import DecoderConfig, EncoderConfig, ModelConfig
from glm_asr_course.model.engine import GreedyModel
from glm_asr_course.model.frontend import ASRInputs

EOS, BANNED_EOS_STAND_IN = 7, 5  # the script's eos, and the token the head picks while eos is banned
PROMPT_LEN = 3


def config() -> ModelConfig:
    encoder = EncoderConfig(hidden_size=4, intermediate_size=16, num_layers=1, num_heads=1, head_dim=4,
                            num_mel_bins=2, rope_theta=1e4, rotary_dim=2, max_positions=8)
    decoder = DecoderConfig(vocab_size=16, hidden_size=4, intermediate_size=8, num_layers=1, num_heads=1,
                            num_kv_heads=1, head_dim=4, rms_norm_eps=1e-6, rope_theta=1e4, rotary_dim=4,
                            max_positions=64)
    return ModelConfig(encoder=encoder, decoder=decoder, projector_hidden_size=4, audio_token_id=1,
                       eos_token_ids=(EOS,), tie_word_embeddings=False)


class ScriptedModel(GreedyModel):
    """Token n of row r is script[r][n]; eos while banned becomes BANNED_EOS_STAND_IN."""

    def __init__(self, script: list[list[int]], launch_ahead: bool):
        super().__init__(config(), "cpu", "fp32")
        self.script = torch.tensor(script)
        self.launch_ahead = launch_ahead
        self.steps_seen: list[list[int]] = []  # (cache_pos, valid_len, ban_eos) of every decode step

    def encode_audio(self, features):
        return torch.zeros(features.shape[0], 1, 4)

    def project_audio(self, encoded):
        return encoded

    def embed(self, ids, audio_rows, audio_index):
        return torch.zeros(ids.shape[0], 4)

    def decoder_layers(self, x, state, tokens, decode):
        if decode:
            self.steps_seen.append(state.counters.tolist())
        return x

    def greedy_head(self, last_hidden, state):
        # The step of token n reads PROMPT_LEN + n cache slots (the prompt phase, token 0: PROMPT_LEN).
        picked = self.script[:, int(state.valid_len) - PROMPT_LEN].clone()
        if bool(state.ban_eos):
            picked[picked == EOS] = BANNED_EOS_STAND_IN
        state.token_ids.copy_(picked)


def inputs(batch: int) -> ASRInputs:
    return ASRInputs(input_features=np.zeros((batch, 2, 4), np.float32),
                     input_features_mask=np.ones((batch, 4), np.int64),
                     input_ids=np.full((batch, PROMPT_LEN), 2, np.int64),
                     attention_mask=np.ones((batch, PROMPT_LEN), np.int64),
                     audio_index=np.full((batch, PROMPT_LEN), -1, np.int64))


def run(script, launch_ahead, max_new_tokens, min_new_tokens=0):
    model = ScriptedModel(script, launch_ahead)
    streamed = []
    tokens = model.generate(inputs(len(script)), max_new_tokens, min_new_tokens, on_token=streamed.append)
    return tokens, streamed, model.steps_seen


SCRIPTS = {
    # row 0 ends at token 3; row 1 at token 5: the batch stops there
    "eos_ends_the_batch": ([[3, 4, 9, EOS, 2, 2, 2, 2, 2, 2], [6, 6, 6, 6, 6, EOS, 2, 2, 2, 2]], 10, 0),
    "max_new_tokens_ends_it": ([[3, 4, 9, 8, 2, 2]], 6, 0),
    "eos_banned_until_min_new_tokens": ([[3, EOS, 9, EOS, 2, 2, 2, 2]], 8, 3),
    "eos_first": ([[EOS, 4, 4, 4]], 4, 0),
    "one_token": ([[3, 4]], 1, 0),
}


@pytest.mark.parametrize("case", SCRIPTS)
def test_launching_ahead_changes_no_token_and_wastes_one_step_at_most(case):
    script, max_new, min_new = SCRIPTS[case]
    waiting = run(script, False, max_new, min_new)
    ahead = run(script, True, max_new, min_new)
    tokens, streamed, steps = waiting
    assert ahead[0] == tokens and ahead[1] == streamed
    # The loop that waits runs one step per token after the first, with the counters of that token.
    made = len(streamed)
    assert steps == [[PROMPT_LEN + n - 1, PROMPT_LEN + n, int(n < min_new)] for n in range(1, made)]
    # Launched ahead, the same steps in the same order, and one more only where an eos stopped it early.
    stopped_early = made < max_new
    assert ahead[2][:len(steps)] == steps and len(ahead[2]) == len(steps) + stopped_early


def test_the_scripts_stop_where_the_rules_say():
    assert run(*SCRIPTS["eos_ends_the_batch"][:1], False, 10)[0] == [[3, 4, 9, EOS], [6, 6, 6, 6, 6, EOS]]
    assert run(*SCRIPTS["eos_banned_until_min_new_tokens"][:1], True, 8, 3)[0] == [[3, BANNED_EOS_STAND_IN, 9, EOS]]
    assert run(*SCRIPTS["max_new_tokens_ends_it"][:1], True, 6)[0] == [[3, 4, 9, 8, 2, 2]]

