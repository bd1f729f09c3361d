"""fit.md, fit.json and fit.png: what the fit measured, what it chose and the proof."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_report(directory: Path, report: dict[str, Any]) -> None:
    """Write the three files into ``directory``, each whole or not at all."""
    _atomic(directory / "fit.json", (json.dumps(report, indent=2, default=str) + "\n").encode())
    _atomic(directory / "fit.md", markdown(report).encode())
    png = report_png(report)
    if png is not None:
        _atomic(directory / "fit.png", png)


def _atomic(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def markdown(report: dict[str, Any]) -> str:
    """fit.md: the choice first, then the proof per corruption, the search and the rule."""
    choice, proof, data = report["choice"], report["proof"], report["data"]
    labels = list(proof["mean"])
    lines = [
        "# realm fit",
        "",
        f"**Choice: {'adapt with ' + choice['label'] if choice['adapts'] else 'do not adapt'}.**",
        "",
    ]
    if choice.get("reason"):
        lines += [f"Why: {choice['reason']}.", ""]
    if not choice["adapts"]:
        lines += [
            "No configuration met the rule: run the model without adapting "
            "(`inference_model.onnx`, or `RealmRuntime.predict`). The artifacts here hold the "
            "defaults, for a later fit.",
            "",
        ]
    lines += [
        f"Machine: {report['machine']}, {report['budget']['workers']} workers; budget "
        f"{report['budget']['minutes']:g} min, took {report['seconds'] / 60:.1f} min. Data: "
        f"{data['images']} labelled images (sha256 {data['sha256'][:16]}…), {data['search']} "
        f"searched, {data['held_out']} held out"
        + (f", {data['field']} field images" if data["field"] else "")
        + f". Source clean accuracy {report['source_clean']:.2f} %; drift bound "
        f"{report['drift']['max_drift']}.",
        "",
        f"## Proof on the held-out images ({proof['length']} samples per stream, "
        f"{proof['seeds']} seed{'s' * (proof['seeds'] != 1)}, severities 3 and 5)",
        "",
        "| corruption | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    for corruption, row in proof["by_corruption"].items():
        lines.append(f"| {corruption} | " + " | ".join(f"{row[k]:.1f}" for k in labels) + " |")
    lines.append(
        "| **mean ± spread over seeds** | "
        + " | ".join(f"**{proof['mean'][k]:.2f}** ± {proof['spread'][k]:.2f}" for k in labels)
        + " |"
    )
    lines += rule_costs(report)
    lines += ["", "![proof per corruption](fit.png)", "", "## Finalists against the rule", ""]
    lines += [
        "| configuration | mean online | clean after long stream | worst case | verdict |",
        "|---|---:|---:|---:|---|",
    ]
    for f in report["finalists"]:
        verdict = "eligible" if f["why_not"] is None else f["why_not"]
        lines.append(
            f"| {f['label']} | {f['mean']:.2f} | {f['clean_after']:.2f} | "
            f"{'—' if f['worst'] is None else format(f['worst'], '.2f')} | {verdict} |"
        )
    lines += ["", f"Not adapting: {report['search']['no_adapt']:.2f}.", "", "## The search", ""]
    for number, r in enumerate(report["search"]["rounds"], start=1):
        best = ", ".join(f"{s['label']} {s['mean']:.1f}" for s in r["standings"][:5])
        lines.append(
            f"- round {number}: {len(r['standings'])} configurations (not adapting included) on "
            f"{report['search']['streams']} streams × {r['length']} samples; best: {best}"
        )
    lines += [
        "",
        "## The rule",
        "",
        report["rule"]["text"][0].upper() + report["rule"]["text"][1:] + " (docs/fit.md).",
        "",
    ]
    return "\n".join(lines)


def rule_costs(report: dict[str, Any]) -> list[str]:
    """fit.md's lines on what the rule cost, where the defaults proved better than the choice.

    Empty where they did not (by more than the seeds' spread), or where the choice is not to
    adapt; else the gap, and why the search did not choose them: the floor the rule kept
    them out by (with the ``--worst-drop`` or ``--clean-drop`` that would admit them), or
    their lower mean on the search's streams.
    """
    proof, defaults, choice = report["proof"], report.get("defaults"), report["choice"]
    if not defaults or defaults["label"] not in proof["mean"] or not choice["adapts"]:
        return []
    gap = proof["mean"][defaults["label"]] - proof["mean"][choice["label"]]
    spread = max(proof["spread"][defaults["label"]], proof["spread"][choice["label"]])
    if gap <= spread:
        return []
    source, rule = report["source_clean"], report["rule"]
    finalists = report.get("finalists", [])
    weighed = next((f for f in finalists if f["label"] == defaults["label"]), None)
    if weighed is not None and weighed["why_not"] is None:
        chosen = next(f for f in finalists if f["label"] == choice["label"])
        why = (
            f"on the search's streams their mean was {weighed['mean']:.2f}, against the "
            f"choice's {chosen['mean']:.2f}"
        )
    else:
        worst = defaults["worst"] if weighed is None else weighed["worst"]
        admit = []
        if weighed is not None and source - weighed["clean_after"] > rule["clean_drop"]:
            admit.append(f"`--clean-drop {source - weighed['clean_after']:.1f}`")
        if worst is not None and source - worst > rule["worst_drop"]:
            admit.append(f"`--worst-drop {source - worst:.1f}`")
        if weighed is not None:
            why = f"the rule kept them out: {weighed['why_not']}"
        elif worst is None:
            why = "their worst case was not searched (the drift search ran out of its share)"
        else:
            why = (
                f"the worst case found inside their bound (max_drift {defaults['max_drift']:g}) "
                f"loses {source - worst:.2f} points of clean accuracy, beyond the rule's "
                f"{rule['worst_drop']:g}"
            )
        if admit:
            why += f"; a fit with {' and '.join(admit)} may choose them"
    return [
        "",
        f"The defaults did {gap:.2f} points better than the choice on these streams, more than "
        f"the seeds' spread: {why}. That is what the choice gives up for the rule's floors.",
    ]


def report_png(report: dict[str, Any]) -> bytes | None:
    """Grouped bars of the proof per corruption, as PNG bytes (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import io

        import matplotlib.pyplot as plt
    except ImportError:
        return None
    proof = report["proof"]
    labels = list(proof["mean"])
    corruptions = list(proof["by_corruption"])
    fig, ax = plt.subplots(figsize=(12, 4))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        values = [proof["by_corruption"][c][label] for c in corruptions]
        ax.bar([j + i * width for j in range(len(corruptions))], values, width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(corruptions))])
    ax.set_xticklabels(corruptions, rotation=45, ha="right")
    ax.set_ylabel("online accuracy (%)")
    ax.set_title("held-out streams: the choice, the defaults, not adapting")
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()
