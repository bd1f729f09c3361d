"""``realm keygen``: an Ed25519 key pair to sign artifacts with."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_keygen_parser(sub: Any) -> None:
    """Register the ``keygen`` sub-command on an argparse sub-parser set."""
    keygen = sub.add_parser("keygen", help="write an Ed25519 key pair to sign artifacts with")
    keygen.add_argument("prefix", help="writes PREFIX.key (private, 0600) and PREFIX.pub")
    keygen.set_defaults(func=run_keygen_command)


def run_keygen_command(args: argparse.Namespace) -> int:
    """Run ``realm keygen`` with parsed arguments; returns the exit code."""
    from realm_runtime import generate_keypair

    try:
        private, public = generate_keypair(args.prefix)
    except FileExistsError as exc:
        print(f"realm keygen: {exc}", file=sys.stderr)
        return 1
    print(f"private key: {private} (mode 0600; keep it off devices)")
    print(f"public key:  {public} (give it to RealmRuntime(trusted_keys=[...]) and the clients)")
    return 0
