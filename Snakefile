# Keras 3 multi-backend benchmark: one process per cell repeat (profile x model x task x batch x precision x
# framework), one JSON each, tables per suite and profile. Cells and their n/a reasons come from config.yaml via
# rules/common.smk.
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# config.yaml read by us first: a YAML error gets its file and line, not Snakemake's generic message.
sys.path.insert(0, os.path.join(workflow.basedir, "scripts"))
from kbench.plan import config_check

try:
    config_check.load_yaml(Path("config.yaml"))
except config_check.ConfigError as error:
    sys.exit(f"config error: {error}")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/environments.smk"
include: "rules/images.smk"
include: "rules/cells.smk"
include: "rules/equivalence.smk"
include: "rules/jax_numpy.smk"
include: "rules/batch_study.smk"
include: "rules/tables.smk"
include: "rules/report.smk"
include: "rules/history.smk"


# On a cluster only cells become jobs: images are built where the container storage is (and shipped to the nodes as
# archives, see ship_images), environments and tables are quick and need no GPU.
localrules:
    all,
    base_image,
    stack_image,
    export_image,
    docker_image,
    sif_image,
    environment,
    preinstalled_environment,
    tables,
    batch_study,
    tuning_gain,
    departures,
    plots,
    run_facts,
    archive,
    history,
    changes,
    first_page,


onstart:
    preflight_before_jobs()
    disk_preflight_before_jobs()
    if scheduling.drop_default_rate_limit(workflow.scheduler):
        print(scheduling.DROPPED, file=sys.stderr)


rule all:
    input:
        table_files(config["suite"]),
        results("report", config["suite"], "first_page.html"),
