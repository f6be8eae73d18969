"""stacks: the lock -> image (or venv) half of the DAG: hash-locked lock files and their checks (lockcheck), venvs and
preinstalled interpreters (envs), podman images built reproducibly from a lock (images), what moves with what
between two locks (lockgroups), and whether a plan's images and results fit on disk before the first build (disk).

May import: ground, models, gpu."""
