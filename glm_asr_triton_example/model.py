"""The course path: the course model both tracks run (glm_asr_course/model/course_model.py: read it
top to bottom) on this folder's Triton kernels, found by their names (course_model.TrackOps)."""

from glm_asr_course.model.course_model import model_loader

load_model = model_loader(__package__)
