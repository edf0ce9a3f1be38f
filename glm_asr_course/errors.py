"""One kind of error for bad user input, and the wrapper that turns it into one line and exit code 2."""

import sys
import traceback


class UserError(Exception):
    """Bad input or environment the user can fix: printed as one line, exit code 2."""


def run_cli(main, argv=None):
    """Run ``main(argv)``; user errors print one line (a traceback only with --debug) and exit 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        code = main(argv)
    except UserError as e:
        if debug:
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)
