"""Whether a transcription is right: the status line, its exit code, and on random weights the ids check.

A real checkpoint is checked by its transcript: the normalised text against the expected one (PASS /
FAIL, exit 0 / 1). A checkpoint of random weights (--random-weights, or one this project built:
tiny_checkpoint.py marks its config.json, checkpoint.RANDOM_WEIGHTS_MARK) decodes meaningless text, so
no transcript can check it: its status reads NOT CHECKED (random weights), and the verdict is whether
the run's ids equal those of transformers' GlmAsrForConditionalGeneration in IEEE fp32 (TF32 off), run
here on the same weights and inputs with the same --max-new-tokens, --min-new-tokens and eos ids.

Only an IEEE fp32 run (--precision fp32, the default on a CPU) is held to equal ids: bf16 and TF32
round every matmul, and rounding may flip a near-tie between two tokens of a correct model. For them
the ids line is printed for information, says so, and leaves the exit code at 0 (glm_asr_lab/gpu/parity.py
judges them on a GPU by teacher-forced regret instead).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch

from glm_asr_course.command_line import INTERPRETED_MAX_PARAMETERS, expected_text, open_run_checkpoint, parameter_count, release
from glm_asr_course.model.precision import PRECISIONS
from glm_asr_course.reference.scoring import word_error_rate


@dataclass
class IdsCheck:
    """A run's ids beside transformers' IEEE fp32 ids on the same checkpoint, or why they were not compared."""

    ids: list[int]
    reference: list[int] | None  # None: not compared (``not_compared`` says why)
    precision: str  # the run's
    not_compared: str = ""

    @property
    def decides(self) -> bool:
        """Whether a difference fails the run: IEEE fp32 runs only (see the module docstring)."""
        return self.precision == "fp32"

    @property
    def equal(self) -> bool | None:
        return None if self.reference is None else self.ids == self.reference

    @property
    def first_difference(self) -> int | None:
        """The 1-based position of the first token that differs (where one run stopped earlier: the
        position after the shorter one's last token); None when equal or not compared."""
        if self.equal is not False:
            return None
        pairs = zip(self.ids, self.reference)
        return next((k for k, (a, b) in enumerate(pairs, 1) if a != b), min(len(self.ids), len(self.reference)) + 1)

    @property
    def failed(self) -> bool:
        return self.decides and self.equal is False

    def line(self) -> str:
        """E.g. "ids equal transformers' fp32: no (first difference at token 3: 17, transformers' 42)"."""
        head = "ids equal transformers' fp32: "
        if self.reference is None:
            return f"{head}not compared ({self.not_compared})"
        if self.equal:
            answer = f"yes ({len(self.ids)} tokens)"
        else:
            k = self.first_difference

            def at(ids):
                return str(ids[k - 1]) if k <= len(ids) else "stopped"
            answer = f"no (first difference at token {k}: {at(self.ids)}, transformers' {at(self.reference)})"
        if not self.decides:
            answer += (f"; for information only: {self.precision} runs are not held to equal ids (bf16 and "
                       "TF32 round, which may flip a near-tie), --precision fp32 runs are")
        return head + answer


def check_against_transformers(session, ids: list[int]) -> IdsCheck:
    """Run transformers in IEEE fp32 on the session's checkpoint and inputs, with its token limits."""
    precision = session.precision.name
    if importlib.util.find_spec("transformers") is None:
        return IdsCheck(ids, None, precision, "transformers is not installed")
    cfg = session.checkpoint.config
    if session.device == "cpu" and parameter_count(cfg) > INTERPRETED_MAX_PARAMETERS:
        return IdsCheck(ids, None, precision, "transformers at full size on a CPU would take minutes more; "
                                              "run on a GPU, or on a tiny checkpoint, to compare")
    from glm_asr_course.reference.hf_model import HFTrack, raw_config

    options = session.options
    weights = (session.checkpoint.weights if session.dtype == torch.float32 else
               open_run_checkpoint(options, torch.float32, session.device).weights)
    model = HFTrack(raw_config(options.model, options.random_weights), weights, cfg, session.device, PRECISIONS["fp32"])
    reference = model.generate(session.inputs, options.max_new_tokens, options.min_new_tokens)[0]
    del model, weights
    release(session.device)
    return IdsCheck(ids, reference, precision)


@dataclass
class Verdict:
    status: str  # what follows "Status: "
    code: int  # the exit code it implies: 0, or 1 for a wrong transcription or wrong IEEE fp32 ids
    expected: str | None
    wer: float | None
    ids_check: IdsCheck | None  # random weights only

    @property
    def headline(self) -> str:
        """The verdict in a phrase, as reports lead with it: the ids line on random weights, else the status."""
        if self.ids_check is None:
            return self.status
        if self.ids_check.reference is None:
            return f"{self.status}; {self.ids_check.line()}"
        return self.ids_check.line()


def transcript_status(text: str, expected: str | None) -> tuple[str, int, float | None]:
    """A real checkpoint's transcript against the expected one: (status, exit code, word error rate)."""
    if expected is None:
        return "NOT CHECKED (no expected transcription given)", 0, None
    wer = word_error_rate(text, expected)
    if wer == 0.0:
        return "PASS", 0, wer
    return "FAIL - Transcription does not match expected", 1, wer


def judge(session, ids: list[int], text: str) -> Verdict:
    """The verdict on a transcription (``ids``, decoded as ``text``) of the session's checkpoint."""
    ids_check = expected = wer = None
    if session.checkpoint.random_weights:
        ids_check = check_against_transformers(session, ids)
        status, code = "NOT CHECKED (random weights)", int(ids_check.failed)
    else:
        expected = expected_text(session.options.audio, session.options.expected)
        status, code, wer = transcript_status(text, expected)
    # --allow-reference: the example's kernels stood in for unwritten ones; never a plain PASS then.
    substituted = session.references.substituted()
    if substituted:
        names = ", ".join(substituted)
        status = f"PASS WITH REFERENCE KERNELS ({names})" if status == "PASS" else f"{status} (reference kernels: {names})"
    return Verdict(status, code, expected, wer, ids_check)
