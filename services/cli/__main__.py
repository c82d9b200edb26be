"""``python -m wiscat.cli``: the ``wiscat`` command."""

import sys

from wiscat.cli.app import main

sys.exit(main())
