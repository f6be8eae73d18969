"""Container images, built with podman: a Debian base made here (no registry needed) or pinned by digest, and one image
per stack and accelerator from containers/Containerfile and the stack's lock.

    python -m kbench.stacks.images base  --source debian|REF@sha256:... --packages P,Q --epoch N --record R
    python -m kbench.stacks.images stack --stack S --accelerator A --base-record B --epoch N --uv-cache DIR --record R
    python -m kbench.stacks.images export --record R --format oci-archive|docker-archive --out FILE
    python -m kbench.stacks.images docker-load --image-record R --archive FILE --record OUT      (on a Docker host)
    python -m kbench.stacks.images sif --image-record R --archive FILE --sif SIF --record OUT     (on an Apptainer host)

A build's output (podman's steps, what each step prints, mmdebstrap's progress) goes to stdout as it comes: the rules
run it under kbench.heartbeat, which writes it into the job's log and says on the terminal which step is running. The
recipe is not changed for it (its text is part of every image ID): the lock's install is the step that runs longest,
quiet inside.

Reproducible: fixed SOURCE_DATE_EPOCH and --timestamp, so the same base, lock and recipe give the same image ID,
however the builds are scheduled: podman builds on one host run one at a time (a host-wide lock), because buildah
commits each intermediate step under a random `<id>-tmp` name and the next step records its base by the image's
first name; every stack's first steps give the same intermediate image (same base, same bootstrap lock), so a build
running beside another could write the other's temporary name into its history, and so into its image ID. An image
whose history still names a `-tmp` intermediate is refused. The tag derives from the lock's digest, and the image
carries what it was built from as labels (lock, recipe, base, epoch): an image that exists with the same labels is
recorded again without a build and without waiting for the build lock. Records are what cells depend on (and what
their JSON names).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kbench.machine import host, environment_records
from kbench.machine.lockpaths import lock_name, lock_path
from kbench.machine.host import REPO
from kbench.stacks import envs

RECIPE = REPO / "containers" / "Containerfile"
DEBIAN_SUITE = "bookworm"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BUILD_LOCK = Path("/tmp/kbench-podman-build.lock")


class UnreproducibleImage(RuntimeError):
    """An image whose history names another build's temporary intermediate: its ID depends on scheduling."""


def one_build_at_a_time(lock: Path = BUILD_LOCK):
    """Every podman build and import on this host, one after the other (whatever Snakemake runs in parallel, and
    whichever Snakemake process asks)."""
    return host.file_lock(lock)


def temporary_names(image: str) -> list[str]:
    """The history entries of an image that name a buildah intermediate (`<random>-tmp`)."""
    history = json.loads(podman("image", "inspect", "--format", "{{json .History}}", image, capture=True)) or []
    return [entry.get("comment", "") for entry in history if "-tmp" in entry.get("comment", "")]


def check_reproducible(image: str) -> None:
    names = temporary_names(image)
    if names:
        raise UnreproducibleImage(f"{image}: its history names a temporary intermediate of another build "
                                  f"({names[0]!r}), so its ID depends on what was built beside it; rebuild it "
                                  "(podman rmi, then the same command)")


def podman(*args: str, capture: bool = False) -> str:
    proc = subprocess.run(["podman", *args], env=host.client_env("podman"), text=True, check=True,
                          stdout=subprocess.PIPE if capture else None)
    return proc.stdout.strip() if capture else ""


def inspect(image: str) -> dict:
    info = json.loads(podman("image", "inspect", image, capture=True))[0]
    return {"id": "sha256:" + info["Id"].removeprefix("sha256:"), "digest": info.get("Digest"), "size_bytes": info["Size"]}


# mmdebstrap copies the host's apt sources (its mirror) into the image; nothing in the image uses apt afterwards, so they
# go: no host-specific file may reach an image whose ID should be the same on every machine.
HOST_SPECIFIC = "rm -f \"$1\"/etc/apt/sources.list \"$1\"/etc/apt/sources.list.d/*"


