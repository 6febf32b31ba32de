"""``python -m runtime.cli`` runs the ``durable-sessions`` command."""

import sys

from runtime.cli.main import main

sys.exit(main())
