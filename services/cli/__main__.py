"""``python -m services.cli``: the ``wiscat`` command."""

import sys

from services.cli.app import main

sys.exit(main())
