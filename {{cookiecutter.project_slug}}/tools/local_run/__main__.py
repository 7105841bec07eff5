"""``python -m tools.local_run``: see tools/local_run/__init__.py."""

import sys

from tools.local_run.cli import main

sys.exit(main())
