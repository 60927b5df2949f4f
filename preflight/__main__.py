"""``python -m preflight`` is the ``preflight`` command."""

import sys

from preflight.cli import main

sys.exit(main())
