"""equivalence: same weights, same function: every column loads the reference column's unit-scale weights and its
outputs and losses are compared within the float32 tolerance (check, a job process run like a cell).

May import: ground, models, gpu, stacks, plan, adapters, run."""
