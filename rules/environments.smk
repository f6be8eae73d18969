rule environment:
    """One venv per stack and accelerator, installed from its hash-pinned lock; the record is what cells depend on."""
    input:
        lock=lock_path("{stack}", "{accelerator}"),
    output:
        record=results("environments/{stack}.{accelerator}.json"),
    log:
        results("logs/environments/{stack}.{accelerator}.log"),
    params:
        prefix=".envs/{stack}.{accelerator}",
    shell:      # under kbench.heartbeat: uv's output in the log as it installs, a line on the terminal every 25 s
        "python -m kbench.heartbeat --job 'venv {wildcards.stack}.{wildcards.accelerator}' --log {log} -- "
        "python -m kbench.stacks.envs venv --stack {wildcards.stack} --accelerator {wildcards.accelerator} "
        "--lock {input.lock} --prefix {params.prefix} --record {output.record}"


rule preinstalled_environment:
    """An interpreter the host already has (config preinstalled_python), recorded as found: its packages and their
    drift from the stack's lock. Cells then record that drift instead of failing on it."""
    input:
        lock=lock_path("{stack}", "{accelerator}"),
    output:
        record=results("preinstalled/{stack}.{accelerator}.json"),
    log:
        results("logs/preinstalled/{stack}.{accelerator}.log"),
    params:
        python=config["preinstalled_python"],
    shell:
        "python -m kbench.stacks.envs preinstalled --stack {wildcards.stack} --accelerator {wildcards.accelerator} "
        "--lock {input.lock} --python {params.python} --record {output.record} > {log} 2>&1"
