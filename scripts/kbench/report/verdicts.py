"""The words a verdict on a published claim takes on the first page (kbench.report.first_page, .explanations)."""
HOLDS, FAILS, NOT_MEASURED = "holds", "does not hold", "not measured here"
