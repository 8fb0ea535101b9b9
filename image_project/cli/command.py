"""The command line: ``image-project [generate] [options]``.

One CLI, three ways in, each naming itself in ``--help`` and errors: the console script
``image-project`` and ``python -m image_project`` read ``config/`` from the current
directory; ``python main.py`` reads it from the checkout that holds ``main.py``. The
subcommands are ``generate``, ``runs`` (``list``, ``show``, ``export``, ``import``,
``stats``: the run store, :mod:`image_project.cli.runs`) and ``review`` (a static site
of the stored runs); with no subcommand the options mean ``generate``, so ``image-project --seed 42`` is ``image-project generate --seed 42``.

Exit codes: 0 success; 1 a run failed (its transcript was written, the error attributed to a
phase and step path); 2 a configuration or input-file error, raised before any model call;
130 interrupted by Ctrl-C (SIGINT), 143 by SIGTERM.

Interruption. While runs are going, SIGINT and SIGTERM cancel the work (every model call in
flight, the image call and the offline drawing included, is cancelled at once; a retry
backoff is cut short); the interrupted run writes its transcript with
``error.type == "interrupted"`` and exits 130 / 143. A run already writing its records
finishes them first (milliseconds); if that was the last run and every run succeeded, nothing
was left to interrupt: the CLI says the run was already complete and exits 0.
A second signal quits at once, whatever is in flight (worker threads included): one line,
exit 128 + its number, no traceback (:mod:`image_project.run.interrupts`).
With several runs (``--runs``, ``--parallel``: :mod:`image_project.run.batch`) no run starts
after the first signal, and the closing line counts the runs completed, interrupted and never
started.
A Ctrl-C during start-up (imports, configuration) exits 130 with one line, no traceback
(:mod:`image_project.cli.launch`).

Configuration is read and validated once, here at the edge, and passed down as typed
objects. Environment variables are read here (and by the backend adapter's key lookup), the
4K image's upscaler binary is looked up here too (:func:`image_project.preflight
.check_upscale`: a missing one is exit 2 before any model call).
"""

from __future__ import annotations

import argparse
import calendar
import dataclasses
import difflib
import logging
import os
import re
import sys
import textwrap
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from image_project.backends.factory import Backends, make_backends
from image_project.config.defaults import BUILTIN_CONFIG, builtin_note, init_command
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import AuthenticationError, ConfigError, InputFileError, StoreError
from image_project.preflight import check_upscale
from image_project.run.batch import run_batch

if TYPE_CHECKING:
    from image_project.artifacts.upscale import UpscaleSettings

EXIT_OK, EXIT_RUN_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130


_PROG = "image-project"
_DEFAULT_COMMAND = "generate"
_DESCRIPTION = (
    "Turn three random art concepts and your taste profile into a captioned image "
    "through a concurrent LLM prompt pipeline. Every model call is recorded in a "
    "transcript. Without an API key the built-in offline backend is used."
)


_EXAMPLES: dict[str, tuple[str, ...]] = {
    _DEFAULT_COMMAND: (
        "--prompt-only",
        "--seed 42 --config config/scoring_ensemble.example.yaml",
        "--seed 42 --set prompt.scoring.enabled=true --set prompt.scoring.evolution.enabled=true",
        "--runs 24 --parallel 12 --set backend.max_concurrency=64",
        "--offline --date 2026-12-20 --set context.enabled=true",
    ),
    "runs list": ("runs list", "runs list --failed --since 7d", "runs list --judge strict"),
    "runs show": ("runs show 20261123_115739", "runs show 20261123_115739 --round 1"),
    "runs export": ("runs export --format csv --out runs.csv", "runs export --since 12h"),
    "runs import": (
        "runs import output/logs/",
        "runs import runs.jsonl --store sqlite:///b.sqlite",
    ),
    "runs stats": ("runs stats", "runs stats --since 7d"),
    "review": ("review", "review --last 50 --out site/"),
    "init": ("init", "init my-images", "init --force"),
    "campaign submit": ("campaign submit --runs 100 --store postgresql://me@db/image_project",),
    "campaign status": ("campaign status --store postgresql://me@db/image_project",),
    "worker": (
        "worker --store postgresql://me@db/image_project --parallel 4",
        "worker --store postgresql://me@db/image_project --until-done -q",
    ),
}
"""Each command's examples (after the program's name), shown by its ``--help``."""
_EXAMPLES["runs"] = tuple(e for c in _EXAMPLES if c.startswith("runs ") for e in _EXAMPLES[c][:1])
_EXAMPLES["campaign"] = (*_EXAMPLES["campaign submit"], *_EXAMPLES["campaign status"])


