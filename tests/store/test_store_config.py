"""``store.enabled`` / ``store.url``: strict, checked when the configuration loads (before any
call), never showing a password; the default store sits beside the transcripts."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from image_project.config.loading import load_config
from image_project.config.store_url import check_store_url, redact_url, sqlite_path
from image_project.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_default_store_is_a_sqlite_file_beside_the_transcripts(tmp_path: Path) -> None:
    cfg = load_config(root=REPO, env={}, overrides=[f"image.log_path={tmp_path / 'logs'}"])
    assert cfg.store.enabled is True and cfg.store.url is None
    assert cfg.effective_store_url == f"sqlite:///{tmp_path / 'logs' / 'runs.sqlite'}"


@pytest.mark.parametrize("folder", ["my logs", "50%", "q?x", "h#1"])
def test_the_default_store_url_names_the_log_folder_whatever_its_name(
    tmp_path: Path, folder: str
) -> None:
    """The folder is escaped in the URL (SQLAlchemy decodes ``%XX``, stops at ``?``), so the
    store is the file beside the transcripts, not one under a truncated or decoded name."""
    logs = tmp_path / folder
    cfg = load_config(root=REPO, env={}, overrides=[f"image.log_path={logs}"])
    assert sqlite_path(cfg.effective_store_url) == logs / "runs.sqlite"
    assert make_url(cfg.effective_store_url).database == str(logs / "runs.sqlite")


def test_a_relative_sqlite_path_under_an_odd_project_root_is_escaped(tmp_path: Path) -> None:
    root = tmp_path / "proj #1"
    assert sqlite_path(check_store_url("sqlite:///data/runs.sqlite", root)) == (
        root / "data" / "runs.sqlite"
    )


def test_relative_sqlite_path_resolves_against_the_project_root() -> None:
    cfg = load_config(root=REPO, env={}, overrides=["store.url=sqlite:///data/runs.sqlite"])
    assert cfg.effective_store_url == f"sqlite:///{REPO / 'data' / 'runs.sqlite'}"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+psycopg2://me:pw123@db/runs", "use postgresql://"),
        ("postgresql+asyncpg://me:pw123@db/runs", "the psycopg 3 driver"),
        ("postgresql+psycopg://me:pw123@db", "names its database"),
        ("postgresql://me:pw123@db", "names its database"),
        ("sqlite://", "must be sqlite:///PATH"),
        ("'sqlite:///:memory:'", "lost when the run ends"),
        ("mysql://me:pw123@db/runs", "must be sqlite:///PATH"),
    ],
)
def test_bad_store_urls_fail_at_load_naming_the_key_without_the_password(
    url: str, says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(root=REPO, env={}, overrides=[f"store.url={url}"])
    message = str(info.value)
    assert message.startswith("store.url:") and says in message
    assert "pw123" not in message


@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://", "postgresql+psycopg://"])
def test_a_libpq_url_is_the_psycopg_3_driver(scheme: str) -> None:
    """``postgresql://`` (what ``psql`` and libpq take) is read as psycopg 3, the driver the
    ``postgres`` extra installs: SQLAlchemy alone would read it as psycopg2."""
    cfg = load_config(root=REPO, env={}, overrides=[f"store.url={scheme}me@db:5432/runs"])
    assert cfg.effective_store_url == "postgresql+psycopg://me@db:5432/runs"
    assert make_url(cfg.effective_store_url).get_driver_name() == "psycopg"


def test_store_enabled_is_a_strict_bool() -> None:
    assert load_config(root=REPO, env={}, overrides=["store.enabled=no"]).store.enabled is False
    with pytest.raises(ConfigError, match=r"store\.enabled"):
        load_config(root=REPO, env={}, overrides=["store.enabled=maybe"])


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("postgresql+psycopg://me:pw@h:5/db") == "postgresql+psycopg://me:***@h:5/db"
    assert redact_url("postgresql+psycopg://me@h/db") == "postgresql+psycopg://me@h/db"


def test_missing_postgres_skips_locally_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.store.conftest import MISSING_SERVER, require_postgres

    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="install the postgresql package"):
        require_postgres(None)
    for value in ("1", "true"):
        monkeypatch.setenv("CI", value)
        with pytest.raises(pytest.fail.Exception, match="CI must run") as info:
            require_postgres(None)
        assert MISSING_SERVER in str(info.value)
    assert require_postgres(Path("/usr/bin")) == Path("/usr/bin")
