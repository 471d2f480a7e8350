"""The rule when no other matches: ``timeout``, with the last observed state as evidence."""

from __future__ import annotations

from draconf.diagnosis.facts import Facts


def rule_timeout(facts: Facts):
    state = [p.summary() for p in facts.pods] or ["no pods"]
    state += [c.summary() for c in facts.claims]
    warnings = [e.line() for e in facts.events if e.type == "Warning"][-2:]
    quota = [e.message for e in facts.events if "exceeded quota" in e.message][-1:]
    if quota:
        lead = f"A ResourceQuota blocks the workload ({quota[0][:200]})"
    else:
        lead = "No definitive signal from the cluster"
    unread = f"; could not read {', '.join(sorted(facts.errors))}" if facts.errors else ""
    text = "; ".join(state)[:600]
    return ("timeout",
            f"{lead}; last observed: {text}"
            f"{'; recent warnings: ' + ' | '.join(w[:200] for w in warnings) if warnings else ''}"
            f"{unread}: read the events of these objects and rerun with a longer timeout.")
