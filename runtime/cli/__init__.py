"""The ``durable-sessions`` command: serve, import, history, search, stats, hibernate.

:func:`main` is the console script. Importers of foreign conversation
formats live beside it (:mod:`runtime.cli.formats`, :mod:`runtime.cli.importer`,
:mod:`runtime.cli.claude_import`).
"""

from runtime.cli.main import main

__all__ = ["main"]
