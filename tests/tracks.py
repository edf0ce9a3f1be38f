"""The (folder, path) pairs the CPU suite runs end to end against transformers, as "folder:path".

TRACKS: every path of every implementation that is not a student template (templates are tested
filled, in their own tests), the CuPy baseline included (without a GPU it runs on NumPy, whose API
CuPy mirrors; its bf16 needs ml_dtypes, which setup-cutile.sh installs). DEFAULT_TRACKS: each folder's
default path only, for the tests whose subject is code every path of a folder shares (checkpoint
loading, the stopping rules): the course paths run in an interpreter or emulator at tens of seconds
a transcription, and the other tests already run them end to end.

On a GPU (utils/gpu_check.sh runs some of these files there) TRACKS leaves out glm_asr_scratch's compiled
path: each checkpoint shape would cost it minutes of torch.compile autotuning, and gpu_check.sh's parity
part checks it at full size.
"""

import torch

from glm_asr_course.tracks import track_folders, track_paths

_FOLDERS = [folder for folder in track_folders() if not folder.endswith("_template")]
TRACKS = [f"{folder}:{path}" for folder in _FOLDERS for path in track_paths(folder)
          if not (path == "compiled" and torch.cuda.is_available())]
DEFAULT_TRACKS = [f"{folder}:{track_paths(folder)[0]}" for folder in _FOLDERS]
