"""scripts/real-model-check, the reading: what the transcripts, the proxy's records and the
server log say about a run, the assertions a weak model cannot break, and the table."""

from __future__ import annotations

import collections
import hashlib
import json
import re
from pathlib import Path
from typing import Any

GRAMMAR_ERROR = re.compile(r"grammar|json[-_ ]schema|failed to parse", re.IGNORECASE)


# --------------------------------------------------------------------------- transcripts
def reask_reason(reask: dict[str, Any]) -> str:
    """A re-ask's reason: its ``reason`` field when the record has one; else the reason code
    its error text starts with (``cut_off: ...``, as ModelOutputError writes it; a quality
    gate's ``gate:<name>: ...``, docs/transcript.md "Quality gates"); else a
    short key made from the start of the text (a leading step path dropped, numbers as N)."""
    if isinstance(reask.get("reason"), str):
        return str(reask["reason"])
    text = str(reask.get("error", ""))
    code = re.match(r"((?:gate:)?[a-z][a-z0-9_]*): ", text)
    if code:
        return code.group(1)
    text = re.sub(r"^\S*/\S*: ", "", text)  # a leading step path
    text = re.sub(r"\d+", "N", text)
    text = re.split(r"[:;(\n]", text, maxsplit=1)[0].strip()
    return text[:48] or "?"


def status_counts(scoring: Any) -> collections.Counter[str]:
    """Every ``status`` in the scoring record, keyed ``<where>:<status>`` (judge, selector,
    candidate ...), and dropped variants. With evolution, the top-level judges/candidates
    repeat the last round's and are skipped."""
    counts: collections.Counter[str] = collections.Counter()
    if not isinstance(scoring, dict) or not scoring.get("enabled"):
        return counts
    skip = {"judges", "candidates", "score_table"} if scoring.get("evolution") else set()
    for k, v in scoring.items():
        if k not in skip and k != "config_snapshot":
            _count_statuses(v, k, counts)
    return counts


def _count_statuses(node: Any, key: str, counts: collections.Counter[str]) -> None:
    if isinstance(node, list):
        for v in node:
            _count_statuses(v, key, counts)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("status"), str):
        kind = f"{node['kind']}-" if isinstance(node.get("kind"), str) else ""
        counts[f"{singular(key)}:{kind}{node['status']}"] += 1
    if node.get("dropped"):
        counts[f"{singular(key)}:dropped"] += 1
    for k, v in node.items():
        _count_statuses(v, k, counts)


def singular(key: str) -> str:
    return key[:-1] if key.endswith("s") and not key.endswith("ss") else key


