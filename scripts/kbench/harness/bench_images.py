"""Image build times, reproducibility and per-cell container overhead (a benchmark, not a test).

    .venv/bin/kbench bench-images [--stack keras3-jax --accelerator cpu --runs 15 --base]

cold build: empty uv cache, no image, no layer cache; warm build: the same without the image and layer cache, the uv
download cache kept. Both must give the same image ID (reproducible build). --base also rebuilds the Debian base twice and compares its IDs. Container overhead:
`podman run --rm --network none IMAGE python -c pass` against the stack's host venv `python -c pass`, median of
--runs each: what a container adds to every cell, outside its step timing (target <= 0.3 s).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kbench.machine import host, environment_records
from kbench.machine.host import REPO
from kbench.stacks import images


def wall(argv, env=None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def remove(image: str) -> None:
    subprocess.run(["podman", "rmi", "--force", image], env=host.client_env("podman"), capture_output=True)


def main(argv=None, parser: argparse.ArgumentParser | None = None) -> int:
    """parser: the one to fill (kbench.frontdoor.cli hands `kbench <command>`'s, with its one-line description)."""
    parser = parser or argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="keras3-jax")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--epoch", type=int, default=1735689600)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--base", action="store_true", help="also rebuild the base twice")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kbench-images-"))

    base_ids = []
    base_image = f"localhost/kbench/base:{images.DEBIAN_SUITE}"
    for attempt in range(2 if args.base else 0):
        remove(base_image)
        packages = yaml.safe_load((REPO / "config.yaml").read_text())["containers"]["base_packages"]
        base = images.build_base("debian", args.epoch, work / "base.json", packages)
        base_ids.append(base["id"])
        print(f"base build {attempt + 1}: {base['build_seconds']} s, {base['size_bytes'] / 1e6:.0f} MB, {base['id']}")
    if not args.base:                           # reuse the base the pipeline built
        environment_records.write(work / "base.json", {"kind": "base", "image": base_image, **images.inspect(base_image)})

    # Own tags, so the images (and records) of the pipeline are never replaced by this benchmark.
    uv_cache = work / "uv-cache"                # empty for the cold build, filled by it for the warm one
    built = {}
    for kind in ("cold", "warm"):
        tag = f"localhost/kbench/bench-{args.stack}:{args.accelerator}-{kind}"
        remove(tag)
        built[kind] = r = images.build_stack(args.stack, args.accelerator, work / "base.json", args.epoch, uv_cache,
                                               work / f"{kind}.json", no_cache=True, tag=tag)
        print(f"{args.stack}.{args.accelerator} {kind} build: {r['build_seconds']} s, {r['size_bytes'] / 1e9:.2f} GB, "
              f"{r['id']} (lock {r['lock_sha256'][:19]})")
    same = built["cold"]["id"] == built["warm"]["id"]
    print(f"reproducible image ID across the two clean builds: {same}")
    if args.base:
        print(f"reproducible base ID across two builds: {base_ids[0] == base_ids[1]}")

    host_python = REPO / ".envs" / f"{args.stack}.{args.accelerator}" / "bin" / "python"
    podman = ["podman", "run", "--rm", "--network", "none", *host.ulimit_args(), built["warm"]["id"],
              "python", "-c", "pass"]
    podman_env = host.client_env("podman")
    wall(podman, podman_env)                    # first start pays the storage setup
    container = [wall(podman, podman_env) for _ in range(args.runs)]
    venv = [wall([str(host_python), "-c", "pass"]) for _ in range(args.runs)] if host_python.exists() else [0.0]
    overhead = statistics.median(container) - statistics.median(venv)
    print(f"start-up median of {args.runs}: podman {statistics.median(container):.3f} s, host venv "
          f"{statistics.median(venv):.3f} s; container overhead per cell {overhead:.3f} s (target <= 0.3 s)")
    return 0 if same and (not args.base or base_ids[0] == base_ids[1]) else 1


if __name__ == "__main__":
    sys.exit(main())
