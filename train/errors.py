"""One-line errors: `train: error: ...` on stderr and exit code 2, as for a bad flag."""

import sys


def fail(message):
    print(f"train: error: {message}", file=sys.stderr)
    sys.exit(2)
