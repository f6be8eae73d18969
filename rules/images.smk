rule base_image:
    """The base every stack image starts from: Debian built here with mmdebstrap, or an image pinned by digest."""
    output:
        record=RESULTS + "/images/base.json",
    log:
        RESULTS + "/logs/images/base.log",
    params:
        source=config["containers"]["base"],
        packages=",".join(config["containers"]["base_packages"]),
        epoch=config["containers"]["source_date_epoch"],
    shell:
        "{PYTHON} -m kbench.images base --source {params.source} --packages {params.packages} --epoch {params.epoch} "
        "--record {output.record} > {log} 2>&1"


rule stack_image:
    """One image per stack and accelerator: the lock's exact packages on the base; its tag derives from the lock."""
    input:
        lock="envs/{stack}.{accelerator}.lock",
        bootstrap="envs/bootstrap.lock",
        recipe="containers/Containerfile",
        base=rules.base_image.output.record,
    output:
        record=RESULTS + "/images/{stack}.{accelerator}.json",
    log:
        RESULTS + "/logs/images/{stack}.{accelerator}.log",
    params:
        epoch=config["containers"]["source_date_epoch"],
        uv_cache=config["containers"]["uv_cache"],
    shell:
        "{PYTHON} -m kbench.images stack --stack {wildcards.stack} --accelerator {wildcards.accelerator} "
        "--base-record {input.base} --epoch {params.epoch} --uv-cache {params.uv_cache} --record {output.record} "
        "> {log} 2>&1"


rule export_image:
    """An archive for a GPU host without a registry: oci (podman load, apptainer build) or docker (docker load)."""
    input:
        record=RESULTS + "/images/{stack}.{accelerator}.json",
    output:
        RESULTS + "/images/{stack}.{accelerator}.{format}.tar",
    log:
        RESULTS + "/logs/images/{stack}.{accelerator}.{format}.export.log",
    wildcard_constraints:
        format="oci|docker",
    params:
        format=lambda wildcards: f"{wildcards.format}-archive",
    shell:
        "{PYTHON} -m kbench.images export --record {input.record} --format {params.format} --out {output} > {log} 2>&1"


rule docker_image:
    input:
        record=RESULTS + "/images/{stack}.{accelerator}.json",
        archive=RESULTS + "/images/{stack}.{accelerator}.docker.tar",
    output:
        record=RESULTS + "/images/{stack}.{accelerator}.docker.json",
    log:
        RESULTS + "/logs/images/{stack}.{accelerator}.docker.log",
    shell:
        "{PYTHON} -m kbench.images docker-load --image-record {input.record} --archive {input.archive} "
        "--record {output.record} > {log} 2>&1"


rule sif_image:
    input:
        record=RESULTS + "/images/{stack}.{accelerator}.json",
        archive=RESULTS + "/images/{stack}.{accelerator}.oci.tar",
    output:
        sif=RESULTS + "/images/{stack}.{accelerator}.sif",
        record=RESULTS + "/images/{stack}.{accelerator}.sif.json",
    log:
        RESULTS + "/logs/images/{stack}.{accelerator}.sif.log",
    shell:
        "{PYTHON} -m kbench.images sif --image-record {input.record} --archive {input.archive} --sif {output.sif} "
        "--record {output.record} > {log} 2>&1"
