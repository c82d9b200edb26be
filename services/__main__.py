"""The ``wiscat`` command: ``python -m wiscat``, and the installed script's entry point.

The installed script imports this module, and nothing heavier, before it calls :func:`main`.
A process that multiprocessing starts runs its parent's main script again (as
``__mp_main__``): for a harvester's page workers, the ``wiscat`` script. Were it to import the
command line itself, every worker would hold the HTTP client, the database driver and the
settings it never uses, about 25 MB each (docs/benchmarks.md).
"""

import sys


def main() -> int:
    from wiscat.cli.app import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
