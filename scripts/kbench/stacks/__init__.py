"""stacks: the lock -> image (or venv) half of the DAG: hash-locked lock files and their checks (lockcheck), venvs and
preinstalled interpreters (envs), podman images built reproducibly from a lock (images), and what moves with what
between two locks (lockgroups).

May import: ground, models, gpu."""
