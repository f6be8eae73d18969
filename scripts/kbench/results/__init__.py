"""results: cell JSONs -> what a reader sees. The one list of table modules (registry) over one typed run (context:
the run's context, the records a table reads, what a table declares); a record as a table's row and how every table
is written (flat); the statistics of repeats and verdicts (stats), the words every verdict takes and the CPU rule
(verdicts: the study tables' and the claims'), FLOPs and MFU (flops). The table modules: the
cell tables (tables), the equivalence check's (equivalence_tables, written with them), their plots (plots), time by
kind of work (breakdown_tables), time to the first step (first_step_tables), the batch study (batch), the tuning gain
(tuning), the departures page (departures_page), the run's facts page (facts), JAX against NumPy (jax_numpy_tables).

May import: ground, models, gpu, stacks, plan, adapters, run, equivalence."""
