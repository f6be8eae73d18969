"""breakdown: where a step's time goes, by kind of work, from the trace each framework's own profiler writes after the
timed window: the kinds as rules (kinds: what an op's name, its XLA program's content or its Inductor kernel says
it is), what a compiler says it put in each op (compiled: the XLA programs' optimized HLO, read from the profiler's
XSpace), the one trace reader with its closure (trace), and the profiled steps in the cell with the trace kept
(measure).

May import: ground."""
