"""Write the JavaScript client's copy of the contract's names from ``realm_runtime``'s.

    python dev/write_contract.py

Writes ``clients/js/contract.json`` (:func:`realm_runtime.contract.contract_json`) and
``clients/js/contract.js`` (:func:`realm_runtime.contract.contract_module`), which
``tests/runtime/test_contract_json.py`` keeps equal to what the Python module produces. Run
it after a change to ``runtime/realm_runtime/_names.py``.
"""

from __future__ import annotations

from pathlib import Path

from realm_runtime.contract import contract_json, contract_module

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "js"


def main() -> None:
    """Write both files."""
    for name, text in (("contract.json", contract_json()), ("contract.js", contract_module())):
        (CLIENT / name).write_text(text, encoding="utf-8")
        print(f"wrote {CLIENT / name}")


if __name__ == "__main__":
    main()
