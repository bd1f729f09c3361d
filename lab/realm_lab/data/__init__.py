"""The lab's own streams: the endless CCC-style one (:func:`build_ccc_stream`).

Built on the product's data (``realm_tools.data``: the digits, Fashion-MNIST-C, the
long-running streams); only the million-sample benchmark walks this one.
"""

from ._ccc import CCC_SETTING, CCCSettings, build_ccc_stream, domain_walk

__all__ = ["CCC_SETTING", "CCCSettings", "build_ccc_stream", "domain_walk"]
