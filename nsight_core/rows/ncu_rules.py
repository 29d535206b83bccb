"""ncu's own rule results (SOLBottleneck and friends), read from a report into `RuleFinding`s.

ncu marks its rule text up with links and numbers severities; this is the one place that
turns both into our vocabulary, so a diagnosis quotes ncu's advice as plain, short text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nsight_core.diagnosis import RuleFinding

RULE_TEXT_CHARS = 300
"""Rule messages are cut here: the agent needs the gist, the report keeps the rest."""

_SEVERITY = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}
_LINK = re.compile(r"@(url|sass|source|section):([^@]*)@")


def _plain(text: str) -> str:
    """ncu's link markup -> its hypertext ('@url:text:link@' -> 'text', else the last part)."""

    def repl(m: re.Match[str]) -> str:
        parts = m.group(2).split(":")
        return parts[0] if m.group(1) == "url" else parts[-1]

    flat = " ".join(_LINK.sub(repl, text).split())
    return flat if len(flat) <= RULE_TEXT_CHARS else flat[: RULE_TEXT_CHARS - 3] + "..."


def rule_finding(
    name: str, section: str | None, msg_type: int, title: str, message: str, speedup: float | None
) -> RuleFinding:
    """One rule result in our vocabulary (severity by ncu's MsgType, text without links)."""
    return RuleFinding(
        Rule=name,
        Section=section or None,
        Severity=_SEVERITY.get(int(msg_type), "none"),
        Title=_plain(title),
        Text=_plain(message),
        EstimatedSpeedupPct=speedup,
    )


def _rules_of(action: Any) -> list[RuleFinding]:
    out = []
    for r in action.rule_results():
        if not r.has_rule_message():
            continue
        msg = r.rule_message()
        speedup = None
        if r.has_speedup_estimation():
            value = r.speedup_estimation().get("speedup")
            speedup = float(value) if isinstance(value, int | float) else None
        out.append(
            rule_finding(
                str(r.name()),
                str(r.section_identifier()),
                int(msg["type"]),
                str(msg["title"]),
                str(msg["message"]),
                speedup,
            )
        )
    return out


def read_rules(report_path: Path) -> list[list[RuleFinding]]:
    """Rule results per action, in report order (the order `extract_records` numbers)."""
    import ncu_report

    ctx = ncu_report.load_report(str(report_path))
    out: list[list[RuleFinding]] = []
    for rng in ctx:
        for i in range(len(rng)):
            out.append(_rules_of(rng[i]))
    return out
