#!/usr/bin/env python3
"""Print the release version after checking that every place that states it agrees.

One version names a release: the package (pyproject.toml, llmscale.__version__), the chart
(Chart.yaml version and appVersion), the image tag (the chart's appVersion, the Artifact Hub image
annotation, the kustomize production overlay's newTag and the rendered base). With ``--tag vX.Y.Z``
(the release workflow passes the pushed tag) the tag must name the same version. Exit 1 and one
line per disagreement on stderr when they differ.

Usage: tools/release-version.py [--tag TAG]
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "ghcr.io/llmscale/llmscale"


def stated_versions(root: Path = ROOT) -> dict[str, str]:
    """Every place a release's version is written, as {where: version}."""
    found: dict[str, str] = {}
    found["pyproject.toml [project].version"] = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "version"]
    init = (root / "operator/llmscale/__init__.py").read_text()
    m = re.search(r'^__version__ = "([^"]+)"', init, re.M)
    found["operator/llmscale/__init__.py __version__"] = m.group(1) if m else "<missing>"
    chart = yaml.safe_load((root / "charts/llmscale/Chart.yaml").read_text())
    found["Chart.yaml version"] = str(chart["version"])
    found["Chart.yaml appVersion"] = str(chart["appVersion"])
    for image in yaml.safe_load(chart["annotations"]["artifacthub.io/images"]):
        if image["image"].startswith(IMAGE + ":"):
            found["Chart.yaml artifacthub.io/images tag"] = image["image"].rsplit(":", 1)[1]
    overlay = yaml.safe_load((root / "manifests/overlays/production/kustomization.yaml").read_text())
    for image in overlay.get("images", []):
        if image["name"] == IMAGE:
            found["manifests/overlays/production/kustomization.yaml newTag"] = str(image.get("newTag", "<missing>"))
    base = (root / "manifests/base/llmscale.yaml").read_text()
    for tag in sorted(set(re.findall(re.escape(IMAGE) + r':([^"\s]+)', base))):
        found[f"manifests/base/llmscale.yaml image {tag}"] = tag
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", help="the release tag (vX.Y.Z) that must name the same version")
    args = parser.parse_args(argv)
    found = stated_versions()
    version = found["pyproject.toml [project].version"]
    wrong = [f"{where}: {v} (pyproject.toml says {version})" for where, v in found.items() if v != version]
    if args.tag is not None and args.tag != f"v{version}":
        wrong.append(f"tag {args.tag}: expected v{version}")
    for line in wrong:
        print(f"release-version: {line}", file=sys.stderr)
    if wrong:
        return 1
    print(version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
