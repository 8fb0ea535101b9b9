"""The public surface (docs/api.md): the package root's names and ``image_project.testing``'s,
pinned here, and the documentation importing nothing else.

Adding a public name or taking one away is a deliberate change: it changes the pinned list
below (as httpx's test of ``httpx.__all__`` does) and earns a line in CHANGELOG.md.
Everything else in the package is internal and may change freely.

* The root exports exactly :data:`ROOT_NAMES`; each resolves, on first use, to the object of
  its home module (the root loads them lazily and imports none of the package's modules when
  it is imported, so start-up does not grow);
* ``image_project.testing`` exports exactly :data:`TESTING_NAMES`;
* every ``import`` of ``image_project`` in a Python block of README.md or docs/*.md imports a
  public module and only public names;
* every module of the package imports (so an internal module cannot rot unnoticed).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import image_project
import image_project.testing

REPO = Path(__file__).resolve().parents[1]

ROOT_NAMES = [
    "ActionEvent",
    "AppConfig",
    "AuthenticationError",
    "BackendConnectionError",
    "BackendError",
    "BackendTimeoutError",
    "Backends",
    "ChatEvent",
    "ConfigError",
    "ContextInjectorError",
    "ContextRecord",
    "EmptyPromptError",
    "EmptyResponseError",
    "ImageBackend",
    "ImageEvent",
    "ImageProjectError",
    "ImageReply",
    "ImageRequest",
    "Injection",
    "Injector",
    "InjectorInput",
    "InputFileError",
    "Inputs",
    "JsonSchema",
    "MalformedResponseError",
    "Message",
    "ModelOutputError",
    "NetworkDisabledError",
    "PipelineDefinitionError",
    "PromptTooLongError",
    "QuotaExceededError",
    "RateLimitedError",
    "RefusalError",
    "RequestRejectedError",
    "RetryAfterTooLongError",
    "RunFailed",
    "RunRecord",
    "RunResult",
    "ScoringRecord",
    "ServerError",
    "StepEvent",
    "StepFailedError",
    "StoreError",
    "TextBackend",
    "TextReply",
    "TextRequest",
    "UpscaleError",
    "Usage",
    "__version__",
    "build_site",
    "derive_seed",
    "format_panel_table",
    "gate_counts",
    "load_config",
    "load_inputs",
    "make_backends",
    "open_store",
    "panel_stats",
    "read_transcript",
    "records_from_transcripts",
    "rng_for",
    "run_batch",
    "run_generation",
    "run_status",
    "transcript_json_schema",
]

TESTING_NAMES = [
    "HTML_PAGE",
    "TINY_PNG",
    "WAIT_BOUND_S",
    "CallRecord",
    "FakeImageBackend",
    "FunctionTextBackend",
    "OpenAIServer",
    "RateLimit",
    "RecordedRequest",
    "Reply",
    "ReplyLike",
    "ScriptEntry",
    "ScriptedTextBackend",
    "StrictLocalServer",
    "StrictRequest",
    "TextFn",
    "UnexpectedCallError",
    "alternation_error",
    "chat_completion",
    "error_body",
    "image_response",
    "last_user_text",
    "offline_chat_completion",
    "offline_images_response",
    "truncated",
]

PUBLIC_MODULES = {"image_project": ROOT_NAMES, "image_project.testing": TESTING_NAMES}


def test_the_root_exports_exactly_the_public_names() -> None:
    assert image_project.__all__ == ROOT_NAMES
    assert set(ROOT_NAMES) <= set(dir(image_project))


def test_the_testing_module_exports_exactly_its_public_names() -> None:
    assert image_project.testing.__all__ == TESTING_NAMES
    assert all(hasattr(image_project.testing, name) for name in TESTING_NAMES)


@pytest.mark.parametrize("name", [n for n in ROOT_NAMES if n != "__version__"])
def test_each_root_name_is_the_object_of_its_home_module(name: str) -> None:
    value = getattr(image_project, name)
    home = importlib.import_module(image_project._HOME_OF[name])
    assert value is getattr(home, name)
    assert home.__name__ != "image_project" and not home.__name__.startswith("image_project._")


def test_the_version_is_the_installed_distribution_s() -> None:
    from importlib.metadata import version

    assert image_project.__version__ == version("image_project")


def test_an_unknown_root_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'no_such_name'"):
        _ = image_project.no_such_name  # type: ignore[attr-defined]


def test_the_root_imports_none_of_the_package_s_modules() -> None:
    """The root's module-level imports are the standard library's only (its public names
    come on first use), so ``import image_project``, which every way in runs first, stays as
    cheap as it was when the root exported nothing."""
    assert image_project.__file__ is not None
    tree = ast.parse(Path(image_project.__file__).read_text(encoding="utf-8"))
    eager = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            eager += [a.name for a in stmt.names]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
            eager.append(stmt.module or ".")
    assert [m for m in eager if m.split(".")[0] not in sys.stdlib_module_names] == []
    assert not any(m.startswith("typing") for m in eager), "typing costs start-up time"


# --------------------------------------------------------------------------- the docs

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def doc_imports(text: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import of ``image_project`` in the Python blocks of a
    Markdown text (``import image_project.x`` gives names ``[]``)."""
    found: list[tuple[str, list[str]]] = []
    for language, code in _FENCE.findall(text):
        if language not in ("python", "py"):
            continue
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("image_project"):
                found.append((node.module or "", [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(a.name, []) for a in node.names if a.name.startswith("image_project")]
    return found


def import_problems(imports: list[tuple[str, list[str]]]) -> list[str]:
    found = []
    for module, names in imports:
        public = PUBLIC_MODULES.get(module)
        if public is None:
            found.append(f"imports the internal module {module}")
            continue
        found += [f"imports {module}.{n}, not a public name" for n in names if n not in public]
    return found


DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_the_docs_import_only_public_names(page: Path) -> None:
    found = import_problems(doc_imports(page.read_text(encoding="utf-8")))
    assert not found, f"{page.relative_to(REPO)}: " + "; ".join(found)


def test_the_docs_check_sees_an_internal_import() -> None:
    text = (
        "```python\nfrom image_project.record import RunRecord\nimport image_project as ip\n"
        "from image_project import run_generation, RunState\n```\n"
        "```bash\nfrom image_project.engine import x\n```\n"
    )
    assert import_problems(doc_imports(text)) == [
        "imports the internal module image_project.record",
        "imports image_project.RunState, not a public name",
    ]


# --------------------------------------------------------------------------- every module


def _module_names() -> list[str]:
    def fail(name: str) -> None:  # called while the import error is being handled
        raise ImportError(f"cannot import {name} while walking image_project") from (
            sys.exc_info()[1]
        )

    walked = pkgutil.walk_packages(image_project.__path__, "image_project.", onerror=fail)
    return ["image_project", *sorted(info.name for info in walked)]


@pytest.mark.parametrize("name", _module_names())
def test_every_module_imports(name: str) -> None:
    assert importlib.import_module(name).__name__ == name


PUBLIC_FILES = {"image_project/__init__.py", "image_project/testing.py"}


def modules_declaring_all(root: Path) -> list[str]:
    """The package's files, other than the two public modules, that assign ``__all__``
    at their top level: an internal module declares no surface of its own."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign | ast.AugAssign)
                else []
            )
            if rel not in PUBLIC_FILES and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in targets
            ):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_only_the_root_and_testing_declare_all() -> None:
    assert modules_declaring_all(Path(image_project.__file__).parent) == []


def test_the_all_check_sees_an_internal_list(tmp_path: Path) -> None:
    """Control: each way of assigning ``__all__`` in an internal module is seen; the public
    modules' lists are not."""
    pkg = tmp_path / "image_project"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__all__ = ["a"]\n', encoding="utf-8")
    (pkg / "testing.py").write_text('__all__ = ["b"]\n', encoding="utf-8")
    (pkg / "sub" / "__init__.py").write_text('__all__ = ["c"]\n', encoding="utf-8")
    (pkg / "sub" / "m.py").write_text('x = 1\n__all__: list[str] = ["x"]\n', encoding="utf-8")
    (pkg / "n.py").write_text("__all__ += ['y']\n", encoding="utf-8")
    assert modules_declaring_all(pkg) == [
        "image_project/n.py:1",
        "image_project/sub/__init__.py:1",
        "image_project/sub/m.py:2",
    ]
