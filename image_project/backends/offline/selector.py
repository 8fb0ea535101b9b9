"""The multi-round survivor selector's proposal (see the package docstring)."""

from __future__ import annotations

import json
import re
from typing import Any

from image_project import markers
from image_project.backends.base import JsonSchema

_SELECTOR_SCHEMA = "survivor_selection"


def _words_of(value: object) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", json.dumps(value).lower()) if len(w) >= 3}


def _selector_reply(schema: JsonSchema, user_text: str) -> str | None:
    """The survivor selector's proposal (see the package docstring), or None when the request
    is not the selector's or names no candidates or slots."""
    if schema.name != _SELECTOR_SCHEMA or markers.SELECTOR_SLOTS not in user_text:
        return None
    rows = []
    for line in user_text.splitlines():
        if line.startswith('{"id"'):
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    slots = user_text.rsplit(markers.SELECTOR_SLOTS, 1)[1].split(".")[0].split(", ")
    if not rows:
        return None
    rows.sort(key=lambda r: -float(r.get("effective", 0)))
    chosen: list[dict[str, Any]] = []
    picks = []
    for slot in slots[: len(rows)]:
        rest = [r for r in rows if r not in chosen]
        if slot == "diversity" and chosen:
            seen = set().union(*(_words_of(c.get("card")) for c in chosen))
            pick = min(rest, key=lambda r: len(_words_of(r.get("card")) & seen))
            hook = str((pick.get("card") or {}).get("hook", ""))
            reason = f"shares the fewest words with {', '.join(c['id'] for c in chosen)}"
            reason += f": {' '.join(hook.split()[:6])}" if hook.strip() else ""
        elif slot == "potential":
            pick = max(rest, key=lambda r: max((r.get("judge_scores") or {"": 0}).values()))
            top = max((pick.get("judge_scores") or {"": 0}).values())
            reason = f"one judge gave it {top}; room to improve"
        else:
            pick = rest[0]
            reason = f"best effective score {pick.get('effective')}"
        chosen.append(pick)
        picks.append({"id": pick["id"], "category": slot, "reason": reason})
    summary = "Kept " + ", ".join(f"{p['id']} ({p['category']})" for p in picks) + "."
    return json.dumps({"selections": picks, "summary": summary}, ensure_ascii=False)
