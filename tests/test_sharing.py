"""Which jobs share a host's cores: a timed cell takes every core (nothing runs beside it), an equivalence job on a
CPU host half of them (two side by side: it reads no clock), on a GPU host a cell's share. Planned in process."""
import pytest

from conftest import REPO
from dag import plan


@pytest.fixture
def workflow(tmp_path):
    (tmp_path / "config.yaml").symlink_to(REPO / "config.yaml")
    for shared in ("envs", "scripts", "containers", "schemas"):
        (tmp_path / shared).symlink_to(REPO / shared)
    return tmp_path


def threads_by_rule(folder, cores: int, accelerator: str) -> dict[str, set[int]]:
    planned = plan("-n", "--forceall", "--cores", str(cores), "--config", "suite=tiny", f"accelerator={accelerator}",
                   "runtime=podman", "models=[bert]", "frameworks=[keras3-jax,native-torch-compiled]",
                   cwd=folder, equivalence=True)
    assert planned.ok, planned.error
    found: dict[str, set[int]] = {}
    for rule, outputs, _ in (job for job in planned.jobs if job[1]):
        found.setdefault(rule, set()).add(planned.threads[outputs[0]])
    return found


@pytest.mark.parametrize("cores", [2, 16])
def test_on_a_cpu_host_two_equivalence_jobs_share_it_and_a_timed_cell_has_it_alone(workflow, cores):
    threads = threads_by_rule(workflow, cores, "cpu")
    assert threads["cell"] == threads["warm_cell"] == {cores}
    assert threads["equivalence"] == threads["equivalence_reference"] == {cores // 2}


def test_on_a_gpu_host_an_equivalence_job_takes_a_cells_share(workflow):
    threads = threads_by_rule(workflow, 16, "gpu")
    assert threads["equivalence"] == threads["equivalence_reference"] == threads["cell"] == {16}


@pytest.mark.parametrize("threads, cpus, env, omp", [
    (1, 2, {}, "1"),                            # beside another on 2 cores: one OpenMP thread
    (2, 4, {"KERAS_BACKEND": "torch"}, "2"),
    (2, 2, {}, None),                           # every core: left as it is (OpenMP's own default)
    (4, 2, {}, None),
    (1, 2, {"OMP_NUM_THREADS": "3"}, "3"),      # the config's own setting stays
])
def test_an_equivalence_job_beside_another_holds_openmp_to_its_share(threads, cpus, env, omp):
    from kbench.run import launch
    job = {"job": "equivalence", "env": env}
    shared = launch.with_share_of_cores(job, threads, cpus)
    assert shared["env"].get("OMP_NUM_THREADS") == omp and job["env"] == env
    assert {k: v for k, v in shared["env"].items() if k != "OMP_NUM_THREADS"} == {
        k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}
