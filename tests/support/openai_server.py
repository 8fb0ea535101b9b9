"""The tests' name for the fake OpenAI server: :mod:`image_project.testing` ships it (the
package's users and the benchmarks serve the same one); see its module docstring."""

from image_project.testing import (
    HTML_PAGE,
    TINY_PNG,
    WAIT_BOUND_S,
    OpenAIServer,
    RateWindow,
    RecordedRequest,
    Reply,
    chat_completion,
    error_body,
    image_response,
    openai_duration,
    truncated,
)

__all__ = [
    "HTML_PAGE",
    "TINY_PNG",
    "WAIT_BOUND_S",
    "OpenAIServer",
    "RateWindow",
    "RecordedRequest",
    "Reply",
    "chat_completion",
    "error_body",
    "image_response",
    "openai_duration",
    "truncated",
]
