#!/usr/bin/env bash
# ./benchmark_detailed.sh FOLDER [options]  →  python benchmark_detailed.py FOLDER [options]
# Per-component, per-layer and per-kernel profile with roofline verdicts; --help for the options.
# With no folder, lists the folders.
set -euo pipefail
cd "$(dirname "$0")"
source utils/folder_wrapper.sh
run_with_folder benchmark_detailed.py benchmark_detailed.sh "$@"
