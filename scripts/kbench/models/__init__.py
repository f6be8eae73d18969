"""models: what each benchmarked model is, in every library, with no framework imported: one module per model family
(bert, gemma, mistral, llama, sam, stable_diffusion, resnet50, synthetic; the causal LMs share decoder) registered in
kbench.models.family, which refuses a family missing a fact; the FLOP arithmetic they count with (tally); the
equivalence check's unit-scale reference weights (weights) and the layouts that load them into each column
(mappings/<model>).

May import: ground (kbench.*) only."""