def build_base(source: str, epoch: int, record: Path, packages: list[str]) -> dict:
    """packages (config.yaml containers.base_packages): the Debian packages of a base built here (source "debian");
    unused for an image pinned by digest. The record holds the full package manifest (name=version of every
    installed Debian package) and, where an earlier build left one, what changed since (history beside the record)."""
    started = time.monotonic()
    if source == "debian":
        # mmdebstrap uses the host's apt sources, so no mirror is named here; SOURCE_DATE_EPOCH fixes file times.
        image = f"localhost/kbench/base:{DEBIAN_SUITE}"
        with tempfile.TemporaryDirectory() as tmp:
            rootfs = Path(tmp) / "rootfs.tar"
            subprocess.run(["mmdebstrap", "--variant=apt", f"--include={','.join(packages)}",
                            f"--customize-hook={HOST_SPECIFIC}", DEBIAN_SUITE, str(rootfs)], check=True,
                           env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)})
            os.utime(rootfs, (epoch, epoch))
            with one_build_at_a_time():
                podman("import", "--quiet", str(rootfs), image, capture=True)
    else:
        if "@sha256:" not in source:
            raise ValueError(f"containers.base {source!r}: use 'debian' or an image pinned by digest (NAME@sha256:...)")
        image = source
        podman("pull", source)
    manifest = podman("run", "--rm", "--network", "none", *host.ulimit_args(), image, "dpkg-query", "-W",
                      "-f=${Package}=${Version}\n", capture=True).splitlines()
    info = {"kind": "base", "image": image, "source": source, "epoch": epoch, **inspect(image),
            "packages": packages if source == "debian" else None, "manifest": sorted(manifest),
            "manifest_sha256": "sha256:" + hashlib.sha256("\n".join(sorted(manifest)).encode()).hexdigest(),
            "build_seconds": round(time.monotonic() - started, 1)}
    info["changed_since_last_build"] = _remember(record.with_name("base.history.json"), info)
    if info["changed_since_last_build"]:
        print("base: Debian packages changed since the last build (a new base ID, so every stack image and cell "
              "follows): " + "; ".join(info["changed_since_last_build"]))
    environment_records.write(record, info)
    return info


def manifest_changes(old: list[str], new: list[str]) -> list[str]:
    """name: old -> new, +name=version (added), -name=version (removed)."""
    before, after = (dict(line.split("=", 1) for line in lines) for lines in (old, new))
    return ([f"{n}: {before[n]} -> {after[n]}" for n in sorted(before.keys() & after.keys()) if before[n] != after[n]]
            + [f"+{n}={after[n]}" for n in sorted(after.keys() - before.keys())]
            + [f"-{n}={before[n]}" for n in sorted(before.keys() - after.keys())])


def _remember(history_path: Path, info: dict) -> list[str] | None:
    """Append this build to the base's history (kept beside its record: Snakemake deletes the record itself before
    a rebuild) and return how its manifest differs from the last build's; None for the first build."""
    history = environment_records.read(history_path) if history_path.exists() else []
    changes = manifest_changes(history[-1]["manifest"], info["manifest"]) if history else None
    history.append({k: info[k] for k in ("id", "manifest_sha256", "manifest")} | {"built_utc": _utc_now()})
    environment_records.write(history_path, history)
    return changes


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def stack_tag(stack: str, accelerator: str, lock_sha256: str) -> str:
    return f"localhost/kbench/{stack}:{accelerator}-{lock_sha256.removeprefix('sha256:')[:16]}"


def build_labels(lock_sha256: str, base_id: str, epoch: int) -> dict[str, str]:
    """What a stack image is made of: the same labels on an existing image mean the same build inputs."""
    return {"kbench.lock_sha256": lock_sha256, "kbench.recipe_sha256": envs.sha256_file(RECIPE),
            "kbench.base_id": base_id, "kbench.epoch": str(epoch)}


def labels_of(image: str) -> dict[str, str] | None:
    """The image's labels, or None where podman has no such image."""
    proc = subprocess.run(["podman", "image", "inspect", "--format", "{{json .Labels}}", image],
                          env=host.client_env("podman"), capture_output=True, text=True)
    return (json.loads(proc.stdout) or {}) if proc.returncode == 0 else None


def build_command(stack: str, accelerator: str, base_id: str, epoch: int, uv_cache: Path, tag: str,
                  no_cache: bool = False, context: Path = REPO / "envs", labels: dict[str, str] | None = None
                  ) -> list[str]:
    """context: the folder the recipe copies the locks from (envs/, or one holding another lock under the stack's
    name)."""
    return ["build", *(["--no-cache"] if no_cache else []), "--network", "host", "--timestamp", str(epoch),
            *(f"--label={key}={value}" for key, value in (labels or {}).items()), "--file", str(RECIPE),
            "--build-arg", f"BASE_IMAGE={base_id}", "--build-arg", f"STACK={stack}",
            "--build-arg", f"ACCELERATOR={accelerator}", "--build-arg", f"SOURCE_DATE_EPOCH={epoch}",
            # PyPI through the host's trust store and a shared download cache, during the build only
            f"--volume={HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro", f"--volume={uv_cache}:/uvcache",
            *host.ulimit_args(), "--tag", tag, str(context)]


