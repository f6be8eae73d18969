"""The one table of runtimes (kbench.machine.runtimes): a name is resolved once, an unknown one is refused with its name and
the allowed ones, and every list of runtimes (the config check's, where environment records live, what the launcher
starts) is read from the table."""
import copy
import csv
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import CONFIG, REPO
from kbench.machine import environment_records, runtimes
from kbench.plan import matrix
from kbench.run import launch


def test_an_unknown_runtime_is_refused_with_its_name_and_the_allowed_ones():
    with pytest.raises(ValueError) as refused:
        runtimes.resolve("lxc")
    assert str(refused.value) == ("runtime 'lxc' is not supported; allowed: host, preinstalled, podman, docker, "
                                  "apptainer")


def test_each_name_resolves_to_its_own_entry():
    assert [runtimes.resolve(name).name for name in runtimes.RUNTIMES] == list(runtimes.RUNTIMES)


def allowed_by_the_config_check() -> list[str]:
    with pytest.raises(matrix.ConfigError) as refused:
        matrix.check_references({**copy.deepcopy(CONFIG), "runtime": "lxc"})
    return str(refused.value).split("allowed: ", 1)[1].split(", ")


def test_the_table_is_the_only_list_of_runtimes(monkeypatch):
    """The config check allows auto and the table's runtimes; a runtime added to the table alone is allowed by it, has
    a place for its environment records and a command line, and an unknown one is refused in each place alike."""
    assert allowed_by_the_config_check() == ["auto", *runtimes.RUNTIMES]
    added = replace(runtimes.RUNTIMES["host"], name="added", records="added/{stack}.{accelerator}.json")
    monkeypatch.setitem(runtimes.RUNTIMES, "added", added)
    assert allowed_by_the_config_check() == ["auto", "host", "preinstalled", "podman", "docker", "apptainer", "added"]
    matrix.check_references({**copy.deepcopy(CONFIG), "runtime": "added"})
    assert environment_records.path("added", "keras3-jax", "cpu") == "added/keras3-jax.cpu.json"
    assert launch.command("added", {"prefix": "/envs/x"}, Path("out.json"))[0] == "/envs/x/bin/python"
    for refuse in (lambda: environment_records.path("lxc", "keras3-jax", "cpu"), lambda: launch.command("lxc", {}, Path("o")),
                   lambda: launch.process_env("lxc")):
        with pytest.raises(ValueError, match="runtime 'lxc' is not supported; allowed: host, .*, apptainer, added$"):
            refuse()


def test_every_runtimes_environment_records_are_where_a_rule_writes_them():
    """The rules name the record each one writes; a cell depends on the path its runtime's entry names (environment_records.path):
    the two must be the same place, and no two runtimes share one."""
    rules = "".join(path.read_text() for path in sorted((REPO / "rules").glob("*.smk")))
    for runtime in runtimes.RUNTIMES.values():
        assert f'record=results("{runtime.records}")' in rules, runtime.name
    assert len({runtime.records for runtime in runtimes.RUNTIMES.values()}) == len(runtimes.RUNTIMES)
    assert environment_records.path("apptainer", "keras3-jax", "gpu") == "images/keras3-jax.gpu.sif.json"


def docker_gpu_request(value: str) -> dict[str, list[str]]:
    """What docker makes of a --gpus value (its CLI, opts/gpus.go): one CSV record of key=value fields, a device
    field's value a comma-separated list; a field that is not key=value is refused ("unexpected key")."""
    request = {}
    for field in next(csv.reader([value])):
        key, equals, wanted = field.partition("=")
        if not equals or key not in ("count", "capabilities", "driver", "device", "options"):
            raise ValueError(f"docker: unexpected key '{key}' in '{field}'")
        request[key] = wanted.split(",")
    return request


@pytest.mark.parametrize("gpus", [["GPU-aa"], ["GPU-aa", "GPU-bb"], ["1", "3"]])
def test_docker_gets_every_gpu_of_a_cell_as_one_device_request(gpus):
    """docker run --gpus device=1,3 reads as two fields, device=1 and a stray 3, and docker refuses it: more than one
    GPU goes in CSV quotes (as `--gpus '"device=1,3"'` in a shell), one GPU alike."""
    argv = runtimes.resolve("docker").command({"id": "sha256:aa"}, Path("/r/cell.json"),
                                              runtimes.Options(gpus=gpus), gpu=True)
    assert argv.count("--gpus") == 1
    assert docker_gpu_request(argv[argv.index("--gpus") + 1]) == {"device": gpus}
    every = runtimes.resolve("docker").command({"id": "sha256:aa"}, Path("/r/cell.json"), runtimes.Options(), gpu=True)
    assert every[every.index("--gpus") + 1] == "all"
