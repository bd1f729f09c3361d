"""SFT's loss in torch: MEMO's (the REALM paper's App. B: "an identical implementation")."""

from __future__ import annotations

from .memo import FORM

__all__ = ["FORM"]
