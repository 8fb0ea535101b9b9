"""The example outputs of README.md and docs/*.md, produced from the commands they show.

An example is marked in the Markdown with two HTML comments (invisible when rendered)::

    <!-- example: NAME [key=value ...] -->
    ```bash
    python main.py --seed 42
    ```

    ```
    ...what the command printed...
    ```
    <!-- /example -->

The first fenced block is the command (bash, run as shown; or a ``python`` block, run by the
interpreter under test), the last one its output. ``python scripts/examples.py --write`` runs every example and rewrites its output
block; ``--check`` (the default) runs them and exits 1 with a unified diff naming the file and
the example when an output block differs from what its command prints now
(tests/test_examples.py runs it on every full check).

Each example runs offline in a fresh temporary project directory holding ``main.py`` and a
copy of the checkout's ``config/`` (the links resolved), with no ``$OPENAI_*`` or
``$IMAGE_PROJECT_*`` variables, every HTTP proxy variable pointing at a closed local port
(so a request that would leave the machine fails instead) and this interpreter's ``bin/``
first on ``PATH`` (so ``python`` and ``image-project`` are the ones under test). Options of the opening comment:

* ``stream=stdout|stderr|both`` what is shown (default ``stdout``; ``both`` is 2>&1);
* ``exit=N`` the exit status the command must end with (default 0);
* ``setup="CMD"`` a bash command run first, in the same directory, its output not shown;
* ``of=NAME`` no command block: show more of example NAME's run (same file), with
  ``stream`` and ``from``, or, with ``run="CMD"``, what CMD prints afterwards there;
* ``from="TEXT"`` / ``lines=N``: show the output from the first line starting with TEXT,
  and at most N lines (after ``from``);
* ``file=PATH`` no command: the one block is a file's text (a config, a rubric), written
  to PATH in the project of every example of the same page naming it in
  ``files=NAME,...``; it is input, never rewritten.

What varies between runs is masked with stable placeholders: the temporary directory (paths
print relative to the project, ``sqlite:///output/...``), generation ids (the k-th id of an
example's session becomes ``20260101_1200kk_000000kk``; a placeholder id or its first 15
characters in a command is replaced by the real id before it runs), times of day (a date
with a time becomes ``YYYY-MM-DD hh:mm:ss``; a date alone stays) and durations (every digit
of ``0.3 s`` / ``[   0.0s]`` becomes ``N``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILES = ("README.md", "docs/*.md")

_OPEN = re.compile(r"^<!-- example: (?P<name>[\w.-]+)(?P<options>.*?) -->$")
_CLOSE = "<!-- /example -->"
_FENCE = re.compile(r"^```")
_OPTIONS = frozenset({"stream", "exit", "setup", "of", "from", "lines", "run", "file", "files"})
_ID = re.compile(r"\b\d{8}_\d{6}_[0-9a-f]{8}\b")
_DURATION = re.compile(r"(?<![\w.])\d+\.\d+(?= ?s\b)")
_CLOCK = re.compile(r"\b\d{4}-\d\d-\d\d(?P<sep>[ T])\d\d:\d\d(?P<s>:\d\d(?:\.\d+)?)?")
TIMEOUT_S = 300


class ExampleError(Exception):
    """A marked example that cannot be read or run as marked."""


@dataclass
class Example:
    file: Path
    name: str
    options: dict[str, str]
    command: str | None  # None with of=NAME
    language: str  # the command block's: bash (run by bash) or python (run by python -c)
    output_start: int  # the index of the output block's first content line
    output_end: int  # the index of its closing fence
    output: str
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (path, text) from files=

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(REPO) if self.file.is_relative_to(REPO) else self.file}: example {self.name!r}"


@dataclass
class Session:
    """One temporary project directory and what ran in it."""

    directory: Path
    ids: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- parsing


def _fences(lines: Sequence[str], start: int, end: int) -> list[tuple[int, int]]:
    """The fenced blocks between ``start`` and ``end``: (opening index, closing index)."""
    blocks, opening = [], None
    for i in range(start, end):
        if _FENCE.match(lines[i]):
            if opening is None:
                opening = i
            else:
                blocks.append((opening, i))
                opening = None
    if opening is not None:
        raise ExampleError(f"line {opening + 1}: a fenced block that does not close")
    return blocks


def _options(text: str, where: str) -> dict[str, str]:
    options = {}
    for word in shlex.split(text):
        key, sep, value = word.partition("=")
        if not sep or key not in _OPTIONS:
            raise ExampleError(f"{where}: bad option {word!r} (options: {sorted(_OPTIONS)})")
        options[key] = value
    return options


def parse(path: Path) -> list[Example]:
    """The marked examples of the Markdown file ``path``, in order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    examples, i = [], 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None:
            if lines[i].startswith("<!-- example") or lines[i] == _CLOSE:
                raise ExampleError(f"{path}:{i + 1}: a marker out of place: {lines[i]!r}")
            i += 1
            continue
        name = opened["name"]
        where = f"{path}:{i + 1}: example {name!r}"
        try:
            close = lines.index(_CLOSE, i + 1)
        except ValueError:
            raise ExampleError(f"{where}: no {_CLOSE} after it") from None
        options = _options(opened["options"], where)
        try:
            blocks = _fences(lines, i + 1, close)
        except ExampleError as exc:
            raise ExampleError(f"{where}: {exc}") from None
        want = 1 if "of" in options or "file" in options else 2
        if len(blocks) != want:
            raise ExampleError(
                f"{where}: {len(blocks)} fenced block(s), expected {want} "
                + ("(the output)" if want == 1 else "(the command, then its output)")
            )
        command, language = None, "bash"
        if want == 2:
            first, last = blocks[0]
            command = "\n".join(lines[first + 1 : last])
            language = lines[first][3:].strip() or "bash"
            if language not in ("bash", "python"):
                raise ExampleError(f"{where}: a {language!r} command block (bash or python)")
        out_open, out_close = blocks[-1]
        examples.append(
            Example(
                file=path,
                name=name,
                options=options,
                command=command,
                language=language,
                output_start=out_open + 1,
                output_end=out_close,
                output="\n".join(lines[out_open + 1 : out_close]),
            )
        )
        i = close + 1
    names = [e.name for e in examples]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ExampleError(f"{path}: examples named twice: {duplicates}")
    return examples