def _texts(prog: str, command: str, description: str | None = None) -> dict[str, Any]:
    """``description``, ``epilog`` (the command's examples) and the formatter that keeps the
    examples' lines: the description is wrapped here, since that formatter keeps its lines
    too."""
    lines = "\n".join(f"  {prog} {example}" for example in _EXAMPLES[command])
    texts: dict[str, Any] = {
        "epilog": f"examples:\n{lines}",
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
    if description is not None:
        texts["description"] = textwrap.fill(description, 78)
    return texts


def build_parser(prog: str = _PROG) -> argparse.ArgumentParser:
    """The top-level parser. Its options are the ``generate`` options, listed here too so that
    ``--help`` shows them; :func:`main` routes arguments without a subcommand to ``generate``
    (see :func:`_with_command`), so they are always parsed by the subcommand's parser."""
    return _build(prog)[0]


_Commands = dict[str, dict[str, argparse.ArgumentParser]]
"""The parsers' commands by the words before them: ``""`` the top level's, ``"runs"`` the
actions of ``runs``, ``"campaign"`` those of ``campaign``."""


def _build(prog: str) -> tuple[argparse.ArgumentParser, _Commands]:
    """:func:`build_parser`'s parser and its commands (for :func:`_check_commands`)."""
    texts = _texts(prog, _DEFAULT_COMMAND, _DESCRIPTION)
    texts["epilog"] = (
        textwrap.fill(
            f"With no command, the options mean '{_DEFAULT_COMMAND}': '{prog} --seed 42' is "
            f"'{prog} {_DEFAULT_COMMAND} --seed 42'.",
            78,
        )
        + "\n\n"
        + texts["epilog"]
    )
    parser = argparse.ArgumentParser(
        prog=prog, usage=f"{prog} [{_DEFAULT_COMMAND}] [options]", **texts
    )
    parser.add_argument(
        "--version", action=_Version, help="print the version of image_project and exit"
    )
    _add_generate_options(parser)
    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    generate = commands.add_parser(
        _DEFAULT_COMMAND,
        prog=f"{prog} {_DEFAULT_COMMAND}",
        help="make one or more generations (the default when no command is given)",
        **_texts(prog, _DEFAULT_COMMAND, _DESCRIPTION),
    )
    _add_generate_options(generate)
    common = _store_options()
    tree: _Commands = {"": commands.choices}
    tree["runs"] = _add_runs_parser(commands, prog, common)
    _add_review_parser(commands, prog, common)
    _add_init_parser(commands, prog)
    tree["campaign"] = _add_campaign_parsers(commands, prog, common)
    return parser, tree


class _Version(argparse.Action):
    """``--version``: the installed distribution's version (read only when asked, so the
    parser's start-up does not import :mod:`importlib.metadata`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("image_project")
        except PackageNotFoundError:
            found = "(not installed: pip install -e . in the checkout)"
        print(f"image_project {found}")
        parser.exit()


def _check_commands(parser: argparse.ArgumentParser, tree: _Commands, argv: Sequence[str]) -> None:
    """A word where a command (or a command's action) goes that names none exits 2 like any
    usage error, with the nearest name (``did you mean 'generate'?``) or the names."""
    path = ""
    for word in argv:
        choices = tree.get(path)
        if choices is None or word.startswith("-"):
            return
        if word not in choices:
            what = "command" if not path else "action"
            close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(choices)}"
            parser.error(f"unknown {what} {word!r}; {hint}")
        parser = choices[word]
        path = f"{path} {word}".strip()


def _add_campaign_parsers(
    commands: Any, prog: str, common: argparse.ArgumentParser
) -> dict[str, argparse.ArgumentParser]:
    """``campaign submit|status`` and ``worker``: runs queued in a PostgreSQL store and made
    on any machine (:mod:`image_project.campaign`, the ``campaign`` extra)."""
    campaign = commands.add_parser(
        "campaign",
        prog=f"{prog} campaign",
        help="queue runs in a PostgreSQL store for workers on any machine, or show their state",
        **_texts(
            prog,
            "campaign",
            "A campaign queues runs in the PostgreSQL store (store.url) for 'worker' processes "
            "on any number of machines. Needs the campaign extra: pip install "
            "'image_project[campaign]'.",
        ),
    )
    campaign.set_defaults(verbose=0, quiet=False)
    sub = campaign.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)
    submit = sub.add_parser(
        "submit",
        prog=f"{prog} campaign submit",
        help="queue --runs N runs of the configuration (the options of generate)",
        **_texts(
            prog,
            "campaign submit",
            "Queue --runs N runs: run i gets the seed --runs N gives it, whichever worker "
            "makes it. The configuration is read and checked here, once.",
        ),
    )
    _add_generate_options(submit)
    submit.add_argument("--store", metavar="URL", help="this store instead of store.url")
    status = sub.add_parser(
        "status",
        parents=[common],
        prog=f"{prog} campaign status",
        help="every campaign's runs: done, running, failed, queued",
        **_texts(prog, "campaign status"),
    )
    status.add_argument("--campaign", metavar="ID", help="only this campaign")
    worker = commands.add_parser(
        "worker",
        parents=[common],
        prog=f"{prog} worker",
        help="take campaign runs from the PostgreSQL store and make them",
        **_texts(
            prog,
            "worker",
            "Take queued campaign runs and write them to the store, up to --parallel at once, "
            "until stopped (Ctrl-C / SIGTERM: no new run, the runs in flight finish; a second "
            "one quits at once). --set applies on top of each campaign's configuration: use it "
            "for what is this machine's own, like backend.base_url of a local server or the "
            "output folders. Exit 1 when this machine cannot set up a campaign's runs (the run "
            "goes back to the queue for another worker) or reach the store.",
        ),
    )
    worker.set_defaults(verbose=0, quiet=False)
    worker.add_argument(
        "--parallel", type=_positive_int, default=1, metavar="K", help="runs in flight at once (1)"
    )
    worker.add_argument(
        "--stalled-after",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="a worker silent this long is taken for dead and its runs are queued again (30)",
    )
    worker.add_argument(
        "--database-lost-after",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="stop (exit 3) when the database has not answered this long; until then every "
        "lost connection is made again (60)",
    )
    worker.add_argument(
        "--until-done",
        action="store_true",
        help="stop once no run is queued or running (default: wait for new runs)",
    )
    worker.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    return dict(sub.choices)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a number > 0")
    return value


def _add_init_parser(commands: Any, prog: str) -> None:
    """``init [DIR]``: a starter config to edit (:mod:`image_project.config.defaults`)."""
    init = commands.add_parser(
        "init",
        prog=f"{prog} init",
        help="write a starter config/ (config.yaml, categories.csv, profile.csv) to edit",
        **_texts(
            prog,
            "init",
            "Write config/config.yaml (every key documented), config/categories.csv and "
            "config/profile.csv into DIR; existing files are left alone unless --force.",
        ),
    )
    init.set_defaults(verbose=0, quiet=False)
    init.add_argument("dir", nargs="?", type=Path, default=Path("."), metavar="DIR")
    init.add_argument("--force", action="store_true", help="overwrite existing files")


def _store_options() -> argparse.ArgumentParser:
    """The options of every command that reads the run store: where the store is."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, metavar="PATH", help="the config file to read")
    common.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set store.url=postgresql://…",
    )
    common.add_argument("--store", metavar="URL", help="this store instead of store.url")
    return common


def _add_review_parser(commands: Any, prog: str, common: argparse.ArgumentParser) -> None:
    """``review``: the static review site of the newest stored runs (docs/review.md)."""
    review = commands.add_parser(
        "review",
        parents=[common],
        prog=f"{prog} review",
        help="write a static review site (gallery, score heatmaps, judge panel) of stored runs",
        **_texts(
            prog,
            "review",
            "Write a static site of the newest runs in the run store: a gallery with the "
            "selected card and mode, one page per run with its score table as a heatmap, and "
            "a judge-panel page (status counts, position bias, Kendall's tau, Krippendorff's "
            "alpha) with plots. Open its index.html; no server is needed.",
        ),
    )
    review.set_defaults(verbose=0, quiet=False)
    review.add_argument(
        "--last", type=_positive_int, default=20, metavar="N", help="the N newest runs (20)"
    )
    review.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where to write the site (default: review/ beside the run logs)",
    )


