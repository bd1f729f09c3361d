"""``python -m realm_tools.workers.torch_rss``: the torch reference's peak memory, alone.

Runs a stream through ``RealmAdapter`` on a registered model in a fresh process and prints
``{"peak_rss_mb"}`` as one JSON line (``realm bench speed``'s torch-only RSS).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import numpy as np
import torch

from realm_runtime.measure import peak_rss_mb
from realm_sdk import RealmAdapter, RealmConfig

from ..models import build_model


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stream named in ``argv`` and print the peak RSS; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m realm_tools.workers.torch_rss")
    parser.add_argument("model", help="a key of realm_tools.models.MODELS or timm:<name>")
    parser.add_argument("weights", help="the model's state_dict (torch.save)")
    parser.add_argument("preset", help="the RealmConfig preset")
    parser.add_argument("image_size", type=int, help="square input side (0: the model's)")
    parser.add_argument("stream", help="a .npy file of samples, (N, C, H, W)")
    parser.add_argument("threads", type=int, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, _, classes = build_model(args.model, args.image_size or None)
    model.load_state_dict(torch.load(args.weights, weights_only=True))
    adapter = RealmAdapter(model, RealmConfig.preset(args.preset, num_classes=classes))
    for x in np.load(args.stream):
        adapter.adapt(torch.from_numpy(x[None]))
    print(json.dumps({"peak_rss_mb": peak_rss_mb()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
