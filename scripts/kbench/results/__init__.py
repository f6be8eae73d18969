"""results: cell JSONs -> what a reader sees: the statistics of repeats and verdicts (stats), FLOPs and MFU (flops),
the batch study's cost model and verdicts (batch),
the tables (tables), their plots (plots) and the run's facts page (facts).

May import: ground, models, gpu, stacks, plan, adapters, run, equivalence."""
