"""The scorer process: `python <bytecode flags> -m pytest_ecdysis_tau2.scoring [--serve PATH [FD]]`
(`scorer_client.scorer_command`).

Without arguments it answers JSON-line requests on stdin until EOF (`scorer.serve_lines`, a worker's own
scorer); with `--serve PATH [FD]` it is the session's warm scorer server on the Unix socket PATH
(`warm_scorer.serve`). This entry point sits above both, so neither imports the other's module back.
"""

from __future__ import annotations

import os
import sys

from .scorer import ready, serve_lines
from .warm_scorer import serve


def main(argv: list[str] | None = None) -> None:
    """Serve requests on stdin until EOF (`--serve PATH [FD]`: the session's warm scorer server on the Unix
    socket PATH, `warm_scorer.serve`); anything tau2 prints goes to stderr, never into the protocol."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"] and len(argv) in (2, 3):
        serve(argv[1], int(argv[2]) if len(argv) == 3 else None)
        return
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    ready()
    serve_lines(sys.stdin, out)


if __name__ == "__main__":
    main()
