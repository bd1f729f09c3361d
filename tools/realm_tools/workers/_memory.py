"""The peak memory of this process, as the RSS workers report it."""

from __future__ import annotations

from realm_runtime import peak_rss_mb

__all__ = ["peak_rss_mb"]
