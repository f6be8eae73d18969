"""run: one cell, start to end: the launcher that knows every runtime (launch), the cell process with its guards and
timing (runner), and a run's recovery after a fault (recover: resume, retry-failed).

May import: ground, models, gpu, stacks, plan, adapters."""
