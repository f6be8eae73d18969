"""models: what each benchmarked model is, in every library, with no framework imported: each library's constructor
arguments for a library-neutral architecture (constructors), the equivalence check's unit-scale reference weights
(weights) and the layouts that load them into each column (mappings/<model>).

May import: ground (kbench.*) only."""
