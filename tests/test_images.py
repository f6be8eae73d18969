"""Image builds give one ID however they are scheduled: podman builds run one at a time on a host, and an image whose
history names another build's temporary intermediate is refused."""
import json
import threading
import time

import pytest

from kbench.stacks import images


def fake_history(monkeypatch, comments):
    def podman(*args, capture=False):
        assert args[:2] == ("image", "inspect")
        return json.dumps([{"comment": c} for c in comments])
    monkeypatch.setattr(images, "podman", podman)


def test_an_image_whose_history_names_a_temporary_intermediate_is_refused(monkeypatch):
    fake_history(monkeypatch, ["imported from tarball", "FROM localhost/kbench/base:bookworm",
                               "FROM docker.io/library/3f1c9a0b2e7d4c55-tmp:latest", "FROM 1e1112fe998c"])
    with pytest.raises(images.UnreproducibleImage, match="3f1c9a0b2e7d4c55-tmp:latest"):
        images.check_reproducible("localhost/kbench/x:cpu-0")


def test_an_image_whose_history_names_only_ids_and_names_is_accepted(monkeypatch):
    fake_history(monkeypatch, ["imported from tarball", "FROM localhost/kbench/base:bookworm", "FROM 960f83c2aac9"])
    images.check_reproducible("localhost/kbench/x:cpu-0")


def test_builds_on_one_host_run_one_at_a_time(tmp_path):
    lock, spans = tmp_path / "build.lock", []

    def build(name):
        with images.one_build_at_a_time(lock):
            start = time.monotonic()
            time.sleep(0.3)
            spans.append((start, time.monotonic()))
    workers = [threading.Thread(target=build, args=(i,)) for i in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_a_stack_build_holds_the_hosts_build_lock_and_refuses_a_leaked_intermediate(monkeypatch, tmp_path):
    """build_stack itself (podman faked): the build runs while the host-wide build lock is held, and an image whose
    history names another build's `-tmp` intermediate fails the build instead of getting a record."""
    lock = tmp_path / "build.lock"
    host_lock = images.one_build_at_a_time
    monkeypatch.setattr(images, "one_build_at_a_time", lambda: host_lock(lock))
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"id": "sha256:" + "b" * 64}))
    held, history = [], ["FROM localhost/kbench/base:bookworm"]

    def podman(*args, capture=False):
        if args[0] == "build":
            import fcntl
            with open(lock) as probe:          # taken by someone: a non-blocking flock from here fails
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held.append(False)
                except BlockingIOError:
                    held.append(True)
            return ""
        if args[:2] == ("image", "inspect") and "{{json .History}}" in args:
            return json.dumps([{"comment": c} for c in history])
        return json.dumps([{"Id": "c" * 64, "Digest": None, "Size": 1}])
    monkeypatch.setattr(images, "podman", podman)
    monkeypatch.setattr(images, "labels_of", lambda image: None)        # no such image yet
    info = images.build_stack("synthetic", "cpu", base, 0, tmp_path / "uv", tmp_path / "synthetic.json")
    assert held == [True] and info["id"] == "sha256:" + "c" * 64 and (tmp_path / "synthetic.json").exists()
    history.append("FROM docker.io/library/0f3e2d1c-tmp:latest")
    with pytest.raises(images.UnreproducibleImage):
        images.build_stack("synthetic", "cpu", base, 0, tmp_path / "uv", tmp_path / "again.json")
    assert not (tmp_path / "again.json").exists()


def test_an_image_built_from_the_same_inputs_is_recorded_without_a_build_or_the_lock(monkeypatch, tmp_path):
    """The fast path: the tag exists and its labels are this build's (lock, recipe, base, epoch): recorded again with
    no build and without waiting for the host's build lock; labels from another base mean a build, under the lock."""
    lock = tmp_path / "build.lock"
    host_lock = images.one_build_at_a_time
    monkeypatch.setattr(images, "one_build_at_a_time", lambda: host_lock(lock))
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"id": "sha256:" + "b" * 64}))
    builds = []

    def podman(*args, capture=False):
        if args[0] == "build":
            builds.append(args)
            return ""
        if "{{json .History}}" in args:
            return "[]"
        return json.dumps([{"Id": "c" * 64, "Digest": None, "Size": 1}])
    monkeypatch.setattr(images, "podman", podman)
    lock_sha = images.envs.sha256_file(images.REPO / "envs" / "synthetic.cpu.lock")
    existing = images.build_labels(lock_sha, "sha256:" + "b" * 64, 0)
    monkeypatch.setattr(images, "labels_of", lambda image: existing)
    done = []
    with images.one_build_at_a_time():          # another stack's build holds the lock: the fast path does not wait
        worker = threading.Thread(target=lambda: done.append(images.build_stack(
            "synthetic", "cpu", base, 0, tmp_path / "uv", tmp_path / "synthetic.json")))
        worker.start()
        worker.join(timeout=5)
        assert done, "the build of an image that exists waited for the build lock"
    assert builds == [] and done[0]["lock_sha256"] == lock_sha and (tmp_path / "synthetic.json").exists()

    monkeypatch.setattr(images, "labels_of", lambda image: {**existing, "kbench.base_id": "sha256:" + "0" * 64})
    images.build_stack("synthetic", "cpu", base, 0, tmp_path / "uv", tmp_path / "rebuilt.json")
    assert len(builds) == 1 and f"--label=kbench.base_id=sha256:{'b' * 64}" in builds[0]
