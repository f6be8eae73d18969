"""run: one cell, start to end: the launcher that starts and supervises it in any runtime of kbench.machine.runtimes (launch),
the cell process with its guards and timing (runner), a run's recovery after a fault (recover: resume,
retry-failed), what Snakemake's own scheduler needs for this workflow (scheduling), and what a process the launcher started sees of
its host (seen: its CPUs and GPU; the GPU check compares it with what the launcher gave).

May import: ground, models, gpu, stacks, plan, adapters."""