def build_stack(stack: str, accelerator: str, base_record: Path, epoch: int, uv_cache: Path, record: Path,
                no_cache: bool = False, tag: str | None = None, lock: Path | None = None) -> dict:
    """tag: default derived from the lock's digest; the image benchmark passes its own so it never replaces ours.
    lock: another lock of the stack than envs/<stack>.<accelerator>.lock (kbench.lifecycle.bisect's steps between two locks):
    the build context is then a temporary folder holding it under the recipe's name beside envs/bootstrap.lock, so
    the same lock gives the same image whichever folder it came from."""
    lock = lock or lock_path(stack, accelerator, REPO)
    lock_sha = envs.sha256_file(lock)
    base = environment_records.read(base_record)
    tag = tag or stack_tag(stack, accelerator, lock_sha)
    labels = build_labels(lock_sha, base["id"], epoch)
    started = time.monotonic()
    # the fast path: this image exists, built from the same inputs (no build, so no wait behind another stack's)
    if no_cache or labels_of(tag) != labels:
        uv_cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp, one_build_at_a_time():
            context = REPO / "envs"
            if lock.resolve() != (context / lock_name(stack, accelerator)).resolve():
                context = Path(tmp)
                for source, name in ((REPO / "envs" / "bootstrap.lock", "bootstrap.lock"),
                                     (lock, lock_name(stack, accelerator))):
                    (context / name).write_bytes(source.read_bytes())
                    (context / name).chmod(0o644)       # as a checkout's files: COPY keeps the mode
            # its steps and their output on this process's stdout as they come (the job's log, kbench.heartbeat)
            podman(*build_command(stack, accelerator, base["id"], epoch, uv_cache.resolve(), tag, no_cache, context,
                                  labels))
    check_reproducible(tag)
    shown = lock.resolve().relative_to(REPO) if lock.resolve().is_relative_to(REPO) else lock.resolve()
    info = {"kind": "image", "stack": stack, "accelerator": accelerator, "image": tag, **inspect(tag),
            "lock": str(shown), "lock_sha256": lock_sha, "recipe_sha256": envs.sha256_file(RECIPE),
            "base_id": base["id"], "epoch": epoch, "build_seconds": round(time.monotonic() - started, 1)}
    environment_records.write(record, info)
    return info


def export(record: Path, fmt: str, out: Path) -> None:
    """An archive to carry the image to a host without a registry (podman load / docker load / apptainer build)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    podman("save", "--format", fmt, "--output", str(out), environment_records.read(record)["image"])


def docker_load_command(archive: Path) -> list[str]:
    return ["docker", "load", "--quiet", "--input", str(archive)]


def sif_command(archive: Path, sif: Path) -> list[str]:
    return ["apptainer", "build", "--force", str(sif), f"oci-archive://{archive}"]


def docker_load(image_record: Path, archive: Path, record: Path) -> dict:
    """Load the podman-built image into Docker; its image ID (the config digest) must be the one podman recorded."""
    source = environment_records.read(image_record)
    subprocess.run(docker_load_command(archive), check=True)
    loaded = "sha256:" + subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", source["image"]],
                                        capture_output=True, text=True, check=True).stdout.strip().removeprefix("sha256:")
    if loaded != source["id"]:
        raise RuntimeError(f"docker loaded {loaded} from {archive}, but the image record says {source['id']}")
    info = {**source, "kind": "docker", "archive": str(archive)}
    environment_records.write(record, info)
    return info


def build_sif(image_record: Path, archive: Path, sif: Path, record: Path) -> dict:
    source = environment_records.read(image_record)
    subprocess.run(sif_command(archive, sif), check=True)
    info = {**source, "kind": "sif", "sif": str(sif.resolve()), "sif_sha256": envs.sha256_file(sif)}
    environment_records.write(record, info)
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    base = sub.add_parser("base")
    base.add_argument("--source", required=True)
    base.add_argument("--packages", required=True, help="comma-separated Debian packages")
    stack = sub.add_parser("stack")
    stack.add_argument("--stack", required=True)
    stack.add_argument("--accelerator", required=True)
    stack.add_argument("--base-record", required=True, type=Path)
    stack.add_argument("--uv-cache", required=True, type=Path)
    for p in (base, stack):
        p.add_argument("--epoch", required=True, type=int)
        p.add_argument("--record", required=True, type=Path)
    exp = sub.add_parser("export")
    exp.add_argument("--record", required=True, type=Path)
    exp.add_argument("--format", required=True, choices=["oci-archive", "docker-archive"])
    exp.add_argument("--out", required=True, type=Path)
    for name in ("docker-load", "sif"):
        p = sub.add_parser(name)
        p.add_argument("--image-record", required=True, type=Path)
        p.add_argument("--archive", required=True, type=Path)
        p.add_argument("--record", required=True, type=Path)
        if name == "sif":
            p.add_argument("--sif", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.command == "docker-load":
        docker_load(args.image_record, args.archive, args.record)
    elif args.command == "sif":
        build_sif(args.image_record, args.archive, args.sif, args.record)
    elif args.command == "base":
        build_base(args.source, args.epoch, args.record, args.packages.split(","))
    elif args.command == "stack":
        build_stack(args.stack, args.accelerator, args.base_record, args.epoch, args.uv_cache, args.record)
    else:
        export(args.record, args.format, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
