"""stacks: the lock -> image (or venv) half of the DAG: hash-locked lock files and their checks (lockcheck), venvs and
preinstalled interpreters (envs), podman images built reproducibly from a lock (images), what moves with what
between two locks (lockgroups), and whether a plan's images and results fit on disk before the first build (disk).
Where a stack's lock lives (lock_path, lock_name, lock_id, locks) is kbench.machine.lockpaths, re-exported here.

May import: ground, models, gpu."""

from kbench.machine.lockpaths import lock_id, lock_name, lock_path, locks  # noqa: F401  (re-exported: where a stack's lock is)
