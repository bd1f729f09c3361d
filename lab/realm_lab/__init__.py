"""realm_lab: the project's own tables and figures, built on the product like any user would.

Not part of ``pip install 'realm-tta[…]'``: the dev environment installs it from ``lab/``.
It imports the product (``realm_runtime``, ``realm_sdk``, ``realm_export``, ``realm_tools``)
through public names only, and nothing in the product imports it.

- :mod:`realm_lab.bench`: accuracy under shift (Table 1's protocol, the long-running
  streams, the endless stream), each run kept as it finishes;
- :mod:`realm_lab.attack`: what an attacker can do through the adaptation;
- :mod:`realm_lab.train`: training the Fashion-MNIST models the product ships;
- :mod:`realm_lab.data`: the endless CCC-style stream;
- :mod:`realm_lab.cli`: the ``realm-lab`` command;
- :mod:`realm_lab.workers`: the programs the lab starts with ``python -m``.

Its ``__init__`` imports nothing: ``python -m realm_lab.workers.<name>`` runs this file first,
in interpreters without torch.
"""
