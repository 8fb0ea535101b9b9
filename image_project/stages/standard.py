"""The standard prompt pipeline: dislike rewrite, six prompt stages, tree-of-thought refinement.

Code on an engine :class:`~image_project.engine.Scope`; knows prompts and policy, not
transport or files. The run's inputs reach the prompts as one typed :class:`Brief` (the
concepts after the dislike rewrite, the rendered profile, the dislikes). Values pass as typed
step results: the enclave's critiques and drafts are the answers its prompts are written
from, each stage returns its output, and the pipeline the last one's: the final prompt.

Shape (refinement ``final``)::

    pipeline                                   merge all_messages
      initial_prompt/draft                     each stage block merges last_response
      section_2_choice/draft
      section_2b_title_and_story/draft
      section_3_message_focus/draft
      section_4_concise_description/draft
      dalle_prompt_creation/                   its last response: the final prompt
        draft
        tot_enclave/fanout/{5 critics}         concurrent, merge none
        tot_enclave/reduce/consensus/{3}       concurrent, merge none, from the critiques
        tot_enclave/reduce/final_consensus     the stage's only output, from the drafts

``per_stage`` wraps every stage in the enclave (as the original project did); ``none`` keeps
drafts only. Every chat step carries a seed derived from the run seed and its path.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, StringConstraints, create_model, model_validator

from image_project.engine.budget import TokenBudget
from image_project.engine.nodes import ChatStep, MergeMode
from image_project.engine.outcome import Answer
from image_project.engine.output import JsonOutput, ReaskPolicy, TextOutput
from image_project.engine.scope import Scope
from image_project.record.base import RecordModel
from image_project.record.gates import gate_error
from image_project.record.textshape import repetition_loop
from image_project.seeding import derive_seed

Refinement = Literal["final", "per_stage", "none"]
DALLE_PROMPT_KEY = "dalle_prompt"
CONCEPTS_KEY = "concepts"
"""The dislike rewrite's value: the rewritten concepts (its JSON answer's key)."""

SYSTEM_PROMPT = (
    "You are an enclave of artists who together design one meaningful, striking image. You "
    "weave disparate elements into a cohesive whole with a clear point of view, and you "
    "write for one specific person whose taste profile you are given. Avoid cliché and "
    "empty grandeur. Keep every answer concise."
)


@dataclass(frozen=True)
class Brief:
    """What the prompt stages are about: the concepts (after the dislike rewrite), the
    person's profile rendered for prompts, and the dislikes."""

    concepts: tuple[str, ...]
    preferences: str
    dislikes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Guidance:
    """The run's context guidance (:mod:`image_project.context`) where
    ``context.injection_location`` puts it: ``prompt`` is embedded at the end of the first
    stage's prompt (the standard pipeline's ``initial_prompt``; in a scoring run every idea
    and variant generator's, which write the ideas), ``system`` appended to the system prompt
    of every generating call (the run's conversation, and the idea and variant generators'
    own). Empty strings put it nowhere. Judges, the selector, the hints, the dislike rewrite
    and the title never get it: no function that writes their prompts takes a Guidance."""

    prompt: str = ""
    system: str = ""

    @classmethod
    def placed(cls, text: str, location: str) -> Guidance:
        """``text`` at ``location`` (``system``, ``prompt`` or ``both``)."""
        return cls(
            prompt=text if location in ("prompt", "both") else "",
            system=text if location in ("system", "both") else "",
        )

    def in_prompt(self, prompt: str) -> str:
        return f"{prompt}\n\n{self.prompt}" if self.prompt else prompt

    def in_system(self, system_prompt: str) -> str:
        return f"{system_prompt}\n\n{self.system}" if self.system else system_prompt


NO_GUIDANCE = Guidance()
"""Context off: the guidance goes nowhere."""


def concept_lines(concepts: Sequence[str]) -> str:
    """The concepts as ``- concept`` lines."""
    return "\n".join(f"- {c}" for c in concepts)


