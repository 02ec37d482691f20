"""A ledger's location is read once (dpdist.privacy.ledger.backend): a path is an SQLite file, libpq's two
URL prefixes a PostgreSQL server, and anything else that looks like a URL is refused -- never taken as a
path, where a typo would make a new, empty ledger (a fresh budget for a dataset already spent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpdist.exceptions import ParameterError

# the mistyped URLs of issue 52, each with what the refusal says is wrong
MISTYPED = {
    "postgresql+psycopg://alice@db.example/ledger": "SQLAlchemy",
    "postgres:/alice@db.example/ledger": "two slashes",
    "PostgreSQL://alice@db.example/ledger": "lower case",
    "postgresq://alice@db.example/ledger": "a PostgreSQL ledger is postgresql://",
}


@pytest.mark.parametrize("url", sorted(MISTYPED))
@pytest.mark.parametrize("command", [["ledger", "init"], ["budget", "show"], ["budget", "history", "--dataset", "x"]])
@pytest.mark.parametrize("via", ["--ledger", "DPDIST_LEDGER"])
def test_a_mistyped_postgresql_url_exits_2_naming_the_problem_and_makes_nothing(
    url: str, command: list[str], via: str, tmp_path: Path, monkeypatch, capsys
):
    from dpdist.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if via == "--ledger":
        argv = [*command, "--ledger", url]
    else:
        monkeypatch.setenv("DPDIST_LEDGER", url)
        argv = command
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "looks like a URL" in err and MISTYPED[url] in err
    assert "Nothing was opened or made" in err
    assert os.listdir(tmp_path) == []  # no directory named after the scheme, no ledger, no home


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:///home/alice/ledger.sqlite",
        "file:ledger.sqlite",
        "https://db.example/ledger",
        "pgsql://alice@db/ledger",
        "postgresql:alice@db/ledger",
        "ledger:2026.sqlite",
    ],
)
def test_anything_else_that_looks_like_a_url_is_refused(text: str, tmp_path: Path, monkeypatch):
    from dpdist.privacy.accountant import Accountant

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParameterError, match="looks like a URL"):
        Accountant(text)
    with pytest.raises(ParameterError, match="looks like a URL"):
        Accountant(Path(text))  # a path object made from one, too (it even loses the URL's '//')
    assert os.listdir(tmp_path) == []


def test_the_accepted_spellings():
    """libpq's two prefixes, in lower case (the URL means the same to psql and to dpdist); paths, with a
    name that holds a colon written ./NAME."""
    from dpdist.privacy.ledger.backend import SCHEMES, parse_location

    assert set(SCHEMES) == {"postgresql", "postgres"}
    for url in ("postgresql://alice@db/ledger", "postgres://alice@db/ledger", "postgresql:///ledger?service=team"):
        assert parse_location(url).is_url and parse_location(url).text == url
    for path in ("/home/alice/.dpdist/ledger.sqlite", "ledger.sqlite", "./ledger:2026.sqlite", "~/l.sqlite", "C:x"):
        assert not parse_location(path).is_url and parse_location(path).text == path
    assert not parse_location(Path("/tmp/l.sqlite")).is_url


def test_a_name_with_a_colon_is_a_file_when_written_with_its_directory(tmp_path: Path, monkeypatch):
    from dpdist.privacy.accountant import Accountant

    monkeypatch.chdir(tmp_path)
    Accountant("./ledger:2026.sqlite").init_budget("ds", 1.0, 0.0)
    assert (tmp_path / "ledger:2026.sqlite").is_file()
