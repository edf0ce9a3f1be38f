# Sourced by benchmark.sh and benchmark_detailed.sh: check the FOLDER argument, then run the script.
# run_with_folder SCRIPT.py [FOLDER] [options]: no folder → usage and the list; a placeholder or an
# unknown folder → one error line (exit 2); otherwise exec the script with the Python of utils/python.sh.
source "$(dirname "${BASH_SOURCE[0]}")/python.sh"

folders() { for d in glm_asr_*/; do [ -f "$d/model.py" ] && echo "  ${d%/}"; done; }

run_with_folder() {
    local script=$1 wrapper=$2
    shift 2
    if [ $# -eq 0 ]; then
        echo "Usage: ./$wrapper FOLDER [options]   (--help for options)"
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
    exec "$PYTHON" "$script" "$@"
}
