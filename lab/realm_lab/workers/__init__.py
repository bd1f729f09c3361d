"""Programs the lab starts in a process of its own: ``python -m realm_lab.workers.<name>``.

This ``__init__`` imports nothing, so a worker imports only what it names itself.

- ``endless``: one row of the endless stream through ``RealmRuntime``, torch unimportable.

The constants name each worker's module, for the ``python -m`` command lines that start them.
"""

ENDLESS = f"{__name__}.endless"

__all__ = ["ENDLESS"]