def _initial(brief: Brief) -> str:
    return (
        "We are creating one artwork for the person whose preferences follow. Treat the "
        "preferences as authoritative: lean into the likes and never depict the dislikes.\n\n"
        f"Preferences:\n{brief.preferences}\n\n"
        "Blend these three randomly chosen concepts into one image:\n"
        f"{concept_lines(brief.concepts)}\n\n"
        "Propose FOUR distinct central themes, each with the story it tells and the message it "
        "carries. Be sophisticated and specific, not cliché or milquetoast; say each with "
        "conviction in two or three sentences."
    )


_STAGE_PROMPTS: dict[str, str] = {
    "section_2_choice": (
        "As an enclave, reach consensus: which of the four themes is the most compelling and "
        "cohesive for this person? Name it and explain briefly why it beats the others."
    ),
    "section_2b_title_and_story": (
        "For the chosen theme give: a working title; the story; the role each of the three "
        "concepts plays; and a concrete visual description (subject, setting, mood, "
        "perspective, style, period, colours, light). Drop any element that does not serve "
        "the story."
    ),
    "section_3_message_focus": (
        "Sharpen the message. What is the single key message? Why does it matter to an "
        "artist? How could it be bolder? What detracts from it and should be removed, and "
        "what small addition would strengthen it?"
    ),
    "section_4_concise_description": (
        "Write a concise, detailed description of the final image for an image-generation "
        "model. Put the most important details first; let the narrative show through visual "
        "details and symbolism; use action and emotion verbs; state the style, medium and "
        "colour palette explicitly; keep it one coherent scene."
    ),
    DALLE_PROMPT_KEY: (
        "Write the final prompt for the image model. Output ONLY the prompt text, under 3500 "
        "characters, as short labelled lines (omit any that do not apply): Deliverable; "
        "Subject and action; Setting and context; Style and medium (2-5 concrete cues); "
        "Composition and camera; Lighting and palette; Constraints (MUST INCLUDE / MUST NOT "
        "INCLUDE, with every dislike as a must-not). Use concrete nouns, no hype, one "
        "requirement per line."
    ),
}

StagePrompt = str | Callable[[Brief], str]
"""A stage's prompt: fixed text, or text built from the run's :class:`Brief`."""

# Stage id -> prompt, in pipeline order. The last one's output is the image prompt.
STAGES: tuple[tuple[str, StagePrompt], ...] = (
    ("initial_prompt", _initial),
    ("section_2_choice", _STAGE_PROMPTS["section_2_choice"]),
    ("section_2b_title_and_story", _STAGE_PROMPTS["section_2b_title_and_story"]),
    ("section_3_message_focus", _STAGE_PROMPTS["section_3_message_focus"]),
    ("section_4_concise_description", _STAGE_PROMPTS["section_4_concise_description"]),
    ("dalle_prompt_creation", _STAGE_PROMPTS[DALLE_PROMPT_KEY]),
)


def stage_prompt(stage: str, brief: Brief) -> str:
    """The prompt of ``stage`` (one of :data:`STAGES`) for this run's brief."""
    prompt = dict(STAGES)[stage]
    return prompt if isinstance(prompt, str) else prompt(brief)


# Critic personas of the tree-of-thought enclave: (name, label, persona, sees).
CRITICS: tuple[tuple[str, str, str, str | None], ...] = (
    (
        "hemingway",
        "Hemingway",
        "terse and exacting; cut every word and element that does not earn its place",
        None,
    ),
    ("munch", "Munch", "emotion first; make the mood and inner tension unmistakable", None),
    (
        "da_vinci",
        "da Vinci",
        "systems and cohesion; check that every part fits and the scene is physically achievable",
        None,
    ),
    (
        "representative",
        "the Representative",
        "speaks for the viewer; optimise for their likes, veto anything touching their dislikes, and label vetoes explicitly",
        "preferences",
    ),
    (
        "chameleon",
        "the Chameleon",
        "match the genre and style the draft implies and sharpen its conventions",
        "concepts",
    ),
)
CONSENSUS_DRAFTS = 3
PROSE = TokenBudget("prose")
PROSE_REASK = ReaskPolicy(max=1, style="restate")
"""A prose answer is re-asked once, restated (the same history and one user message: the prompt
with the reason, never the rejected answer, so the cut answer is no assistant turn to
continue), when the server cut it at its token limit (reason ``cut_off``) or it is caught in a
repetition loop (:data:`PROSE_OUTPUT`); still bad, the run fails with that reason."""


