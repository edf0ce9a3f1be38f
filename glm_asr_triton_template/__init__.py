# Generated from glm_asr_triton_example/ by glm_asr_lab/make_template.py. Your copy: fill in the TODO kernels.
"""GLM-ASR-Nano-2512 with every forward op a Triton kernel (the Triton track).

model.py is the course path: the course model (glm_asr_course/model/course_model.py, shared with the
cuTile track) on this folder's eleven course kernels plus the provided glue, nothing else. The
example also has a fast path, fast_model.py on fused production kernels (fast_*.py), which the
generated template does not copy. glm_asr_course.tracks picks a path by its file.

``STUDENT_KERNELS`` (the course kernels, each between ``# >>> STUDENT KERNEL`` markers here, a TODO in
the template) and ``KERNEL_LANGUAGE``: the folder's declarations (docs/track_interface.md).
"""

from glm_asr_course.model.course_model import COURSE_KERNELS as STUDENT_KERNELS  # noqa: F401

KERNEL_LANGUAGE = "triton"
