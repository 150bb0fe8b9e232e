"""The image's dependency pins (requirements/image.txt, `make requirements`) cover every runtime
dependency of pyproject.toml with an exact version and hashes, and the Dockerfile installs them."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from tests.deploy.helpers import ROOT

PINS_FILE = ROOT / "requirements" / "image.txt"


def pins() -> dict[str, tuple[Version, int]]:
    """name -> (pinned version, number of hashes), from the pip-compile output."""
    out: dict[str, tuple[Version, int]] = {}
    # One requirement per block: "name==version \" then "--hash=sha256:..." lines, then "# via" comments.
    for block in re.split(r"\n(?=\S)", PINS_FILE.read_text(encoding="utf-8")):
        line = block.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z0-9._-]+)==([^\s\\;]+)", line)
        assert m, f"not an exact pin: {line.splitlines()[0]!r}"
        out[canonicalize_name(m.group(1))] = (Version(m.group(2)), len(re.findall(r"--hash=sha256:[0-9a-f]{64}", block)))
    return out


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["dependencies"]]


def test_every_pin_is_an_exact_hashed_version() -> None:
    pinned = pins()
    assert len(pinned) > 20
    assert {name for name, (_, hashes) in pinned.items() if hashes == 0} == set()


@pytest.mark.parametrize("req", [pytest.param(r, id=r.name) for r in runtime_requirements()])
def test_every_runtime_dependency_is_pinned_within_its_range(req: Requirement) -> None:
    pinned = pins()
    name = canonicalize_name(req.name)
    assert name in pinned, f"{req.name} is not in requirements/image.txt: run `make requirements`"
    assert req.specifier.contains(pinned[name][0], prereleases=True), (
        f"{req.name} is pinned at {pinned[name][0]}, outside {req.specifier}: run `make requirements`")


def test_the_pins_are_closed_under_their_own_requirements() -> None:
    """Each pinned distribution installed here at its pinned version (so with the same metadata)
    needs nothing that is not pinned: what `pip check` verifies in the image build."""
    pinned = pins()
    env = {**default_environment(), "extra": ""}
    checked, missing = 0, []
    for name, (version, _) in pinned.items():
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Version(dist.version) != version:
            continue
        checked += 1
        for text in dist.requires or ():
            req = Requirement(text)
            if (req.marker is None or req.marker.evaluate(env)) and canonicalize_name(req.name) not in pinned:
                missing.append(f"{name} {version} needs {req}")
    assert missing == []
    assert checked >= len(runtime_requirements()) // 2, "too few pins installed at their version to check"


def test_the_dockerfile_installs_the_pins_with_their_hashes() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "COPY requirements/image.txt ./requirements/image.txt" in text
    assert "pip install --require-hashes --no-deps -r requirements/image.txt" in text
    assert "!requirements/image.txt" in (ROOT / ".dockerignore").read_text(encoding="utf-8")


def test_the_dockerfile_installs_llmscale_without_its_dependencies() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "pip install --no-deps ." in text
    assert "pip check" in text


def test_the_operator_image_carries_no_plotting_library() -> None:
    """matplotlib (and what it pulls in) is the plot extra: `simulate --plot` and `demo` plot, the
    operator never does."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert [Requirement(r).name for r in project["optional-dependencies"]["plot"]] == ["matplotlib"]
    assert not {"matplotlib", "pillow", "fonttools", "kiwisolver", "contourpy"} & set(pins())
