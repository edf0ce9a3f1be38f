#!/usr/bin/env bash
# ./benchmark_detailed.sh FOLDER [options]  →  python benchmark_detailed.py FOLDER [options]
# Per-component, per-layer and per-kernel profile with roofline verdicts; --help for the options.
# With no folder, lists the folders.
set -euo pipefail
cd "$(dirname "$0")"
source utils/python.sh

folders() { for d in glm_asr_*/; do [ -f "$d/model.py" ] && echo "  ${d%/}"; done; }

if [ $# -eq 0 ]; then
    echo "Usage: ./benchmark_detailed.sh FOLDER [options]   (--help for options)"
    echo "Available folders:"
    folders
    exit 2
fi
case "$1" in
    -*) ;;
    *) if [ ! -f "${1%/}/model.py" ]; then
           echo "error: unknown folder '$1'; available:" >&2
           folders >&2
           exit 2
       fi ;;
esac
exec "$PYTHON" benchmark_detailed.py "$@"
