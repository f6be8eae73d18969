rule environment:
    """One venv per stack and accelerator, installed from its hash-pinned lock; the record is what cells depend on."""
    input:
        lock="envs/{stack}.{accelerator}.lock",
    output:
        record=RESULTS + "/environments/{stack}.{accelerator}.json",
    log:
        RESULTS + "/logs/environments/{stack}.{accelerator}.log",
    params:
        prefix=".envs/{stack}.{accelerator}",
    shell:
        "{PYTHON} -m kbench.envs --stack {wildcards.stack} --accelerator {wildcards.accelerator} "
        "--lock {input.lock} --prefix {params.prefix} --record {output.record} > {log} 2>&1"
