"""The track folders the CPU suite runs end to end: every implementation that is not a student
template (templates are tested filled, in their own tests) and not cuTile (which needs a GPU)."""

from glm_asr_common.runtime import track_folders

TRACKS = [f for f in track_folders() if not f.endswith("_template") and "cutile" not in f]