def read_transcript(log_dir: Path) -> dict[str, Any] | None:
    files = sorted(log_dir.glob("*_transcript.json"))
    if not files:
        return None
    data = json.loads(files[-1].read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


def digest(value: Any) -> str:
    """A short hash of ``value`` as canonical JSON."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def step_digests(t: dict[str, Any]) -> dict[str, list[str]]:
    """Each chat step's ``[request, answer]`` digests by path: what it sent (prompt, system
    prompt, parameters with the seed, the earlier messages it carried) and its last answer."""
    out: dict[str, list[str]] = {}
    for step in t.get("steps") or []:
        if step.get("type") != "chat":
            continue
        sent = {k: step.get(k) for k in ("prompt", "system_prompt", "params", "context_messages")}
        out[str(step.get("path"))] = [digest(sent), digest(step.get("response"))]
    return out


def ok_judges_per_round(scoring: Any) -> list[int]:
    """How many judges ended ``ok`` in each judged round (one entry without rounds)."""
    if not isinstance(scoring, dict) or not scoring.get("enabled"):
        return []
    evolution = scoring.get("evolution")
    rounds = evolution.get("rounds") if isinstance(evolution, dict) else None
    panels = [r.get("judges") or [] for r in rounds] if rounds else [scoring.get("judges") or []]
    return [sum(1 for j in panel if j.get("status") == "ok") for panel in panels]


def picks_of(t: dict[str, Any]) -> dict[str, Any]:
    """What a run chose: the selected card, each round's survivors, the final prompt's digest."""
    scoring = t.get("blackbox_scoring")
    out: dict[str, Any] = {"final_prompt": digest(t.get("final_image_prompt"))}
    if isinstance(scoring, dict) and scoring.get("enabled"):
        out["selected_id"] = scoring.get("selected_id")
        evolution = scoring.get("evolution")
        if isinstance(evolution, dict):
            out["survivors"] = [
                [str(s.get("id")) for s in r.get("survivors") or []]
                for r in evolution.get("rounds") or []
            ]
    return out


def summarize_transcript(t: dict[str, Any] | None) -> dict[str, Any]:
    if t is None:
        return {"transcript": False}
    usage = t.get("usage") or {}
    reasks: collections.Counter[str] = collections.Counter()
    step_errors: collections.Counter[str] = collections.Counter()
    timeouts = 0
    for step in t.get("steps") or []:
        for r in step.get("reasks") or []:
            reasks[reask_reason(r)] += 1
        err = step.get("error")
        if isinstance(err, dict):
            key = err.get("reason") or err.get("type") or "?"
            if err.get("status") is not None:
                key = f"{key} {err['status']}"
            step_errors[f"{step.get('name')}:{key}"] += 1
            timeouts += is_timeout(err)
    error = t.get("error")
    if isinstance(error, dict):
        timeouts += is_timeout(error)
        for r in error.get("reasks") or []:  # the failing step's rejected answers
            reasks[reask_reason(r)] += 1
    return {
        "transcript": True,
        "calls": usage.get("model_calls"),
        "image_calls": usage.get("image_calls"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "reasks": dict(sorted(reasks.items())),
        "statuses": dict(sorted(status_counts(t.get("blackbox_scoring")).items())),
        "step_errors": dict(sorted(step_errors.items())),
        "timeouts_recorded": timeouts,
        "ok_judges": ok_judges_per_round(t.get("blackbox_scoring")),
        "picks": picks_of(t) if error is None else None,
        "digests": step_digests(t),
        "error": None
        if not isinstance(error, dict)
        else {k: error.get(k) for k in ("type", "phase", "step", "path", "reason", "status")}
        | {"message": str(error.get("message", ""))[:240]},
    }


def is_timeout(err: dict[str, Any]) -> int:
    text = f"{err.get('type', '')} {err.get('message', '')}".lower()
    return int("timeout" in text or "timed out" in text)


def proxy_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    chat = [r for r in records if r["path"].endswith("/chat/completions")]
    statuses = collections.Counter(
        str(r["status"] if r["status"] is not None else "gone") for r in records
    )
    shapes = collections.Counter(",".join(role[0] for role in r.get("roles", [])) for r in chat)
    return {
        "requests": len(records),
        "chat_requests": len(chat),
        "http": dict(sorted(statuses.items())),
        "no_token_limit": sum(1 for r in chat if r.get("token_limit") is None),
        "finish": dict(
            collections.Counter(str(r.get("finish_reason")) for r in chat if r["status"] == 200)
        ),
        "client_gone": sum(1 for r in records if r["client_gone"]),
        "client_gone_s": [r["seconds"] for r in records if r["client_gone"]],
        "http_400": [r.get("error", "") for r in records if r["status"] == 400][:3],
        "image_endpoint": sum(1 for r in records if "/images" in r["path"]),
        "shapes": dict(shapes.most_common()),
        "bodies": sorted(str(r["body_sha"]) for r in chat if r.get("body_sha")),
        "max_seconds": max((r["seconds"] for r in records), default=0.0),
        "max_prompt_tokens": max((_prompt_tokens(r) or 0 for r in chat), default=0),
        "schemas": dict(collections.Counter(str(r.get("schema")) for r in chat if r.get("schema"))),
        "prompt_tokens_per_100_chars": _tokens_per_100_chars(chat),
        "prompt_not_rendered": [
            f"{r.get('usage', {}).get('prompt_tokens')} tokens for {r['message_chars']} chars"
            for r in chat
            if _not_rendered(r)
        ][:3],
    }


RENDERED_TOKENS_PER_CHAR = 1 / 8
"""The fewest prompt tokens per character of a rendered conversation (English text is
about 4 characters a token; a template that renders something else, such as the word
"gemma", gives 3 tokens for thousands of characters)."""


def _prompt_tokens(record: dict[str, Any]) -> int | None:
    usage = record.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else None


def _not_rendered(record: dict[str, Any]) -> bool:
    tokens, chars = _prompt_tokens(record), record.get("message_chars")
    if tokens is None or not isinstance(chars, int) or chars < 80:
        return False
    return tokens < chars * RENDERED_TOKENS_PER_CHAR


def _tokens_per_100_chars(chat: list[dict[str, Any]]) -> float | None:
    pairs = [(_prompt_tokens(r), r.get("message_chars")) for r in chat]
    ratios = [100 * t / c for t, c in pairs if isinstance(t, int) and isinstance(c, int) and c]
    return round(min(ratios), 1) if ratios else None


def server_log_summary(lines: list[str]) -> dict[str, Any]:
    exceptions = [ln for ln in lines if "got exception" in ln]
    grammar = [ln for ln in lines if GRAMMAR_ERROR.search(ln) and re.search(r"\s[WE]\s", ln)]
    return {
        "exceptions": len(exceptions),
        "grammar_errors": grammar[:3],
        "exception_lines": [e[:300] for e in exceptions[:3]],
    }


def problems_of(row: dict[str, Any]) -> list[str]:
    """The assertions a weak, non-deterministic model cannot break; each broken one is a line."""
    return wire_problems(row) + exit_problems(row)


def wire_problems(row: dict[str, Any]) -> list[str]:
    out: list[str] = []
    p, t, s = row["proxy"], row["transcript"], row["server_log"]
    if p["http"].get("400"):
        out.append(f"{p['http']['400']} HTTP 400: {p['http_400'][0][:160]}")
    if s["exceptions"]:
        out.append(
            f"{s['exceptions']} request(s) raised in llama-server: {s['exception_lines'][0][:160]}"
        )
    if s["grammar_errors"]:
        out.append(f"grammar error in the server log: {s['grammar_errors'][0][:160]}")
    if p.get("prompt_not_rendered"):
        out.append(
            "the server's prompt tokens do not match the conversation (the chat template "
            f"renders something else): {p['prompt_not_rendered'][0]}"
        )
    # The client hangs up on a call at its timeout, and also on the calls still in flight when
    # the run stops (a sibling failed): only a hang-up at the timeout is a timeout.
    limit = float(row["sets"].get("backend.timeout_s") or 0.0)
    gone = p.get("client_gone_s", [])
    at_timeout = sum(1 for seconds in gone if limit and seconds >= 0.95 * limit)
    timeouts = max(at_timeout, t.get("timeouts_recorded") or 0)
    if timeouts:
        out.append(f"{timeouts} call(s) reached the timeout")
    if row["sets"].get("image.backend") == "offline" and p["image_endpoint"]:
        out.append("image.backend is offline but the server's image endpoint was called")
    return out


def exit_problems(row: dict[str, Any]) -> list[str]:
    out: list[str] = []
    t = row["transcript"]
    err = t.get("error") or {}
    if row.get("over_budget"):  # stopped at the check's budget: slower, not broken
        return ["a traceback on stderr"] if row["traceback"] else []
    if row.get("refused_before_calls"):
        if row["exit"] != 2 or row["proxy"]["chat_requests"]:
            out.append(
                f"exit {row['exit']} after {row['proxy']['chat_requests']} chat request(s); "
                "expected exit 2 before any (the pre-flight check: no image endpoint)"
            )
    elif row["hang"]:
        out.append(f"no exit within {row['cap_s']:.0f} s (killed)")
    elif row["exit"] not in (0, 1):
        out.append(f"exit {row['exit']} (expected 0, or 1 with a transcript naming the step)")
    elif row["exit"] == 1 and not t.get("transcript"):
        out.append("exit 1 without a transcript")
    elif row["exit"] == 1 and not (err.get("path") or err.get("step")):
        out.append(f"exit 1 but the transcript names no step ({err.get('type')})")
    if row["traceback"]:
        out.append("a traceback on stderr")
    return out + must_pass_problems(row)


MIN_OK_JUDGES = 2


def must_pass_problems(row: dict[str, Any]) -> list[str]:
    """A run the check requires to pass (``must_pass``): exit 0, and at least
    :data:`MIN_OK_JUDGES` ok judges in every judged round of a scoring run."""
    if not row.get("must_pass") or row.get("over_budget"):
        return []
    out: list[str] = []
    if row["exit"] != 0:
        out.append(f"exit {row['exit']}; this run must exit 0")
    ok = row["transcript"].get("ok_judges") or []
    if row.get("scoring") and (not ok or min(ok) < MIN_OK_JUDGES):
        out.append(f"ok judges per round {ok}; at least {MIN_OK_JUDGES} required in every round")
    return out


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What is equal and what differs between two runs with the same seed and settings:
    the request bodies the proxy saw (as multisets: concurrent calls arrive in any order),
    each step's request and answer (by path, from the transcripts), and the picks."""
    da, db = a["transcript"].get("digests") or {}, b["transcript"].get("digests") or {}
    both = [p for p in da if p in db]
    requests = [p for p in both if da[p][0] == db[p][0]]
    answers = [p for p in both if da[p][1] == db[p][1]]
    bodies_a = collections.Counter(a["proxy"].get("bodies") or [])
    bodies_b = collections.Counter(b["proxy"].get("bodies") or [])
    first_answer = next((p for p in da if p in db and da[p][1] != db[p][1]), None)
    first_request = next((p for p in da if p in db and da[p][0] != db[p][0]), None)
    return {
        "runs": [a["run"], b["run"]],
        "exits": [a["exit"], b["exit"]],
        "steps": [len(da), len(db)],
        "steps_in_both": len(both),
        "requests_equal": len(requests),
        "answers_equal": len(answers),
        "first_request_differing": first_request,
        "first_answer_differing": first_answer,
        "bodies": [sum(bodies_a.values()), sum(bodies_b.values())],
        "bodies_equal": sum((bodies_a & bodies_b).values()),
        "picks": [a["transcript"].get("picks"), b["transcript"].get("picks")],
        "picks_equal": a["transcript"].get("picks") == b["transcript"].get("picks"),
        "ok_judges": [a["transcript"].get("ok_judges"), b["transcript"].get("ok_judges")],
    }


