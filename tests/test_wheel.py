"""A wheel stands alone: what it ships (pyproject's package data) and what ``init`` writes
from it point only at what a wheel user has: a file the wheel ships, one ``init`` writes,
one a run writes, or a URL. The checkout's ``docs/``, ``tests/`` and ``bench/`` are not in a
wheel, so a shipped file naming them would send its reader nowhere. The last test builds the
wheel, installs it apart from the checkout and runs ``init`` and the README's judge-panel
example from an empty folder."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.resources import files
from pathlib import Path

import pytest

from image_project.cli.command import main
from image_project.config.defaults import EXAMPLE_PANEL, STARTER_FILES
from image_project.config.loading import LOCAL_CONFIG
from image_project.config.models import ImageConfig, PromptConfig

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "image_project"


def package_data() -> list[Path]:
    """The files pyproject's ``[tool.setuptools.package-data]`` ships, from the checkout."""
    table = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = []
    for package, patterns in table["tool"]["setuptools"]["package-data"].items():
        folder = REPO.joinpath(*package.split("."))
        for pattern in patterns:
            shipped += sorted(p for p in folder.glob(pattern) if p.is_file())
    return shipped


SHIPPED = package_data()

_URL = re.compile(r"https?://[^\s)>\"'`]+")
_TAG = re.compile(r"<[^>]*>|\{\{.*?\}\}|\{%.*?%\}")
_PATH = re.compile(r"(?<![\w.:/~$<{-])((?:[\w.-]+/)+[\w.*<>-]*[\w*>])")
_TOP = frozenset(p.name for p in REPO.iterdir()) | {"output"}
"""A path's first part that makes it a reference: a top-level entry of the checkout (docs,
config, bench, tests, ...; a reader would look for it there) or a run's output folder."""
_RUN_WRITES = tuple(
    str(field.default)
    for field in (
        ImageConfig.model_fields["generation_path"],
        ImageConfig.model_fields["log_path"],
        PromptConfig.model_fields["generations_path"],
    )
)
PLACEHOLDER = "path/to/"
"""How the shipped files write a path the user chooses (``{file: path/to/rubric.md}``)."""


def references(text: str) -> list[str]:
    """The paths ``text`` points its reader to: ``a/b.ext`` tokens, and ``a/b`` ones under a
    top-level folder; URLs and (in templates) tags and template expressions left out."""
    text = _TAG.sub(" ", _URL.sub(" ", text))
    found = []
    for token in _PATH.findall(text):
        if token.split("/", 1)[0] in _TOP or re.search(r"\.\w{1,5}$", token):
            found.append(token)
    return found


def resolves(token: str) -> bool:
    """Whether a wheel user has ``token`` in the folder where ``init`` ran or in the package."""
    written = {f"config/{name}" for name in STARTER_FILES} | {LOCAL_CONFIG.as_posix()}
    if token.startswith(PLACEHOLDER) or token in written:
        return True
    if any(token == out or token.startswith(out + "/") for out in _RUN_WRITES):
        return True
    if token.startswith("image_project/"):
        path = REPO / token
        return path.is_file() and (path.suffix == ".py" or path in SHIPPED)
    return False


def test_every_starter_file_is_package_data() -> None:
    assert {PACKAGE / "defaults" / name for name in STARTER_FILES} <= set(SHIPPED)


def test_the_reference_finder_sees_docs_config_and_output_paths() -> None:
    text = "See docs/panel.md, config/x.yaml; yes/no, 9/16, sqlite:///p/q.db, https://a.b/c.md"
    assert references(text) == ["docs/panel.md", "config/x.yaml"]
    assert references("<p>(docs/review.md)</p> {{ run.page }}/x") == ["docs/review.md"]
    assert not resolves("docs/panel.md") and not resolves("bench/novelty.py")
    assert resolves("config/scoring_ensemble.example.yaml") and resolves("output/logs/*.json")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_shipped_file_names_resolves_for_a_wheel_user(path: Path) -> None:
    unresolved = [t for t in references(path.read_text(encoding="utf-8")) if not resolves(t)]
    assert not unresolved, f"{path.relative_to(REPO)} names what a wheel lacks: {unresolved}"


def test_init_writes_the_installed_package_data_and_points_only_at_what_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"], env={}) == 0
    out = capsys.readouterr().out
    shipped = files("image_project").joinpath("defaults")
    for name in STARTER_FILES:
        written = tmp_path / "config" / name
        assert written.read_bytes() == shipped.joinpath(name).read_bytes()
    named = references(out)
    assert f"config/{EXAMPLE_PANEL}" in named
    for token in named:
        assert (tmp_path / token).is_file(), (token, out)
    # The command init's closing line names runs from that folder, offline.
    command = next(line for line in out.splitlines() if line.startswith("A judge panel: "))
    words = shlex.split(command.split(": ", 1)[1])[1:]
    code = main([*words, "--seed", "42", "--prompt-only", "--offline"], env={}, root=tmp_path)
    assert code == 0, capsys.readouterr().err
    assert "Judges      strict" in capsys.readouterr().out


def test_the_wheel_installed_apart_from_the_checkout_inits_and_runs_the_panel(
    tmp_path: Path,
) -> None:
    """``pip wheel`` (offline: the build-system's setuptools is the dev extra's), installed
    with ``pip install --target`` into a folder first on ``PYTHONPATH``, so the package
    imported is the wheel's, not the checkout's; then ``init`` and the README's judge-panel
    example in an empty folder."""
    wheels, site, work = tmp_path / "wheels", tmp_path / "site", tmp_path / "my-images"
    # A clean copy: setuptools builds in the source tree, and a build/ left there by an
    # earlier build would put its stale files in the wheel.
    source = tmp_path / "source"
    leave_out = shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "__pycache__", "output", "dist", "node_modules"
    )
    shutil.copytree(REPO, source, symlinks=True, ignore=leave_out)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)]
    subprocess.run(built, check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("image_project-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {str(p.relative_to(REPO)) for p in SHIPPED} <= names
    assert not any(n.startswith(("docs/", "tests/", "bench/", "config/")) for n in names)
    install = [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "IMAGE_PROJECT"))}
    env["PYTHONPATH"] = str(site)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "image_project", *args]
        return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)

    where = run("--version")
    assert where.returncode == 0 and where.stdout.startswith("image_project "), where.stderr
    probe = [sys.executable, "-c", "import image_project; print(image_project.__file__)"]
    imported = subprocess.run(probe, cwd=work, env=env, capture_output=True, text=True)
    assert imported.stdout.strip().startswith(str(site)), imported.stdout
    init = run("init")
    assert init.returncode == 0, init.stderr
    assert sorted(p.name for p in (work / "config").iterdir()) == sorted(STARTER_FILES)
    panel = run("--seed", "42", "--config", f"config/{EXAMPLE_PANEL}", "--prompt-only")
    assert panel.returncode == 0, panel.stderr
    assert "Judges      strict" in panel.stdout and "Selected    idea" in panel.stdout
