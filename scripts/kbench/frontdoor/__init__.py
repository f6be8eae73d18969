"""frontdoor: the one command a user runs beside Snakemake, `kbench` (cli: its subcommands, each one module's main,
imported only when it runs), and the launcher scripts/bootstrap writes into the driver venv as .venv/bin/kbench
(launcher).

May import: every wing."""
