#!/usr/bin/env python3
"""Regenerate test/data/rosdep_keys_<distro>.txt: the rosdep keys `rosdep install` resolves on a ROS distro's
Ubuntu release, from a ros/rosdistro git repository (a checkout or a bare mirror; read with `git show`).

    scripts/rosdep_keys.py /path/to/rosdistro                      # HEAD; humble, jazzy, kilted
    scripts/rosdep_keys.py /path/to/rosdistro --commit abc123 --distros humble

A key is what a ROS user's default rosdep sources define (rosdep/sources.list.d/20-default.list plus the
rosdistro index):
* every package released in `<distro>/distribution.yaml` (a repository with a `release` `version`; its
  `packages`, or the repository name when it lists none): rosdep installs ros-<distro>-<name>;
* every key of rosdep/base.yaml, python.yaml and ruby.yaml with a rule for the distro's Ubuntu release
  (`release_platforms: ubuntu` of distribution.yaml: jammy for Humble, noble for Jazzy and Kilted), i.e. an
  `ubuntu` entry that is a package list, an installer (`pip: ...`), or a mapping whose `<codename>` or `'*'`
  entry is not null. (osx-homebrew.yaml, also in the default list, only defines keys for macOS.)

Only key names are written, one a line, sorted, after a header naming the repository commit.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import yaml

DISTROS = ("humble", "jazzy", "kilted")
RULE_FILES = ("rosdep/base.yaml", "rosdep/python.yaml", "rosdep/ruby.yaml")
DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "test" / "data"


def git_show(repo: Path, commit: str, path: str) -> str:
    """The text of `path` at `commit` in the git repository `repo`."""
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def released_packages(distribution: dict) -> set[str]:
    """Package names released in a distribution.yaml (REP 143): repositories with a release version."""
    names: set[str] = set()
    for repo_name, repo in (distribution.get("repositories") or {}).items():
        release = (repo or {}).get("release") or {}
        if release.get("version"):
            names.update(release.get("packages") or [repo_name])
    return names


def has_ubuntu_rule(rule: object, codename: str) -> bool:
    """Whether a rosdep rule (one key's value in a rules YAML) installs something on Ubuntu `codename`."""
    if not isinstance(rule, dict) or rule.get("ubuntu") is None:
        return False
    ubuntu = rule["ubuntu"]
    if isinstance(ubuntu, list):
        return bool(ubuntu)
    if isinstance(ubuntu, dict):
        if codename in ubuntu or "*" in ubuntu:
            value = ubuntu.get(codename, ubuntu.get("*"))
            return value is not None  # null: "not available on this release"
        return any(
            installer in ubuntu for installer in ("apt", "pip", "source")
        )  # installer for every release
    return False


def distro_keys(repo: Path, commit: str, distro: str) -> tuple[set[str], str]:
    """The keys of `distro` and the Ubuntu codename they were resolved for."""
    distribution = yaml.safe_load(git_show(repo, commit, f"{distro}/distribution.yaml"))
    codenames = (distribution.get("release_platforms") or {}).get("ubuntu") or []
    if len(codenames) != 1:
        raise SystemExit(f"{distro}: expected one Ubuntu release in release_platforms, got {codenames}")
    keys = released_packages(distribution)
    for path in RULE_FILES:
        rules = yaml.safe_load(git_show(repo, commit, path)) or {}
        keys.update(key for key, rule in rules.items() if has_ubuntu_rule(rule, codenames[0]))
    return keys, codenames[0]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rosdistro", type=Path, help="ros/rosdistro git repository (checkout or bare)")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--distros", nargs="+", default=list(DISTROS))
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT, help="folder of the key files")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(args.rosdistro), "rev-parse", args.commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    date = subprocess.run(
        ["git", "-C", str(args.rosdistro), "show", "-s", "--format=%cs", commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    args.output.mkdir(parents=True, exist_ok=True)
    for distro in args.distros:
        keys, codename = distro_keys(args.rosdistro, commit, distro)
        path = args.output / f"rosdep_keys_{distro}.txt"
        header = (
            f"# rosdep keys of ROS 2 {distro} resolvable on Ubuntu {codename}, from ros/rosdistro commit "
            f"{commit} ({date}):\n# packages released in {distro}/distribution.yaml + keys of "
            f"{', '.join(RULE_FILES)} with an Ubuntu {codename} rule.\n"
            "# Regenerate: scripts/rosdep_keys.py <rosdistro repository>\n"
        )
        path.write_text(header + "".join(f"{key}\n" for key in sorted(keys)))
        print(f"{path}: {len(keys)} keys (Ubuntu {codename})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