def comparison_lines(c: dict[str, Any]) -> list[str]:
    """The same-seed comparison in words."""
    return [
        f"Same seed twice ({c['runs'][0]} and {c['runs'][1]}, exits {c['exits'][0]} and "
        f"{c['exits'][1]}): of {c['steps_in_both']} chat steps in both runs "
        f"({c['steps'][0]} and {c['steps'][1]} in all), {c['requests_equal']} sent the same "
        f"request and {c['answers_equal']} got the same answer; of "
        f"{c['bodies'][0]} and {c['bodies'][1]} request bodies the proxy saw, "
        f"{c['bodies_equal']} were byte-identical in both; first differing request: "
        f"`{c['first_request_differing']}`, first differing answer: "
        f"`{c['first_answer_differing']}`; picks "
        + ("equal" if c["picks_equal"] else f"differ ({c['picks'][0]} vs {c['picks'][1]})")
        + f"; ok judges per round {c['ok_judges'][0]} and {c['ok_judges'][1]}."
    ]


# --------------------------------------------------------------------------- the table
def fmt_counts(d: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"


def where_of(row: dict[str, Any]) -> str:
    return f"{row['model']}/{row['template']}" if row.get("model") else str(row["template"])


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| model / template | run | exit | chat steps done | tokens prompt / completion | re-asks by reason "
        "| judge / selector / variant statuses | requests: HTTP status (gone = the client hung up: its timeout, or the run stopped) "
        "| no token limit | finish reasons | prompt tokens per 100 chars (least) "
        "| judge requests | ok judges per round | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        t = r["transcript"]
        exit_ = "hang" if r["hang"] else "budget" if r.get("over_budget") else str(r["exit"])
        tokens = f"{t.get('prompt_tokens', '-')} / {t.get('completion_tokens', '-')}"
        lines.append(
            f"| {where_of(r)} | {r['run']} | {exit_} | {t.get('calls', '-')} | {tokens} "
            f"| {fmt_counts(t.get('reasks') or {})} | {fmt_counts(t.get('statuses') or {})} "
            f"| {fmt_counts(r['proxy']['http'])} | {r['proxy']['no_token_limit']} "
            f"| {fmt_counts(r['proxy']['finish'])} "
            f"| {r['proxy'].get('prompt_tokens_per_100_chars', '-')} "
            f"| {judge_requests(r['proxy'])} "
            f"| {', '.join(map(str, t.get('ok_judges') or [])) or '-'} | {r['wall_s']} |"
        )
    lines.append("")
    lines.append("Message roles of the chat requests (s system, u user, a assistant), per run:")
    lines.append("")
    for r in result["rows"]:
        shapes = ", ".join(f"`{k}` x{v}" for k, v in r["proxy"]["shapes"].items()) or "none"
        lines.append(f"- {where_of(r)}/{r['run']}: {shapes}")
    lines.append("")
    lines.append("Failures:")
    lines.append("")
    for r in result["rows"]:
        err = r["transcript"].get("error")
        where = f"{where_of(r)}/{r['run']}"
        if err:
            lines.append(
                f"- {where}: failed at `{err.get('path') or err.get('step')}` "
                f"({err.get('type')}{', ' + str(err['reason']) if err.get('reason') else ''}"
                f"{', HTTP ' + str(err['status']) if err.get('status') else ''}): "
                f"{err.get('message', '')[:160]}"
            )
        if r["problems"]:
            lines.append(f"- {where}: ASSERTION FAILED: " + "; ".join(r["problems"]))
    return "\n".join(lines) + "\n"


JUDGE_SCHEMAS = ("idea_scores", "idea_comparison")
"""The response schemas of judge requests (every protocol's)."""


def judge_requests(proxy: dict[str, Any]) -> int:
    schemas = proxy.get("schemas") or {}
    return sum(int(schemas.get(name, 0)) for name in JUDGE_SCHEMAS)


def reached_judges(result: dict[str, Any]) -> str:
    """How many runs sent at least one judge request, of how many ran."""
    rows = result["rows"]
    reached = sum(1 for r in rows if judge_requests(r["proxy"]))
    return f"{reached} of {len(rows)} run(s) reached the judges"


def render_md(result: dict[str, Any]) -> str:
    not_set = sorted({k for r in result["rows"] for k in r["not_set"]})
    common = result["settings"]["common"]
    settings = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in common.items() if k not in not_set)
    lines = [
        f"## Real model check: commit {result['commit']}",
        "",
        f"`scripts/real-model-check` on {result['date']}: {result['model']} behind llama-server "
        f"({result['llama_server']}), seed {result['seed']}, {result['cores']} cores, "
        f"{result.get('wall_s', '?')} s in all. Settings: {settings}.",
    ]
    servers = result.get("servers") or {}
    for key, speed in (result.get("server_speed") or {}).items():
        info = servers.get(key, {})
        if "error" in speed:
            lines.append(f"Server {key}: speed probe failed ({speed['error']}).")
            continue
        rendering = info.get("rendering") or {}
        lines.append(
            f"Server {key} (`{' '.join(info.get('args', []))}`, -t {info.get('threads', '?')}): "
            f"{speed['decode_tok_s']} tokens/s decoding, {speed['prompt_tok_s']} tokens/s "
            f"prompt ({speed.get('prompt_tokens')} prompt tokens for the probe conversation, "
            f"{rendering.get('rendered_tokens', '?')} as /apply-template renders it), machine "
            f"load {speed['load_avg_1min']}; timeout {info.get('timeout_s', '-')} s per call, "
            f"cap {info.get('cap_s', '-')} s per run."
            + (f" TOO SLOW: {info['too_slow']}." if info.get("too_slow") else "")
            + (f" ASSERTION FAILED: {info['problem']}." if info.get("problem") else "")
        )
    if result.get("skipped"):
        lines.append(f"Not run (over the budget): {', '.join(result['skipped'])}.")
    if not_set:
        lines.append(
            f"Not set (no such key at this commit): {', '.join(f'`{k}`' for k in not_set)}."
        )
    if result["proxy_token_limit"] is not None:
        lines.append(
            f"**DIAGNOSTIC**: the proxy added `max_tokens={result['proxy_token_limit']}` to every "
            "chat request that sent no limit; this is not what the code sends."
        )
    lines.append(f"{reached_judges(result)}.")
    if result.get("same_seed"):
        lines += comparison_lines(result["same_seed"])
    return "\n".join(lines) + "\n\n" + str(result["markdown"])
