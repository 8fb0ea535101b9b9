"""image_project: art concepts and a taste profile to a captioned image through a concurrent,
audited LLM prompt pipeline.

The public surface is the names in :data:`__all__` below and the module
:mod:`image_project.testing` (fakes and the fake OpenAI server for tests); docs/api.md says
what each is for. Everything else (the subpackages and modules, whose paths the names below
come from) is internal and may change without notice. The names are loaded on first use, so
``import image_project`` (and the command line's start-up) costs nothing extra.

    import image_project as ip

    cfg = ip.load_config(root=Path("."), overrides=["prompt.random_seed=42"])
    backends = ip.make_backends(cfg, os.environ)
    result = anyio.run(functools.partial(ip.run_generation, cfg, backends))
    record = ip.read_transcript(result.transcript_path)
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)

__all__ = [
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

_HOMES: dict[str, tuple[str, ...]] = {
    # each public name's home: the module that defines it
    "image_project.analysis.panel": ("panel_stats",),
    "image_project.analysis.table": ("format_panel_table",),
    "image_project.artifacts.transcript": ("read_transcript",),
    "image_project.backends.base": (
        "ImageBackend",
        "ImageReply",
        "ImageRequest",
        "JsonSchema",
        "Message",
        "TextBackend",
        "TextReply",
        "TextRequest",
        "Usage",
    ),
    "image_project.backends.factory": (
        "Backends",
        "make_backends",
    ),
    "image_project.config.loading": ("load_config",),
    "image_project.config.models": ("AppConfig",),
    "image_project.context.base": (
        "Injection",
        "Injector",
        "InjectorInput",
    ),
    "image_project.errors": (
        "AuthenticationError",
        "BackendConnectionError",
        "BackendError",
        "BackendTimeoutError",
        "ConfigError",
        "ContextInjectorError",
        "EmptyPromptError",
        "EmptyResponseError",
        "ImageProjectError",
        "InputFileError",
        "MalformedResponseError",
        "ModelOutputError",
        "NetworkDisabledError",
        "PipelineDefinitionError",
        "PromptTooLongError",
        "QuotaExceededError",
        "RateLimitedError",
        "RefusalError",
        "RequestRejectedError",
        "RetryAfterTooLongError",
        "ServerError",
        "StepFailedError",
        "StoreError",
        "UpscaleError",
    ),
    "image_project.record.context": ("ContextRecord",),
    "image_project.record.events": (
        "ActionEvent",
        "ChatEvent",
        "ImageEvent",
        "StepEvent",
    ),
    "image_project.record.gates": ("gate_counts",),
    "image_project.record.run": (
        "RunRecord",
        "run_status",
    ),
    "image_project.record.schema": ("transcript_json_schema",),
    "image_project.record.scoring": ("ScoringRecord",),
    "image_project.review.site": ("build_site",),
    "image_project.review.source": ("records_from_transcripts",),
    "image_project.run.batch": ("run_batch",),
    "image_project.run.driver": ("run_generation",),
    "image_project.run.state": (
        "Inputs",
        "RunFailed",
        "RunResult",
        "load_inputs",
    ),
    "image_project.seeding": (
        "derive_seed",
        "rng_for",
    ),
    "image_project.store": ("open_store",),
}

_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


if not TYPE_CHECKING:  # the type checker sees the imports below, and no other name

    def __getattr__(name: str) -> Any:
        """Load a public name from its home module on first use (PEP 562)."""
        if name == "__version__":
            from importlib.metadata import version

            value: Any = version("image_project")
        elif name in _HOME_OF:
            from importlib import import_module

            value = getattr(import_module(_HOME_OF[name]), name)
        else:
            raise AttributeError(f"module 'image_project' has no attribute {name!r}")
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from typing import Any

    from image_project.analysis.panel import panel_stats
    from image_project.analysis.table import format_panel_table
    from image_project.artifacts.transcript import read_transcript
    from image_project.backends.base import (
        ImageBackend,
        ImageReply,
        ImageRequest,
        JsonSchema,
        Message,
        TextBackend,
        TextReply,
        TextRequest,
        Usage,
    )
    from image_project.backends.factory import Backends, make_backends
    from image_project.config.loading import load_config
    from image_project.config.models import AppConfig
    from image_project.context.base import Injection, Injector, InjectorInput
    from image_project.errors import (
        AuthenticationError,
        BackendConnectionError,
        BackendError,
        BackendTimeoutError,
        ConfigError,
        ContextInjectorError,
        EmptyPromptError,
        EmptyResponseError,
        ImageProjectError,
        InputFileError,
        MalformedResponseError,
        ModelOutputError,
        NetworkDisabledError,
        PipelineDefinitionError,
        PromptTooLongError,
        QuotaExceededError,
        RateLimitedError,
        RefusalError,
        RequestRejectedError,
        RetryAfterTooLongError,
        ServerError,
        StepFailedError,
        StoreError,
        UpscaleError,
    )
    from image_project.record.context import ContextRecord
    from image_project.record.events import ActionEvent, ChatEvent, ImageEvent, StepEvent
    from image_project.record.gates import gate_counts
    from image_project.record.run import RunRecord, run_status
    from image_project.record.schema import transcript_json_schema
    from image_project.record.scoring import ScoringRecord
    from image_project.review.site import build_site
    from image_project.review.source import records_from_transcripts
    from image_project.run.batch import run_batch
    from image_project.run.driver import run_generation
    from image_project.run.state import Inputs, RunFailed, RunResult, load_inputs
    from image_project.seeding import derive_seed, rng_for
    from image_project.store import open_store

    __version__: str
