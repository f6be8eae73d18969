"""report: the report's first page (first_page): the answer of a run, a loop over its context (each profile's
headline and changes, from its tables and its history) and its claims (kbench.claims), then the published table.

May import: every wing."""
