"""run: one cell, start to end: the launcher that starts and supervises it in any runtime of kbench.runtimes (launch),
the cell process with its guards and timing (runner), a run's recovery after a fault (recover: resume,
retry-failed), and what Snakemake's own scheduler needs for this workflow (scheduling).

May import: ground, models, gpu, stacks, plan, adapters."""
