"""lifecycle: a run after it ran: its archive and verify (archive), two runs compared (compare), every run in a DuckDB
history (history), and which package of a lock bump moved a cell (bisect); their commands are kbench's (verify,
sign, compare, history, bisect: kbench.frontdoor.cli).

May import: every wing below it (ground up to results)."""