def _checked_prose(text: str) -> str:
    if repetition_loop(text) is not None:
        raise gate_error(
            "prose_loop",
            "the answer is caught in a repetition loop (a phrase said again and again back to "
            "back); say each thing once",
        )
    return text


PROSE_OUTPUT: TextOutput[str] = TextOutput(_checked_prose)
"""A prose answer: any text that is not caught in a repetition loop (the ``prose_loop``
gate, :func:`~image_project.record.textshape.repetition_loop`)."""
"""The token limit of every prose step (stage drafts, critics, consensus drafts)."""


def _critic_prompt(label: str, persona: str, sees: str | None, brief: Brief) -> str:
    extra = ""
    if sees == "preferences":
        extra = f"\n\nThe viewer's preferences (authoritative):\n{brief.preferences}"
    elif sees == "concepts":
        extra = f"\n\nThe concepts this artwork blends:\n{concept_lines(brief.concepts)}"
    return (
        f"You are {label}. Persona: {persona}. You are one voice in a critique circle and "
        "cannot see the others. Critique and refine ONLY the last assistant response above. "
        "Reply with '## Issues' and '## Edits' sections, at most 1000 characters in total." + extra
    )


def _consensus_prompt(critiques: Sequence[Answer[str]]) -> str:
    voices = "\n\n".join(
        f"### {label}\n{critique.value}"
        for (_, label, _, _), critique in zip(CRITICS, critiques, strict=True)
    )
    return (
        "Five critics reviewed the last assistant response. Weigh them: the "
        "Representative counts most and may veto; the Chameleon counts second.\n\n"
        f"{voices}\n\n"
        "Output ONLY the revised version of the last assistant response, in the same form."
    )


def _final_prompt(drafts: Sequence[Answer[str]]) -> str:
    revised = [f"### Draft {i}\n{draft.value}" for i, draft in enumerate(drafts, start=1)]
    return (
        "Synthesise these revised drafts into one final version of the last assistant "
        "response. Prefer what they agree on, clarity, the viewer's preferences and the "
        "Representative's cautions.\n\n" + "\n\n".join(revised) + "\n\n"
        "Output ONLY the final version, in the same form."
    )


def _prose(
    name: str, prompt: str, *, seed: int, temperature: float, merge: MergeMode = "all_messages"
) -> ChatStep[str]:
    """A prose step of the pipeline: its token limit, its loop gate and its one re-ask."""
    return ChatStep(
        name=name,
        prompt=prompt,
        temperature=temperature,
        merge=merge,
        seed=seed,
        max_output_tokens=PROSE,
        output=PROSE_OUTPUT,
        reask=PROSE_REASK,
    )


async def tot_enclave(
    scope: Scope, stage: str, *, brief: Brief, run_seed: int, temperature: float
) -> str:
    """``tot_enclave`` in ``scope``: five critics concurrently, three consensus drafts
    concurrently (each reading the critiques), one synthesis of the drafts, whose text it
    returns; only the synthesis reaches the conversation."""

    def step(name: str, prompt: str, merge: MergeMode = "none") -> ChatStep[str]:
        seed = derive_seed(run_seed, "step", stage, "tot_enclave", name)
        return _prose(name, prompt, seed=seed, temperature=temperature, merge=merge)

    async with scope.scope("tot_enclave", merge="all_messages") as enclave:
        critiques = await enclave.gather(
            "fanout",
            [
                step(name, _critic_prompt(label, persona, sees, brief))
                for name, label, persona, sees in CRITICS
            ],
        )
        async with enclave.scope("reduce", merge="all_messages") as reduce:
            drafts = await reduce.gather(
                "consensus",
                [
                    step(f"consensus_{i}", _consensus_prompt(critiques))
                    for i in range(1, CONSENSUS_DRAFTS + 1)
                ],
            )
            final = await reduce.ask(step("final_consensus", _final_prompt(drafts), "all_messages"))
    return final.value


