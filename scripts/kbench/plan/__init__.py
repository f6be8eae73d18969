"""plan: config -> the cells: which cells exist and their resolved specs, n/a with a reason (matrix), the config's
checks (config_check), the departures from the published benchmark (departures), the published claims the config
quotes (claims: the one loader of every place that holds one), and the source files each cell runs (sources: a
change to one reruns exactly its cells), and docs/config.md from the schema (config_docs).

May import: ground, models, gpu, stacks."""
