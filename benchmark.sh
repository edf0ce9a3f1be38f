#!/usr/bin/env bash
# ./benchmark.sh FOLDER [options]  →  python benchmark_student.py FOLDER [options]
# With no folder, lists the folders; see `./benchmark.sh FOLDER --help` for the options.
# ./benchmark.sh --grade SUBMISSIONS_DIR [options]  →  the class grader (glm_asr_lab/grading/class_grading.py,
# `./benchmark.sh --grade --help`); its paths are read from where you run it.
set -euo pipefail
if [ "${1:-}" = "--grade" ]; then
    shift
    repo=$(cd "$(dirname "$0")" && pwd)
    source "$repo/utils/python.sh"
    PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m glm_asr_lab.grading.class_grading "$@"
fi
cd "$(dirname "$0")"
source utils/folder_wrapper.sh
run_with_folder benchmark_student.py benchmark.sh "$@"