async def run_stage(
    scope: Scope,
    stage: str,
    prompt: str,
    *,
    brief: Brief,
    refine: bool,
    run_seed: int,
    temperature: float,
) -> str:
    """One stage in ``scope``: a draft, then (``refine``) the ToT enclave. The stage merges
    its last response (its prompt answered by its output) and returns that output: the
    final prompt for the last stage."""
    async with scope.scope(stage, merge="last_response") as block:
        seed = derive_seed(run_seed, "step", stage, "draft")
        draft = await block.ask(_prose("draft", prompt, seed=seed, temperature=temperature))
        output = draft.value
        if refine:
            output = await tot_enclave(
                block, stage, brief=brief, run_seed=run_seed, temperature=temperature
            )
    return output


async def prompt_pipeline(
    scope: Scope,
    *,
    brief: Brief,
    run_seed: int,
    refinement: Refinement,
    temperature: float,
    guidance: Guidance = NO_GUIDANCE,
) -> str:
    """The six prompt stages, as ``scope``'s next child ``pipeline``; the last one's output
    is the final image prompt, returned. ``guidance.prompt`` is embedded in the first stage's
    prompt (its ``system`` part is the caller's, who owns the conversation's system
    prompt)."""
    last = len(STAGES) - 1
    final_prompt = ""
    async with scope.scope("pipeline", merge="all_messages") as pipeline:
        for i, (stage, _) in enumerate(STAGES):
            prompt = stage_prompt(stage, brief)
            final_prompt = await run_stage(
                pipeline,
                stage,
                guidance.in_prompt(prompt) if i == 0 else prompt,
                brief=brief,
                refine=refinement == "per_stage" or (refinement == "final" and i == last),
                run_seed=run_seed,
                temperature=temperature,
            )
    return final_prompt


# -- dislike rewrite --------------------------------------------------------------------

_DISLIKE_SYSTEM = (
    "You rewrite art concepts so that none conflicts with a person's dislikes. Rewrite only a "
    "concept that clearly conflicts; keep the others exactly as given. Keep variety, keep the "
    "count and the order, and do not over-censor. Reply with ONLY a JSON object whose "
    '"concepts" key holds the concepts as an array of strings.'
)

_Concept = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]


class ConceptRewrite(RecordModel):
    """The dislike rewrite's answer: the concepts, same count and order (an object holding
    the array, since strict structured outputs need an object at the root)."""

    model_config = ConfigDict(title="concept_rewrite", strict=True)
    expected: ClassVar[int] = 0

    concepts: list[_Concept]

    @model_validator(mode="before")
    @classmethod
    def _count(cls, data: Any) -> Any:
        concepts = data.get("concepts") if isinstance(data, dict) else None
        if cls.expected and isinstance(concepts, list) and len(concepts) != cls.expected:
            raise ValueError(f"expected {cls.expected} concepts, got {len(concepts)}")
        return data


@functools.lru_cache(maxsize=16)
def _rewrite_model(count: int) -> type[ConceptRewrite]:
    model = create_model(
        "ConceptRewrite",
        __base__=ConceptRewrite,
        concepts=(list[_Concept], Field(min_length=count, max_length=count)),
    )
    model.expected = count
    return model


_REWRITE_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "over",
        "under",
        "that",
        "this",
        "these",
        "those",
        "its",
        "their",
        "his",
        "her",
        "are",
        "was",
        "were",
        "been",
        "being",
        "has",
        "have",
        "had",
        "not",
        "but",
        "nor",
        "any",
        "all",
        "some",
        "each",
        "every",
        "very",
    ]
)
_WORD_RE = re.compile(r"[a-z]+")


def _content_words(text: str) -> set[str]:
    """The words of ``text`` that carry its meaning: three letters or more, common function
    words aside, a plural ``s`` folded (``forests`` and ``forest`` are one word)."""
    words = (w for w in _WORD_RE.findall(text.lower()) if len(w) >= 3)
    return {
        w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
        for w in words
        if w not in _REWRITE_STOPWORDS
    }


