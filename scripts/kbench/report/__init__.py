"""report: the report's first page (first_page): the answer of a run, from its tables, its history and its studies;
the published findings re-tested on it (verdicts), and the why of each row from its breakdown by kind of work
(explanations).

May import: every wing."""
