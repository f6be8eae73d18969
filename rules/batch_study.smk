# The batch study (kbench.results.batch): each rung of a suite's ladder is an ordinary cell (rule cell; the row's own
# batch is the benchmark's own cell), and one job per profile fits and tabulates them (rule batch_study, made by
# rules/tables.smk from kbench.results.registry). Above a row's own batch each rung waits for the one below it
# (matrix.previous_rung), so a column's ladder stops at its first oom.
