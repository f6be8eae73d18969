"""harness: the harness's own checks, apart from the studies: bench_overhead (the runner against a bare loop:
`kbench bench-overhead`), bench_images (image builds and container start-up: `kbench bench-images`),
breakdown_overhead (does the breakdown touch the number it explains: `kbench breakdown-overhead`), warm_window (does
a warm compile cache touch it: `kbench warm-window`), two_sides (the one tiny cell both of
those run, two sides alternating).

May import: every wing below it (ground up to studies)."""
