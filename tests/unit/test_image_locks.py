"""The image's dependency locks (locks/image-*.txt) against pyproject.toml, offline.

hack/verify-lock.sh (`make verify`) re-resolves the locks with uv against PyPI and diffs them; these
checks need no network: every requirement of pyproject.toml that the variant installs is pinned
in its lock at a version the requirement allows, every pin carries a hash, the extras that stay out
of the image (plots, test) are absent, and the Dockerfile installs from the lock with hashes
required.
"""

from __future__ import annotations

import pathlib
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The image's interpreter and platform (Debian bookworm, x86_64), for requirement markers.
IMAGE_ENV = {"python_version": "3.11", "python_full_version": "3.11.2", "sys_platform": "linux"}
IMAGE_ENV |= {"platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}


def pins(variant: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of locks/image-<variant>.txt."""
    text = (ROOT / "locks" / f"image-{variant}.txt").read_text()
    out: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", block)
        if head is None:
            continue
        name = canonicalize_name(head.group(1))
        assert name not in out, f"{name} pinned twice in image-{variant}.txt"
        out[name] = (head.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return out


def wanted(variant: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    reqs += [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    if variant == "cuda":
        reqs += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["torch"]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(IMAGE_ENV)]


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_every_requirement_is_pinned_within_its_bounds(variant: str) -> None:
    locked = pins(variant)
    for req in wanted(variant):
        name = canonicalize_name(req.name)
        assert name in locked, f"{req} is not in locks/image-{variant}.txt: run hack/lock.sh"
        version, _ = locked[name]
        assert req.specifier.contains(version, prereleases=True), (
            f"locks/image-{variant}.txt pins {name}=={version}, outside {req}: run hack/lock.sh"
        )


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_every_pin_has_hashes(variant: str) -> None:
    for name, (version, hashes) in pins(variant).items():
        assert hashes, f"{name}=={version} has no --hash in image-{variant}.txt"


def test_extras_outside_the_image_are_not_locked() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    for variant in ("cpu", "cuda"):
        locked = pins(variant)
        for req in extras["plots"]:
            assert canonicalize_name(Requirement(req).name) not in locked, (variant, req)
    assert "torch" not in pins("cpu")
    assert "torch" in pins("cuda")


def test_the_dockerfile_installs_the_lock_with_hashes() -> None:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    assert "COPY locks/ /tmp/locks/" in text
    (install,) = [line for line in text.splitlines() if "/tmp/locks/" in line and "pip" in line]
    assert '--requirement "/tmp/locks/image-${VARIANT}.txt"' in install
    for flag in ("--require-hashes", "--no-deps", "--only-binary :all:"):
        assert flag in install
    # Nothing else resolves dependencies: every other pip install is --no-deps.
    for line in text.splitlines():
        if "pip install" in line:
            assert "--no-deps" in line, line
