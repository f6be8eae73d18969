"""harness: the harness's own checks, apart from the studies: bench_overhead (the runner against a bare loop:
scripts/bench_overhead.py), bench_images (image builds and container start-up: scripts/bench_images.py),
breakdown_overhead (does the breakdown touch the number it explains: scripts/check_breakdown_overhead.py),
warm_window (does a warm compile cache touch it: scripts/check_warm_window.py), two_sides (the one tiny cell both of
those run, two sides alternating).

May import: every wing below it (ground up to studies)."""
