"""``python -m faithtrace.cli``: the same command as ``faithtrace``."""

import sys

from faithtrace.cli.main import main

sys.exit(main())