def _add_runs_parser(
    commands: Any, prog: str, common: argparse.ArgumentParser
) -> dict[str, argparse.ArgumentParser]:
    """``runs list|show|export|import|stats``: the run store (docs/store.md)."""
    runs = commands.add_parser(
        "runs",
        prog=f"{prog} runs",
        help="list, show, export or import the runs kept in the run store",
        **_texts(
            prog,
            "runs",
            "The run store keeps every run (success, failure, interrupt). Its location is "
            "store.url in the configuration (default: <image.log_path>/runs.sqlite).",
        ),
    )
    runs.set_defaults(verbose=0, quiet=False)
    sub = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    sub.add_parser(
        "list",
        parents=[common, _filters(20)],
        prog=f"{prog} runs list",
        help="the stored runs, newest first",
        **_texts(prog, "runs list"),
    )
    show = sub.add_parser(
        "show",
        parents=[common],
        prog=f"{prog} runs show",
        help="one run: summary and score table",
        **_texts(prog, "runs show"),
    )
    show.add_argument("id", metavar="ID", help="a generation id (or a unique start of one)")
    view = show.add_mutually_exclusive_group()
    view.add_argument(
        "--round",
        type=_natural_int,
        metavar="N",
        help="only round N of a scoring run: each card's origin, scores and survivor reason",
    )
    view.add_argument(
        "--card",
        metavar="X",
        help="only card X's history: its parent chain, scores per round, survivor reasons",
    )
    view.add_argument(
        "--calls",
        action="store_true",
        help="every model call: path, role, model, protocol, tokens, latency, attempts, status",
    )
    view.add_argument(
        "--call",
        metavar="PATH",
        help="the call at PATH whole: its request, re-asks and their reasons, answer, judge's view",
    )
    export = sub.add_parser(
        "export",
        parents=[common, _filters(None)],
        prog=f"{prog} runs export",
        help="the stored runs as CSV or JSON lines",
        **_texts(prog, "runs export"),
    )
    export.add_argument("--format", choices=("csv", "jsonl"), default="jsonl")
    export.add_argument("--out", type=Path, metavar="PATH", help="write here, not to stdout")
    importing = sub.add_parser(
        "import",
        parents=[common],
        prog=f"{prog} runs import",
        help="write transcripts (or a jsonl export) into the store; idempotent",
        **_texts(prog, "runs import"),
    )
    importing.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="*_transcript.json files, runs export .jsonl files, or folders of transcripts "
        "(a run killed while writing its records is first completed or rolled back from its "
        "*_transcript.pending.json)",
    )
    sub.add_parser(
        "stats",
        parents=[common, _filters(None)],
        prog=f"{prog} runs stats",
        help="judge-panel figures over the stored runs: status counts, position bias, agreement",
        **_texts(prog, "runs stats"),
    )
    return dict(sub.choices)


