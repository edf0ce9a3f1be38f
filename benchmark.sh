#!/usr/bin/env bash
# ./benchmark.sh FOLDER [options]  →  python benchmark_student.py FOLDER [options]
# With no folder, lists the folders; see `./benchmark.sh FOLDER --help` for the options.
set -euo pipefail
cd "$(dirname "$0")"
source utils/python.sh

folders() { for d in glm_asr_*/; do [ -f "$d/model.py" ] && echo "  ${d%/}"; done; }

if [ $# -eq 0 ]; then
    echo "Usage: ./benchmark.sh FOLDER [options]   (--help for options)"
    echo "Available folders:"
    folders
    exit 2
fi
case "$1" in
    -*) ;;
    *) if [ -d "${1%/}" ] && [ ! -f "${1%/}/model.py" ]; then
           echo "error: ${1%/} is a placeholder with no implementation yet (see ${1%/}/README.md)" >&2
           exit 2
       fi
       if [ ! -f "${1%/}/model.py" ]; then
           echo "error: unknown folder '$1'; available:" >&2
           folders >&2
           exit 2
       fi ;;
esac
exec "$PYTHON" benchmark_student.py "$@"
