"""The words of a request: its salient phrases, the text a reply may draw on, token estimates."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from image_project import markers
from image_project.backends.base import Message


def estimate_tokens(text: str) -> int:
    """Roughly ``words * 4 / 3`` tokens (0 for blank text); good enough for offline usage."""
    words = len(text.split())
    return math.ceil(words * 4 / 3)


_STOPWORDS_TEXT = """
    a about above after again against all almost also am an and any are aren't as at be because
    been before being below between both but by can cannot could couldn't did didn't do does
    doesn't doing don't down during each either else even ever every few for from further had
    hadn't has hasn't have haven't having he her here hers herself him himself his how however
    i if in into is isn't it it's its itself just let's like made make many may me might more
    most much must my myself neither no nor not now of off often on once one only or other ought
    our ours ourselves out over own per perhaps quite rather really same she should shouldn't so
    some such than that that's the their theirs them themselves then there there's these they
    this those though through thus to too two under until up upon us very via was wasn't we
    were weren't what what's when where whether which while who whom whose why will with within
    without would wouldn't yet you your yours yourself yourselves three four five six seven
    eight nine ten
    answer answers array arrays ask asked based brief briefly concise create describe detail
    each exactly example following format generate give given json keep list lists new note
    output please plain print produce prompt provide punctuation quote quotes reply respond
    response return returns short should string strings sure task text title titles use used
    using word words write case letters item items entry entries element elements reply only
    image images card cards idea ideas concepts describing rewrite refine refined improve
    suggest version versions
    draft drafts critique critiques critic critics circle voice persona representative
    chameleon hemingway munch vinci enclave consensus synthesise synthesize revised revise
    last assistant weigh counts veto vetoes cautions agreement clarity preferences issues
    edits sections characters total form final labelled lines omit apply requirement
    stage stages theme themes propose message messages key why what's step let agree prefer
    together held
"""
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
_FALLBACK_WORDS = (
    "light",
    "colour",
    "texture",
    "horizon",
    "shadow",
    "rhythm",
    "stillness",
    "contrast",
    "morning",
    "motion",
)
_TITLE_CLOSERS = (
    "Reverie",
    "Study",
    "Nocturne",
    "Echoes",
    "Drift",
    "Interlude",
    "Vigil",
    "Chorus",
    "Fable",
    "Hymn",
)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]")
_CLAUSE_SPLIT_RE = re.compile(r"[.,;:!?()\[\]{}\"\n]+")


def _tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD_RE.findall(text.replace("\u2019", "'"))]


def _is_salient(word: str) -> bool:
    return len(word) >= 3 and word not in _STOPWORDS


def _salient_units(text: str) -> list[str]:
    """Runs of up to three consecutive salient words, most frequent first, then by position."""
    units: list[str] = []
    for clause in _CLAUSE_SPLIT_RE.split(text):
        run: list[str] = []
        for word in [*_tokens(clause), ""]:
            if word and _is_salient(word):
                run.append(word)
                continue
            units.extend(" ".join(run[i : i + 3]) for i in range(0, len(run), 3))
            run = []
    counts = Counter(units)
    first = {u: i for i, u in reversed(list(enumerate(units)))}
    return sorted(counts, key=lambda u: (-counts[u], first[u]))


_DO_NOT_COPY_RE = re.compile(
    rf"{re.escape(markers.DO_NOT_COPY_OPEN)}.*?(?:{re.escape(markers.DO_NOT_COPY_CLOSE)}|\Z)",
    re.DOTALL | re.IGNORECASE,
)


def _last_user_text(messages: Sequence[Message]) -> str:
    """The last user message, without its ``<do_not_copy>`` sections."""
    text = next(
        (m.content for m in reversed(messages) if m.role == "user"),
        messages[-1].content if messages else "",
    )
    return _DO_NOT_COPY_RE.sub(" ", text)


def _pool(units: Sequence[str], temperature: float) -> list[str]:
    """The units a reply may use: the top four or a third at temperature 0, all at 1 and above.

    Padded with neutral words to at least four so that no sentence repeats itself.
    """
    share = 0.35 + 0.65 * min(max(temperature, 0.0), 1.0)
    pool = list(units[: max(4, math.ceil(len(units) * share))])
    pool += [w for w in _FALLBACK_WORDS if w not in pool][: max(0, 4 - len(pool))]
    return pool
