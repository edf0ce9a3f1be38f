"""GLM-ASR-Nano-2512 with every forward op a cuTile kernel (the cuTile track).

model.py is the course path: the course model (glm_asr_course/model/course_model.py, shared with the
Triton track) on this folder's eleven course kernels plus the provided glue (glue.py, conv.py),
nothing else. glm_asr_course.tracks picks a path by its file (fast_model.py, model.py,
cupy_model.py where present); the generated template copies the course path only. Kernel files use
``ct`` and ``launch`` from glm_asr_course.runtimes.cutile: the real cuda.tile on a GPU, a CPU
emulator elsewhere.

``STUDENT_KERNELS`` (the course kernels, each between ``# >>> STUDENT KERNEL`` markers here, a TODO in
the template) and ``KERNEL_LANGUAGE``: the folder's declarations (docs/track_interface.md).
"""

from glm_asr_course.model.course_model import COURSE_KERNELS as STUDENT_KERNELS  # noqa: F401

KERNEL_LANGUAGE = "cutile"