def _natural_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be an int >= 0")
    return value


def _filters(limit: int | None) -> argparse.ArgumentParser:
    """The run filters, built afresh for each command: parents share their action objects,
    so one ``set_defaults(limit=20)`` on ``list`` set the shared ``--limit`` default and
    silently capped ``export`` and ``stats`` at 20 runs. ``limit`` None means every run."""
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--failed", action="store_true", help="only runs that did not succeed")
    filters.add_argument("--judge", metavar="ID", help="only runs whose judge panel had ID")
    filters.add_argument(
        "--since", metavar="WHEN", help="only runs created since WHEN: 2026-11-20, 12h, 7d"
    )
    filters.add_argument(
        "--limit",
        type=_positive_int,
        default=limit,
        metavar="N",
        help=f"at most N runs, newest first ({limit if limit is not None else 'all'})",
    )
    return filters


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be an int >= 1")
    return value


def _store_command(args: argparse.Namespace, env: Mapping[str, str], root: Path) -> int:
    """``runs …`` and ``review``: the store's URL from ``--store`` or the configuration's
    ``store.url``, then :mod:`image_project.cli.runs` (imported only now: it imports
    SQLAlchemy, and ``review`` Jinja2 and matplotlib). The configuration is read only when
    something comes from it (no ``--store``; ``review``: the folders its images may come
    from, ``image.generation_path`` and the 4K ``upscale.output_path``; ``runs import``: the
    folders its runs write, the only ones a pending transcript's repair may touch)."""
    out_dir: Path | None = getattr(args, "out", None) if args.command == "review" else None
    try:
        cfg = None
        if (
            args.store is None
            or args.command == "review"
            or getattr(args, "runs_command", None) == "import"
        ):
            cfg = load_config(root=root, config_path=args.config, overrides=args.overrides, env=env)
        if args.store is not None:
            from image_project.config.store_url import check_store_url

            url = check_store_url(args.store, root)
        else:
            assert cfg is not None
            url = cfg.effective_store_url
    except (ConfigError, ValueError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "review":
        from image_project.cli.runs import review_stored_runs

        if out_dir is None:
            assert cfg is not None
            out_dir = Path(cfg.image.log_path).parent / "review"
        assert cfg is not None
        image_dirs = [Path(cfg.image.generation_path)]
        if cfg.upscale.output_path is not None:
            image_dirs.append(Path(cfg.upscale.output_path))
        return review_stored_runs(
            url,
            out_dir,
            last=args.last,
            image_base=root,
            image_dirs=image_dirs,
            max_image_pixels=cfg.review.max_image_pixels,
        )
    from image_project.cli.runs import run_command

    # The configured log folder holds the configured store's transcripts: runs list says
    # which of them that store lacks (not for another store named with --store).
    transcripts = None
    if cfg is not None and url == cfg.effective_store_url:
        transcripts = Path(cfg.image.log_path)
    from image_project.run.records import repair_scope

    scope = repair_scope(cfg) if cfg is not None else None
    return run_command(args, url, transcripts=transcripts, scope=scope)


def _with_command(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``generate`` put in front when it names no command: when it is empty or
    starts with an option other than ``-h`` / ``--help`` (which then shows the top-level help)
    and ``--version``.
    A leading word that is no command is left alone, for argparse to reject it."""
    args = list(argv)
    if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help", "--version")):
        return [_DEFAULT_COMMAND, *args]
    return args


def _add_generate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help="use this one config file instead of config/config.yaml (+ config.local.yaml)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (dotted path; value parsed as YAML); repeatable",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="run seed (overrides prompt.random_seed); with --runs, later runs derive theirs from it",
    )
    parser.add_argument(
        "--date",
        type=_iso_date,
        metavar="YYYY-MM-DD",
        help="the day the context injectors take as today (sets context.date), so a run "
        "with context.enabled can be reproduced",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="use the built-in offline backend for every role even if an API key is set",
    )
    parser.add_argument(
        "--prompt-only",
        action="store_true",
        help="stop after the final image prompt: no image, no manifest or CSV row",
    )
    parser.add_argument(
        "--runs", type=int, metavar="N", help="number of generations to make (overrides run.runs)"
    )
    parser.add_argument(
        "--parallel",
        type=_parallel,
        metavar="K|auto",
        help="keep up to K runs in flight at once, or auto: as many as the rate limit allows "
        "(overrides run.parallel)",
    )
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument(
        "-q", "--quiet", action="store_true", help="print only the summary and errors"
    )
    verbosity.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging on stderr (-vv for debug)"
    )


def _parallel(text: str) -> str:
    """``--parallel``: ``auto`` or an int >= 1 (the upper bound is the config's)."""
    if text != "auto":
        try:
            _positive_int(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"got {text!r}, must be auto or an int >= 1") from None
    return text


def _iso_date(text: str) -> str:
    """``--date``: a real calendar day written ``YYYY-MM-DD`` (the range is the config's); the
    error says what is wrong with it (the shape, or the day that month does not have)."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, must be a date YYYY-MM-DD (a 4-digit year, 2-digit month and day)"
        )
    year, month, day = (int(part) for part in text.split("-"))
    try:
        date(year, month, day)
    except ValueError as exc:
        why = str(exc)
        if 1 <= month <= 12 and year >= 1:
            days = calendar.monthrange(year, month)[1]
            why += f": {calendar.month_name[month]} {year} has {days} days"
        raise argparse.ArgumentTypeError(
            f"got {text!r}, must be a date YYYY-MM-DD: {why}"
        ) from None
    return text


def _check_context(cfg: AppConfig) -> None:
    """With ``context.enabled``, the context injectors are loaded now, at the edge, like every
    key: a plugin that cannot be imported or has the wrong shape, or a holiday calendar the
    ``holidays`` package does not know, exits 2 before any call (ConfigError naming the key).
    The context package (and ``holidays``) is imported only then."""
    if cfg.context.enabled:
        from image_project.context.loading import load_injectors

        load_injectors(cfg.context)


_FLAG_KEYS: dict[str, tuple[str, str]] = {
    "date": ("--date", "context.date"),
    "offline": ("--offline", "backend.provider"),
    "prompt_only": ("--prompt-only", "run.mode"),
    "runs": ("--runs", "run.runs"),
    "parallel": ("--parallel", "run.parallel"),
    "seed": ("--seed", "prompt.random_seed"),
}
"""The options of ``generate`` that set a config key: option, key (by ``args`` name)."""
_FLAG_VALUES = {"offline": "offline", "prompt_only": "prompt_only"}
"""The value an on/off option sets; the others set their own."""


def _flags(args: argparse.Namespace) -> dict[str, str]:
    """The config key of each option given, to the option (``run.runs`` -> ``--runs``)."""
    return {key: flag for name, (flag, key) in _FLAG_KEYS.items() if _given(args, name)}


def _given(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name)
    return value is not None and value is not False


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` and then the options, as overrides: an option wins over a ``--set`` of its
    key."""
    extra = list(args.overrides)
    for name, (_, key) in _FLAG_KEYS.items():
        if _given(args, name):
            extra.append(f"{key}={_FLAG_VALUES.get(name, getattr(args, name))}")
    return extra


def _named_by_option(exc: ConfigError, flags: Mapping[str, str]) -> ConfigError:
    """``exc`` saying the option (``--runs: got 0, ...``) where its key (``run.runs``) got
    its value from one, the first problem and any listed after it."""
    message = exc.message
    for key, flag in flags.items():
        message = message.replace(f"\n  {key}: ", f"\n  {flag}: ")
    key = flags.get(exc.key, exc.key)
    return exc if (key, message) == (exc.key, exc.message) else ConfigError(key, message)


def _generate_config(
    args: argparse.Namespace, env: Mapping[str, str], root: Path, prog: str
) -> AppConfig:
    """The configuration of ``generate`` (and ``campaign submit``): files, ``--set`` and the
    options, with ``--offline`` applied to the named backends too; context injectors loaded.
    Raises ConfigError."""
    try:
        cfg = load_config(root=root, config_path=args.config, overrides=_overrides(args), env=env)
    except ConfigError as exc:
        raise _named_by_option(exc, _flags(args)) from exc
    if args.offline:  # the named backends too (backends:), not only backend:
        named = {n: b.model_copy(update={"provider": "offline"}) for n, b in cfg.backends.items()}
        cfg = cfg.model_copy(update={"backends": named})
    if cfg.sources[:1] == (str(BUILTIN_CONFIG),):
        print(builtin_note(root, prog), file=sys.stderr)
    date = getattr(args, "date", None)
    if date is not None and not cfg.context.enabled:
        raise ConfigError(
            "context.enabled",
            f"--date {date} sets the day the context injectors take as today, but "
            "context.enabled is false, so nothing would read it; add --set "
            "context.enabled=true, or drop --date",
        )
    _check_context(cfg)
    return cfg


def _campaign_command(
    args: argparse.Namespace, env: Mapping[str, str], root: Path, prog: str
) -> int:
    """``campaign submit``, ``campaign status`` and ``worker`` (:mod:`image_project.campaign`,
    imported only now). The store is ``--store`` or the configuration's ``store.url``, and must
    be PostgreSQL; the campaign's libraries must be installed (exit 2 naming the extra)."""
    from image_project.campaign.queue import require_campaign

    try:
        if args.command == "campaign" and args.campaign_command == "submit":
            cfg = _generate_config(args, env, root, prog)
        else:
            cfg = load_config(root=root, config_path=args.config, overrides=args.overrides, env=env)
        url = cfg.effective_store_url
        if args.store is not None:
            from image_project.config.store_url import check_store_url

            url = check_store_url(args.store, root)
        require_campaign(url, "--store" if getattr(args, "store", None) else "store.url")
    except (ConfigError, ValueError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from image_project.config.store_url import redact_url

    if args.command == "worker":
        from image_project.campaign.worker import Worker

        worker = Worker(
            url=url,
            root=root,
            overrides=args.overrides,
            env=env,
            parallel=args.parallel,
            stalled_after_s=args.stalled_after,
            database_lost_after_s=args.database_lost_after,
            until_done=args.until_done,
            quiet=args.quiet,
        )
        print(
            f"worker: taking campaign runs from {redact_url(url)}, {args.parallel} at once",
            file=sys.stderr,
            flush=True,
        )
        return anyio.run(worker.run)
    import psycopg
    from procrastinate.exceptions import ConnectorException

    from image_project.campaign.queue import campaign_status, submit_campaign

    try:
        if args.campaign_command == "status":
            files = (Path(cfg.image.log_path), Path(cfg.effective_titles_manifest_path))
            counts = campaign_status(url, args.campaign, files)
            if not counts:
                print(f"no campaign in {redact_url(url)}")
            for line in counts:
                print(line.line())
            return EXIT_OK
        campaign, runs, seed = anyio.run(submit_campaign, cfg, url)
    except (psycopg.Error, ConnectorException, StoreError) as exc:  # unreachable, refused
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: cannot reach the store {redact_url(url)}: {detail}", file=sys.stderr)
        return EXIT_RUN_FAILED
    print(
        f"campaign {campaign}: {runs} runs queued (seed {seed}) in {redact_url(url)}\n"
        f"  start workers on any machine: {prog} worker --store '{redact_url(url)}' "
        "--parallel K\n"
        f"  follow it: {prog} campaign status --campaign {campaign}"
    )
    return EXIT_OK


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else logging.WARNING
    if verbose == 1:
        level = logging.INFO
    elif verbose >= 2:
        level = logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("image_project")
    root.handlers = [h for h in root.handlers if not getattr(h, "_image_project_cli", False)]
    handler._image_project_cli = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    root.propagate = False


async def _run_all(
    cfg: AppConfig,
    backends: Backends,
    quiet: bool,
    upscale: UpscaleSettings | None = None,
    verbose: int = 0,
) -> int:
    """Every run: a batch of ``run.runs``, ``run.parallel`` at a time, stopped by SIGINT /
    SIGTERM (exit 128 + signal number); :mod:`image_project.run.batch`. A KeyboardInterrupt
    raised inside the runs (not by a signal: those are the batch's) ends here, in the event
    loop, so that asyncio is not left holding it in its main task."""
    try:
        return await run_batch(cfg, backends, quiet=quiet, verbose=verbose, upscale=upscale)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    root: Path | None = None,
    prog: str = _PROG,
) -> int:
    """``root`` is the project directory holding ``config/``; relative config paths resolve
    against it (``main.py`` passes its own directory; the default is the current one).
    ``prog`` is the command as the user typed it, for ``--help`` and usage errors (the console
    script's default; ``python -m image_project`` and ``main.py`` pass their own)."""
    words = _with_command(sys.argv[1:] if argv is None else argv)
    parser, commands = _build(prog)
    _check_commands(parser, commands, words)
    args = parser.parse_args(words)
    env = os.environ if env is None else env
    _setup_logging(args.verbose, args.quiet)
    root = (root or Path.cwd()).resolve()
    if args.command in ("runs", "review"):
        return _store_command(args, env, root)
    if args.command == "init":
        return init_command(args.dir, force=args.force, prog=prog)
    if args.command in ("campaign", "worker"):
        return _campaign_command(args, env, root, prog)
    try:
        cfg = _generate_config(args, env, root, prog)
        # The 4K image's upscaler (binary, model files), found through the environment here at
        # the edge, once for all runs.
        upscale = check_upscale(cfg, env) if cfg.run.mode != "prompt_only" else None
        backends = make_backends(cfg, env)
    except (ConfigError, AuthenticationError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(backends.description, file=sys.stderr if args.quiet else sys.stdout, flush=True)
    try:
        backends = dataclasses.replace(backends, preflight=anyio.run(backends.probe))
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return anyio.run(_run_all, cfg, backends, args.quiet, upscale, args.verbose)
    except InputFileError as exc:
        print(f"input file error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