# --------------------------------------------------------------------------- masking


def placeholder(k: int) -> str:
    """The stable stand-in for the k-th generation id (1-based) of an example's session."""
    return f"20260101_1200{k:02d}_{k:08x}"


def mask(text: str, session: Session) -> str:
    """``text`` with the session's directory, generation ids and durations masked."""
    text = text.replace(f"{session.directory}/", "").replace(str(session.directory), ".")
    for real in _ID.findall(text):
        if real not in session.ids:
            session.ids.append(real)
    for k, real in enumerate(session.ids, 1):
        text = text.replace(real, placeholder(k))
    text = _CLOCK.sub(lambda m: f"YYYY-MM-DD{m['sep']}hh:mm" + (":ss" if m["s"] else ""), text)
    return _DURATION.sub(lambda m: re.sub(r"\d", "N", m.group()), text)


def unmask(command: str, session: Session) -> str:
    """``command`` with placeholder ids (whole, or their first 15 characters) made real. The
    placeholders differ in their first 15 characters (one second apart), real ids need not
    (runs started in the same second): a prefix that would match several real ids is
    replaced by the whole id, so the command names the run the placeholder does."""
    for k, real in enumerate(session.ids, 1):
        command = command.replace(placeholder(k), real)
        short = real[:15]
        unique = sum(other.startswith(short) for other in session.ids) == 1
        command = command.replace(placeholder(k)[:15], short if unique else real)
    return command


# --------------------------------------------------------------------------- running


