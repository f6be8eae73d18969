"""instruments (a shelf of the ground floor): what a cell measures with: timing (the step timer), numerics (the float32
probe), compile_cache (a compiled column's persistent cache, keyed by the device it compiled for).

May import: the ground floor only."""
