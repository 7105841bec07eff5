"""``python -m vertex_trainer_tools``: the same as the ``vertex-tools`` command."""

import sys

from vertex_trainer_tools.cli import main

sys.exit(main())