def _environment(directory: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI", "IMAGE_PROJECT", "REALESRGAN", "PYTEST", "COV_"))
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(directory)
    env["COLUMNS"] = "100"
    env["PYTHONHASHSEED"] = "0"
    env["TZ"] = "UTC"
    # Offline: a request that would leave the machine goes to a closed local port instead.
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        env[proxy] = "http://127.0.0.1:9"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def new_project(parent: Path) -> Path:
    """A project directory: ``main.py`` and the checkout's ``config/`` (links resolved)."""
    directory = Path(tempfile.mkdtemp(prefix="example-", dir=parent))
    shutil.copyfile(REPO / "main.py", directory / "main.py")
    shutil.copytree(REPO / "config", directory / "config", symlinks=False)
    for name in ("config.local.yaml",):
        (directory / "config" / name).unlink(missing_ok=True)
    return directory


def _bash(
    command: str, session: Session, language: str = "bash"
) -> subprocess.CompletedProcess[str]:
    program = [sys.executable] if language == "python" else ["bash"]
    return subprocess.run(
        [*program, "-c", unmask(command, session)],
        cwd=session.directory,
        env=_environment(session.directory),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _checked(
    example: Example, result: subprocess.CompletedProcess[str], expected: int
) -> subprocess.CompletedProcess[str]:
    if result.returncode != expected:
        raise ExampleError(
            f"{example.where}: exit {result.returncode}, expected {expected}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
        )
    return result


def _shown(example: Example, result: subprocess.CompletedProcess[str], session: Session) -> str:
    stream = example.options.get("stream", "stdout")
    if stream not in ("stdout", "stderr", "both"):
        raise ExampleError(f"{example.where}: stream={stream!r}, must be stdout|stderr|both")
    # Masked in order (stdout, then stderr) so that ids are numbered the same every time.
    out, err = mask(result.stdout, session), mask(result.stderr, session)
    text = {"stdout": out, "stderr": err, "both": out + err}[stream]
    lines = text.rstrip("\n").split("\n")
    start = example.options.get("from")
    if start is not None:
        found = [i for i, line in enumerate(lines) if line.startswith(start)]
        if not found:
            raise ExampleError(f"{example.where}: no line starts with {start!r}:\n{text}")
        lines = lines[found[0] :]
    if "lines" in example.options:
        lines = lines[: int(example.options["lines"])]
    return "\n".join(line.rstrip() for line in lines)


def run_group(group: list[Example], parent: Path) -> dict[str, str]:
    """Run one example and those shown ``of`` it, in one session: name -> output text."""
    main, *more = group
    assert main.command is not None
    session = Session(new_project(parent))
    try:
        for relative, text in main.inputs:
            path = session.directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n", encoding="utf-8")
        if "setup" in main.options:
            done = _checked(main, _bash(main.options["setup"], session), 0)
            # Ids the set-up made are numbered first, in the order it printed them.
            mask(done.stdout, session)
            mask(done.stderr, session)
        result = _bash(main.command, session, main.language)
        result = _checked(main, result, int(main.options.get("exit", "0")))
        shown = {main.name: _shown(main, result, session)}
        for example in more:
            if "run" in example.options:
                extra = _checked(example, _bash(example.options["run"], session), 0)
                shown[example.name] = _shown(example, extra, session)
            else:
                shown[example.name] = _shown(example, result, session)
        return shown
    finally:
        shutil.rmtree(session.directory, ignore_errors=True)


def groups(examples: Sequence[Example]) -> list[list[Example]]:
    """Each example with a command (its ``files=`` read in), followed by the examples shown
    ``of`` it."""
    inputs = {e.name: (e.options["file"], e.output) for e in examples if "file" in e.options}
    by_name = {e.name: [e] for e in examples if e.command is not None}
    for example in examples:
        for name in filter(None, example.options.get("files", "").split(",")):
            if name not in inputs:
                raise ExampleError(f"{example.where}: files= names no file example: {name!r}")
            example.inputs.append(inputs[name])
        if example.command is None and "of" in example.options:
            target = example.options["of"]
            if target not in by_name:
                raise ExampleError(f"{example.where}: of={target!r} names no example above it")
            by_name[target].append(example)
    return list(by_name.values())


def produce(
    examples: Sequence[Example], jobs: int, progress: Callable[[str], None] | None = None
) -> dict[tuple[Path, str], str]:
    """Every example's output now: (file, name) -> text."""
    results: dict[tuple[Path, str], str] = {}
    with tempfile.TemporaryDirectory(prefix="examples-") as parent:

        def one(group: list[Example]) -> tuple[list[Example], dict[str, str]]:
            return group, run_group(group, Path(parent))

        all_groups = [
            g
            for f in sorted({e.file for e in examples})
            for g in groups([e for e in examples if e.file == f])
        ]
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for group, shown in pool.map(one, all_groups):
                for example in group:
                    results[(example.file, example.name)] = shown[example.name]
                if progress is not None:
                    progress(f"{group[0].where}: done")
    return results


# --------------------------------------------------------------------------- write / check


def rewrite(path: Path, examples: Sequence[Example], outputs: dict[tuple[Path, str], str]) -> bool:
    """Put the outputs into ``path``'s output blocks; whether the file changed."""
    lines = path.read_text(encoding="utf-8").split("\n")
    for example in sorted(examples, key=lambda e: e.output_start, reverse=True):
        new = outputs[(path, example.name)].split("\n")
        lines[example.output_start : example.output_end] = new
    text = "\n".join(lines)
    if text == path.read_text(encoding="utf-8"):
        return False
    path.write_text(text, encoding="utf-8")
    return True


def differences(examples: Sequence[Example], outputs: dict[tuple[Path, str], str]) -> list[str]:
    """A unified diff per example whose output block differs from what its command printed."""
    found = []
    for example in examples:
        now = outputs[(example.file, example.name)]
        if example.output != now:
            diff = difflib.unified_diff(
                example.output.split("\n"),
                now.split("\n"),
                f"{example.where} (in the file)",
                f"{example.where} (printed now)",
                lineterm="",
            )
            found.append("\n".join(diff))
    return found


def files_of(patterns: Sequence[str]) -> list[Path]:
    paths: list[Path] = []
    for pattern in patterns:
        given = Path(pattern)
        matched = [given] if given.is_absolute() and given.exists() else sorted(REPO.glob(pattern))
        if not matched:
            raise ExampleError(f"no file matches {pattern!r}")
        paths += [p.resolve() for p in matched if p.resolve() not in paths]
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="compare (the default); exit 1 on a difference"
    )
    mode.add_argument("--write", action="store_true", help="rewrite the output blocks")
    parser.add_argument(
        "files",
        nargs="*",
        default=list(DEFAULT_FILES),
        help="Markdown files (globs under the checkout)",
    )
    parser.add_argument(
        "-j", "--jobs", type=int, default=os.cpu_count() or 1, help="examples run at once"
    )
    parser.add_argument("-k", dest="only", help="only the examples whose name contains this")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        parsed = [e for path in files_of(args.files) for e in parse(path)]
        examples = [e for e in parsed if "file" not in e.options]
        if args.only:
            keep = {e.options.get("of", e.name) for e in examples if args.only in e.name}
            examples = [e for e in examples if e.name in keep or e.options.get("of") in keep]
        inputs = [e for e in parsed if "file" in e.options]
        outputs = produce([*examples, *inputs], args.jobs)
    except ExampleError as exc:
        print(f"examples: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - started
    if args.write:
        changed = [
            p
            for p in sorted({e.file for e in examples})
            if rewrite(p, [e for e in examples if e.file == p], outputs)
        ]
        for path in changed:
            print(f"rewrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
        print(f"{len(examples)} example(s), {len(changed)} file(s) changed, {elapsed:.1f} s")
        return 0
    found = differences(examples, outputs)
    for diff in found:
        print(diff)
    print(
        f"{len(examples)} example(s), {len(found)} differ from what their commands print "
        f"({elapsed:.1f} s)"
        + ("; python scripts/examples.py --write updates them" if found else ""),
        file=sys.stderr,
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
