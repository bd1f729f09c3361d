"""realm_export: torch/timm model → ONNX Runtime on-device training artifacts for REALM.

Not implemented yet: ``export_realm_artifacts`` is the subject of issue 3 (see README,
"Status"). The package exists so that the distribution's layout is final.
"""

__all__: list[str] = []
