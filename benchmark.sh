#!/usr/bin/env bash
# ./benchmark.sh FOLDER [options]  →  python benchmark_student.py FOLDER [options]
# With no folder, lists the folders; see `./benchmark.sh FOLDER --help` for the options.
set -euo pipefail
cd "$(dirname "$0")"
source utils/folder_wrapper.sh
run_with_folder benchmark_student.py benchmark.sh "$@"