def dislike_phrases(dislikes: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Each dislike cut into its phrases (at commas, semicolons, slashes and ``or``) as word
    sequences: ``"Gore, body horror or anything gruesome"`` gives ``gore``, ``body horror``
    and ``anything gruesome``."""
    phrases: list[tuple[str, ...]] = []
    for dislike in dislikes:
        for part in re.split(r"[,;/]|\bor\b", dislike.lower()):
            words = tuple(_WORD_RE.findall(part))
            if words and words not in phrases:
                phrases.append(words)
    return tuple(phrases)


def _contains(words: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    return any(tuple(words[i : i + n]) == tuple(phrase) for i in range(len(words) - n + 1))


def check_rewrite(
    original: Sequence[str], rewritten: Sequence[str], dislikes: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The rewrite's gates, concept by concept: (``rewrite_dislike`` problems,
    ``rewrite_meaning`` problems).

    ``rewrite_dislike``: a rewritten concept may not contain a dislike phrase
    (:func:`dislike_phrases`, whole words in order, any case). ``rewrite_meaning``: a concept
    whose original contained no dislike phrase (so had no reason to change) must share a
    content word with its original; one whose original did may be replaced freely."""
    phrases = dislike_phrases(dislikes)
    disliked: list[str] = []
    drifted: list[str] = []
    for i, (before, after) in enumerate(zip(original, rewritten, strict=True)):
        words = _WORD_RE.findall(after.lower())
        hits = [" ".join(p) for p in phrases if _contains(words, p)]
        if hits:
            disliked.append(f"concept {i + 1} contains the dislike {hits[0]!r}")
        conflicted = any(_contains(_WORD_RE.findall(before.lower()), p) for p in phrases)
        if not conflicted and not _content_words(before) & _content_words(after):
            drifted.append(f"concept {i + 1} shares no word with the original {before!r}")
    return disliked, drifted


def concept_rewrite_output(
    count: int, *, concepts: Sequence[str] = (), dislikes: Sequence[str] = ()
) -> JsonOutput[tuple[str, ...]]:
    """The rewrite's output: ``count`` non-empty concepts, as a tuple. Given the
    original ``concepts`` (and the ``dislikes``), the gates of :func:`check_rewrite` follow:
    ``gate:rewrite_dislike`` first, then ``gate:rewrite_meaning``, each re-asked with its
    reason; a rewrite still failing after the re-asks fails the run (the concepts are the
    run's subject, and the dislikes are why the step exists: neither is guessed)."""
    originals = tuple(concepts)

    def checked(answer: ConceptRewrite) -> tuple[str, ...]:
        rewritten = tuple(answer.concepts)
        if not originals:
            return rewritten
        disliked, drifted = check_rewrite(originals, rewritten, dislikes)
        if disliked:
            raise gate_error(
                "rewrite_dislike",
                "; ".join(disliked) + "; rewrite each such concept so that it avoids the "
                "dislike while keeping its idea",
            )
        if drifted:
            raise gate_error(
                "rewrite_meaning",
                "; ".join(drifted) + "; keep every concept that does not conflict exactly as "
                "given, and keep the idea of one you rewrite",
            )
        return rewritten

    return JsonOutput(_rewrite_model(count), check=checked)


def dislike_rewrite_step(
    concepts: Sequence[str], dislikes: Sequence[str], *, run_seed: int, max_reasks: int = 2
) -> ChatStep[tuple[str, ...]]:
    """One stateless call that rewrites only the concepts that conflict with a dislike; it
    hands back the concepts as its typed value. The answer passes the
    gates of :func:`check_rewrite` or is re-asked (then fails the run)."""
    return ChatStep(
        name="dislike_rewrite",
        prompt=(
            f"Concepts (JSON): {json.dumps(list(concepts), ensure_ascii=False)}\n"
            f"Dislikes (JSON): {json.dumps(list(dislikes), ensure_ascii=False)}\n"
            f'Return ONLY {{"concepts": [...]}} with exactly {len(concepts)} strings, '
            "same order."
        ),
        temperature=0.25,
        stateless=True,
        system_prompt=_DISLIKE_SYSTEM,
        merge="none",
        output=concept_rewrite_output(len(concepts), concepts=concepts, dislikes=dislikes),
        reask=ReaskPolicy(max=max_reasks, style="restate"),
        seed=derive_seed(run_seed, "step", "dislike_rewrite"),
        max_output_tokens=TokenBudget("rewrite"),
    )
