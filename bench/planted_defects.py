"""The planted-defect set: rounds of idea cards where one card is sound and every other card
carries exactly one planted defect. Made once by this script and kept as data
(``bench/data/planted_defects.json``); ``bench/judging.py`` runs the product's judges on it.

Each round has three concepts from the shipped ``config/categories.csv`` (its subject, mood
and composition columns, so the card's style is free to fit the profile or not) and six
cards, valid :class:`~image_project.record.scoring.IdeaCard` s that pass the card gates:

``none``                the sound card: the subject, mood and composition, with the shipped
                        profile's likes (painterly brushwork, its palettes, its light)
``disliked_motif``      the sound scene with one of the profile's dislikes in it
``concept_contradicted`` the subject (even rounds) or the mood (odd rounds) replaced by its
                        opposite; the style still fits the profile
``incoherent_narrative`` hook and narrative are word salad (an empty one would not pass the
                        card gate, so the product would never judge it)
``near_duplicate``      the sound card reworded a little, with fewer options: a second copy
                        of the same idea (caught when it scores below the original)
``off_profile_style``   the right scene in a style the profile does not like (flat vector
                        clip-art, cold palettes; none of it a listed dislike)

Deterministic from ``--seed`` (through :func:`image_project.seeding.rng_for`)::

    python bench/planted_defects.py               # rewrite bench/data/planted_defects.json
    python bench/planted_defects.py --check       # exit 1 when the file differs
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from image_project.seeding import rng_for  # noqa: E402

DATA = REPO / "bench" / "data" / "planted_defects.json"
SEED = 36
ROUNDS = 24
DEFECTS = (
    "disliked_motif",
    "concept_contradicted",
    "incoherent_narrative",
    "near_duplicate",
    "off_profile_style",
)
SOUND = "none"

# What fits the shipped profile's likes (config/profile.csv).
_LIKED_TOUCH = (
    "soft dawn mist rolling in from the coast",
    "warm lamplight glowing from one window",
    "rain on the glass and reflections on wet stone",
    "low golden autumn light slanting through trees",
    "a cat asleep in a patch of sunlight",
    "a long colonnade of arches framing the view",
    "folk-art patterns stitched into a hanging cloth",
    "ferns drawn with the care of an old botanical plate",
)
_LIKED_MEDIUM = (
    "oil on canvas with visible brushstrokes",
    "gouache with a painterly, handmade texture",
    "thick impasto oil paint",
    "loose watercolour with visible brushwork",
)
_LIKED_PALETTE = (
    ("teal and burnt orange", "misty blue-grey with warm amber"),
    ("deep teal shadows with burnt-orange lamplight", "muted ochre and sea green"),
    ("golden ochre against muted teal", "dawn pink fading into slate blue"),
    ("burnt sienna and dusky teal", "pale mist grey with one warm orange accent"),
)

# One concrete motif per dislike of the shipped profile, and the dislike it comes from.
_DISLIKED = (
    ("Clowns", "a grinning clown with a painted face standing in the foreground"),
    ("Spiders and insects in close-up", "a huge hairy spider crawling across the scene in close-up"),
    ("Gore, body horror or anything gruesome", "gruesome open wounds and pooled blood on the ground"),
    ("Generic fantasy warriors brandishing swords", "an armoured fantasy warrior brandishing a giant sword"),
    ("Text, logos or lettering inside the image", "a huge brand logo and bold slogan lettering across the sky"),
    ("Oversaturated neon everywhere", "oversaturated neon tubes blazing on every surface"),
)  # fmt: skip

_OFF_MEDIUM = (
    "flat vector clip-art with hard digital edges",
    "sterile corporate stock-illustration style",
    "pixel-art sprites on a plain grid",
)
_OFF_PALETTE = (
    ("cold grey and lime green", "flat beige and office blue"),
    ("plain white with one corporate purple", "silver grey and mint"),
)

_OTHER_SUBJECT = (
    "a crowded supermarket checkout queue under strip lights",
    "a motorway interchange jammed at rush hour",
    "a budget meeting around a conference-room table",
    "an automatic car wash on a busy forecourt",
    "a stack of shipping containers in a parking lot",
    "a call centre full of ringing telephones",
)
_OPPOSITE_MOOD = (
    "frantic, loud and chaotic",
    "brash, cheerful and hurried",
    "aggressive and jarring",
    "bored and indifferent",
)
_SALAD = [
    "because",
    "seven",
    "under",
    "the",
    "folded",
    "arithmetic",
    "whose",
    "inverted",
    "Tuesday",
    "listens",
    "sideways",
    "although",
    "gravel",
    "hums",
    "if",
    "never",
    "spoon",
    "before",
    "the",
    "yesterday,",
    "quietly",
    "purple",
    "staircase",
    "of",
    "maybe",
    "eleven",
    "elbows",
    "dissolving",
    "into",
    "whichever",
    "receipt",
]

_WORDS = {
    "lens": ("seen from a quiet distance", "seen close at hand", "seen from slightly above"),
    "time": ("at first light", "in the last hour of dusk", "on a grey rainy morning"),
}


def _short(concept: str) -> tuple[str, str]:
    """``"Name: description"`` as (name, description)."""
    name, _, description = concept.partition(":")
    return name.strip(), description.strip()


def _categories() -> list[dict[str, str]]:
    with (REPO / "config" / "categories.csv").open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _card(
    hook: str,
    narrative: str,
    composition: list[str],
    palette: list[str],
    medium: list[str],
    mood: list[str],
    avoid: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "hook": hook,
        "narrative": narrative,
        "options": {"composition": composition, "palette": palette, "medium": medium, "mood": mood},
        "avoid": avoid or [],
    }


def _salad(rng: random.Random, extra: list[str], n: int) -> str:
    words = [*_SALAD, *extra]
    rng.shuffle(words)
    return " ".join(words[:n]).capitalize() + "."


def make_round(index: int, seed: int, rows: list[dict[str, str]]) -> dict[str, Any]:
    """Round ``index``: its concepts and six cards, each with its defect label."""
    rng = rng_for(seed, "planted_defects", index)
    subject = rows[index % len(rows)]["Subject Matter"]
    mood = rng.choice(rows)["Mood"]
    composition = rng.choice(rows)["Composition"]
    s_name, s_desc = _short(subject)
    m_name, m_desc = _short(mood)
    c_name, c_desc = _short(composition)
    touch = rng.choice(_LIKED_TOUCH)
    medium = rng.choice(_LIKED_MEDIUM)
    palette = list(rng.choice(_LIKED_PALETTE))
    time, lens = rng.choice(_WORDS["time"]), rng.choice(_WORDS["lens"])
    comp = [f"{c_name.lower()} with the {s_name.lower()} as focus", f"a wide view {lens}"]
    moods = [f"{m_name.lower()}: {m_desc.split(',')[0]}"]

    sound = _card(
        f"The {s_name.lower()} {time}, {touch}.",
        f"{s_desc.capitalize()}, {lens}. {touch.capitalize()} gives the scene its warmth, "
        f"and the whole picture feels {m_name.lower()}: {m_desc}. "
        f"The layout follows {c_name.lower()}: {c_desc}.",
        comp,
        palette,
        [medium],
        moods,
        ["harsh midday light"],
    )
    dislike, motif = rng.choice(_DISLIKED)
    disliked = _card(
        f"The {s_name.lower()} {time}, with {motif}.",
        f"{s_desc.capitalize()}, {lens}. In the middle of it, {motif}, drawing every eye; "
        f"the picture feels {m_name.lower()}. The layout follows {c_name.lower()}: {c_desc}.",
        comp,
        palette,
        [medium],
        moods,
    )
    if index % 2 == 0:
        other = rng.choice(_OTHER_SUBJECT)
        contradicted_concept = subject
        contradicted = _card(
            f"Not the {s_name.lower()} at all: {other}, {time}.",
            f"Instead of the {s_name.lower()}, the picture shows {other}, {lens}. "
            f"It feels {m_name.lower()}, and the layout follows {c_name.lower()}: {c_desc}.",
            [f"{c_name.lower()} with the crowd as focus", f"a wide view {lens}"],
            palette,
            [medium],
            moods,
        )
    else:
        opposite = rng.choice(_OPPOSITE_MOOD)
        contradicted_concept = mood
        contradicted = _card(
            f"The {s_name.lower()} {time}, anything but {m_name.lower()}.",
            f"{s_desc.capitalize()}, {lens}. Nothing about it is {m_name.lower()}: the scene "
            f"is {opposite}. The layout follows {c_name.lower()}: {c_desc}.",
            comp,
            palette,
            [medium],
            [opposite],
        )
    topical = [w.lower().strip(",.") for w in (s_name + " " + touch).split()]
    salad = _card(
        _salad(rng, topical, 9),
        _salad(rng, topical, 30),
        ["sideways of the before", "a corner which Tuesday"],
        ["elbow of teal maybe", "receipt orange dissolving"],
        ["spoon gravel"],
        ["whichever inverted"],
    )
    duplicate = _card(
        f"The {s_name.lower()} {time}, with {touch}.",
        f"{s_desc.capitalize()}, {lens}. {touch.capitalize()} warms the scene, which feels "
        f"{m_name.lower()}. The layout follows {c_name.lower()}.",
        [comp[1], comp[0]],
        [palette[1], palette[0]],
        [medium],
        [m_name.lower()],
    )
    off_palette = list(rng.choice(_OFF_PALETTE))
    off_medium = rng.choice(_OFF_MEDIUM)
    off = _card(
        f"The {s_name.lower()} as {off_medium}.",
        f"{s_desc.capitalize()}, {lens}, drawn as {off_medium}: smooth flat shapes, no "
        f"brushwork, no texture, even shadowless light. It feels {m_name.lower()}; the layout "
        f"follows {c_name.lower()}: {c_desc}.",
        comp,
        off_palette,
        [off_medium],
        moods,
    )
    cards = [
        {"defect": SOUND, "card": sound},
        {"defect": "disliked_motif", "detail": dislike, "card": disliked},
        {"defect": "concept_contradicted", "detail": contradicted_concept, "card": contradicted},
        {"defect": "incoherent_narrative", "card": salad},
        {"defect": "near_duplicate", "detail": "of the sound card", "card": duplicate},
        {"defect": "off_profile_style", "detail": off_medium, "card": off},
    ]
    return {"round": index, "concepts": [subject, mood, composition], "cards": cards}


def generate(seed: int = SEED, rounds: int = ROUNDS) -> dict[str, Any]:
    """The whole set as the JSON document."""
    rows = _categories()
    return {
        "seed": seed,
        "profile": "config/profile.csv",
        "categories": "config/categories.csv",
        "defects": list(DEFECTS),
        "rounds": [make_round(i, seed, rows) for i in range(rounds)],
    }


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--out", type=Path, default=DATA)
    ap.add_argument("--check", action="store_true", help="exit 1 when the file differs")
    args = ap.parse_args(argv)
    text = render(generate(args.seed, args.rounds))
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'DIFFERS (run without --check)'}")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
