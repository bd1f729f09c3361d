"""``python -m realm_tools``: the ``realm`` command."""

from ._cli import main

raise SystemExit(main())
