# Generated from glm_asr_triton_example/ by utils/make_template.py. Your copy: fill in the TODO kernels.
"""The course path on this folder's Triton kernels: the course model both tracks run
(glm_asr_common/model/course_model.py: read it top to bottom), bound to the operations this folder's
files provide under their shared names (course_model.TrackOps lists them, file by file). Without a
GPU the kernels run in the Triton interpreter.
"""

from glm_asr_common.model.course_model import CourseGlmAsr, track_ops

OPS = track_ops(__package__)


def load_model(cfg, weights, device, precision) -> CourseGlmAsr:
    return CourseGlmAsr(cfg, weights, device, precision, OPS)
