# Each build runs under kbench.heartbeat: its output fills its log as it goes (podman's steps, mmdebstrap's and the
# pull's progress), and a line reaches the terminal every 25 s while it runs, with what its last run took.
rule base_image:
    """The base every stack image starts from: Debian built here with mmdebstrap, or an image pinned by digest."""
    output:
        record=results("images/base.json"),
    log:
        results("logs/images/base.log"),
    params:
        source=config["containers"]["base"],
        packages=",".join(config["containers"]["base_packages"]),
        epoch=config["containers"]["source_date_epoch"],
    shell:
        "python -m kbench.heartbeat --job 'base image' --log {log} -- "
        "python -m kbench.stacks.images base --source {params.source} --packages {params.packages} --epoch {params.epoch} "
        "--record {output.record}"


rule stack_image:
    """One image per stack and accelerator: the lock's exact packages on the base; its tag derives from the lock."""
    input:
        lock=lock_path("{stack}", "{accelerator}"),
        bootstrap="envs/bootstrap.lock",
        recipe="containers/Containerfile",
        base=rules.base_image.output.record,
    output:
        record=results("images/{stack}.{accelerator}.json"),
    log:
        results("logs/images/{stack}.{accelerator}.log"),
    params:
        epoch=config["containers"]["source_date_epoch"],
        uv_cache=config["containers"]["uv_cache"],
    shell:
        "python -m kbench.heartbeat --job 'image {wildcards.stack}.{wildcards.accelerator}' --log {log} -- "
        "python -m kbench.stacks.images stack --stack {wildcards.stack} --accelerator {wildcards.accelerator} "
        "--base-record {input.base} --epoch {params.epoch} --uv-cache {params.uv_cache} --record {output.record}"


rule export_image:
    """An archive for a GPU host without a registry: oci (podman load, apptainer build) or docker (docker load)."""
    input:
        record=results("images/{stack}.{accelerator}.json"),
    output:
        results("images/{stack}.{accelerator}.{format}.tar"),
    log:
        results("logs/images/{stack}.{accelerator}.{format}.export.log"),
    wildcard_constraints:
        format="oci|docker",
    params:
        format=lambda wildcards: f"{wildcards.format}-archive",
    shell:
        "python -m kbench.heartbeat --job 'image archive {wildcards.stack}.{wildcards.accelerator}.{wildcards.format}' "
        "--log {log} -- python -m kbench.stacks.images export --record {input.record} --format {params.format} "
        "--out {output}"


rule docker_image:
    input:
        record=results("images/{stack}.{accelerator}.json"),
        archive=results("images/{stack}.{accelerator}.docker.tar"),
    output:
        record=results("images/{stack}.{accelerator}.docker.json"),
    log:
        results("logs/images/{stack}.{accelerator}.docker.log"),
    shell:
        "python -m kbench.heartbeat --job 'docker load {wildcards.stack}.{wildcards.accelerator}' --log {log} -- "
        "python -m kbench.stacks.images docker-load --image-record {input.record} --archive {input.archive} "
        "--record {output.record}"


rule sif_image:
    input:
        record=results("images/{stack}.{accelerator}.json"),
        archive=results("images/{stack}.{accelerator}.oci.tar"),
    output:
        sif=results("images/{stack}.{accelerator}.sif"),
        record=results("images/{stack}.{accelerator}.sif.json"),
    log:
        results("logs/images/{stack}.{accelerator}.sif.log"),
    shell:
        "python -m kbench.heartbeat --job 'sif {wildcards.stack}.{wildcards.accelerator}' --log {log} -- "
        "python -m kbench.stacks.images sif --image-record {input.record} --archive {input.archive} --sif {output.sif} "
        "--record {output.record}"
