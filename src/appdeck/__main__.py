"""The ``appdeck`` program: ``python -m appdeck`` and the installed ``appdeck`` command."""

import sys

from appdeck.tuning import hold_gc, release_gc


def main() -> None:
    # No cyclic collection while the command line's ~1,500 modules load (a fifth of their
    # CPU); a server keeps the hold through its start-up, until serve's tune_gc().
    hold_gc()
    from appdeck.cli import main as run

    if sys.argv[1:2] != ["serve"]:
        release_gc()
    run()


if __name__ == "__main__":
    main()
