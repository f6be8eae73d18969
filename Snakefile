# Keras 3 multi-backend benchmark: one process per cell (model x task x batch x framework), one JSON per cell,
# tables per suite. Cells and their n/a reasons come from config.yaml via rules/common.smk.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/environments.smk"
include: "rules/images.smk"
include: "rules/cells.smk"
include: "rules/tables.smk"
include: "rules/report.smk"


onstart:
    preflight_before_jobs()


rule all:
    input:
        table_files(config["suite"]),
        plot_files(config["suite"]),
