"""``python -m realm_tools``: the ``realm`` command."""

from .cli import main

raise SystemExit(main())
