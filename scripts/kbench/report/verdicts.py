"""The words a verdict on a published claim takes on the first page (kbench.report.first_page, .explanations)."""
HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured here"


def left_out(row: dict, without: list[dict]) -> bool:
    """Whether a row is one a claim leaves out (its config `without`: e.g. {task: generate, batch_size: 1}, the
    rows the published page's text predates)."""
    return any(all(row.get(k) == v for k, v in rule.items()) for rule in without)


def table(claims: list[dict], decide, heading: str, on_gpu: bool, cpu_read: str) -> "pd.DataFrame":
    """One line per claim: its words (its quote), the verdict decide(claim) -> (verdict, rests on) gives, and what
    it rests on. A run without a GPU reads "not measured here" (the claims are about a GPU) and says what its own
    figures (cpu_read: "rows", "breakdowns") would give, which checks the rule, not the frameworks."""
    import pandas as pd
    rows = []
    for claim in claims:
        verdict, rests_on = decide(claim)
        shown = verdict if on_gpu or verdict == NOT_MEASURED else (
            f"{NOT_MEASURED} (no GPU in this run; its CPU {cpu_read} read: {verdict})")
        rows.append({heading: claim["quote"], "verdict": shown, "rests on": rests_on})
    return pd.DataFrame(rows, columns=[heading, "verdict", "rests on"])
