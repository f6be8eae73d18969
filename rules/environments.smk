rule environment:
    """One venv per stack and accelerator, installed from its hash-pinned lock; the record is what cells depend on."""
    input:
        lock="envs/{stack}.{accelerator}.lock",
    output:
        record=results("environments/{stack}.{accelerator}.json"),
    log:
        results("logs/environments/{stack}.{accelerator}.log"),
    params:
        prefix=".envs/{stack}.{accelerator}",
    shell:
        "python -m kbench.envs --stack {wildcards.stack} --accelerator {wildcards.accelerator} "
        "--lock {input.lock} --prefix {params.prefix} --record {output.record} > {log} 2>&1"
