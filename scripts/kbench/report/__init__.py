"""report: the report's first page (first_page): the answer of a run, from its tables, its history and its studies.

May import: every wing."""
