# Generated from glm_asr_cutile_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""GLM-ASR on this folder's cuTile kernels: the course model, glm_asr_common/model/course_model.py
(read it top to bottom: both tracks run that one model), with the operations of this folder plugged in
by name:

  layers.py         rmsnorm, layernorm, gelu, silu, linear_tf32, softmax       course kernels
  attention.py      attention_scores, softmax_inplace, attention_output         course kernels
  rope.py           rope_tables, apply_rope                                     course kernels
  glue.py, conv.py  residual_add, mul, embed_tokens, token_positions, write_kv_cache, mask_scores,
                    argmax_rows, conv1d                                         provided
  weight_loader.py  load_weights: the checkpoint in the layouts these kernels read

This file is the course path (``--path course``); without a GPU the kernels run in the cuTile emulator.
"""

from glm_asr_common.model.course_model import CourseGlmAsr, track_ops

OPS = track_ops(__package__)


def load_model(cfg, weights, device, precision) -> CourseGlmAsr:
    return CourseGlmAsr(cfg, weights, device, precision, OPS)
