"""``python -m realm_lab``: the ``realm-lab`` command."""

from realm_lab.cli import main

raise SystemExit(main())
