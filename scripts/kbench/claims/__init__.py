"""claims: which of the published claims hold on this run. One registry of the claims' kinds (registry: each the
rule that decides a claim of its kind, the tables' files it reads and its section of the first page), what a claim
reads on a run (evidence: the run's context and the tables by the names the table registry lists), and the rules:
the published page's findings on this run's rows (findings), its explanations on the breakdowns by kind
(explanations), and the claims a study's table decides (studies: the compile's cost, the batch study's rows, the
tuning finding, JAX against NumPy). The claims themselves are the config's (kbench.plan.claims loads them); the
words of a verdict are kbench.results.verdicts'.

May import: ground, models, gpu, stacks, plan, adapters, run, equivalence, results."""
