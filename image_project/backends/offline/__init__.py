"""The built-in offline backend: every model role of the pipeline, with no network and no key.

``python main.py`` on a fresh machine runs through these two classes, so they aim to look
sensible rather than merely type-check: replies reuse the words of the request, structured
requests get valid JSON, and images are real (if modest) pictures of the prompt's colours.

Contract (both classes):

* **Deterministic.** Every choice comes from one ``random.Random`` seeded with
  ``sha256(canonical JSON of the request)`` — for text ``(messages, model, temperature, seed,
  schema)``, for images ``(prompt, model, size, quality, seed)``. The same request always gives
  the same reply (byte for byte for images); changing the seed or temperature changes it.
  Nothing touches the global ``random``, the clock, files or the network, so the backends are
  safe to call concurrently. Image rendering is CPU work and runs in a worker thread
  (``anyio.to_thread``) so that concurrent calls do not stall the event loop; the drawing
  lives in :mod:`.drawing`, imported (with Pillow) on the first image.
* **Cancellable.** A cancelled image call returns at once (the worker thread is abandoned,
  ``abandon_on_cancel``), and the drawing itself stops at its next check
  (``anyio.from_thread.check_cancelled``: before each gradient and glow, between the
  finishing passes and before each chunk of the PNG is written), so Ctrl-C does not wait for
  a 4096x4096 picture to be finished, nor does the process's exit.
* **Honest.** Replies report ``system_fingerprint="offline"``, ``finish_reason="stop"``,
  ``attempts=1`` and estimated usage (``ceil(words * 4 / 3)`` tokens); images carry a small
  "offline preview" badge in the top-right corner (clear of the caption strip along the
  bottom) so nobody mistakes them for a real render.

How a text request is answered (first matching row wins; "the prompt" is the system messages
plus the last user message, salient words come from the last user message without stopwords):

=================================  ===========================================================
request                            reply
=================================  ===========================================================
``json_schema`` whose root holds   that object with the first JSON array of exactly N strings
one array of exactly N strings     in the last user message that has one (a re-ask's has
                                   none), unchanged (an offline rewrite keeps everything)
``json_schema`` named              ``{"scores": {"A": ..., "B": ..., ...}}`` with every id of
``idea_scores`` (a judge) whose    the schema's ``scores`` properties once, in order, each
system prompt has a ``Rubric       score an integer 0..100 computed from the request by the
(...):`` section with at least     rubric's points (see "Rubric judges" below); a judge
one readable points line           without one (the ``default`` rubric, or a rubric with no
                                   readable points) gets the next row's answer, unchanged;
                                   a ``reasoned`` judge's schema (each id an object) gets
                                   ``{"rationale": ..., "score": ...}`` per id, the
                                   rationale naming the rubric features it scored;
                                   a ``pairwise`` judge's (named ``idea_comparison``)
                                   ``{"better": <id>}``, the card its rubric scores higher
``json_schema`` named              ``{"selections": [...], "summary": ...}``: one candidate
``survivor_selection`` (the        per slot named after "in any order:", chosen from the
multi-round survivor selector)     candidates' JSON lines: performance = best effective
                                   score, diversity = fewest words shared with those already
                                   picked, potential = highest single judge score; reasons
                                   quote the numbers (diversity: the hook's first words)
``json_schema`` set                JSON text that validates against the schema, strings built
                                   from the salient words (see :mod:`.jsonschema_instance`;
                                   unsupported keywords raise ``UnsupportedSchemaError``)
prompt says "JSON array"/"JSON     a JSON array: the last JSON array of strings in the user
list"                              message, unchanged (preferring one of the requested
                                   length); otherwise N fresh strings (N from "3 strings",
                                   "array of five"...; default 3) — titles when the title
                                   row below also matches, short phrases otherwise
prompt says "title" and "2-4       a 2-4 word Title Case title of letters only, from the
words" or "Title Case"             salient words (sometimes closed with a word like "Reverie")
anything else                      2-4 sentences of prose built around the salient phrases;
                                   ``max_output_tokens`` drops sentences (never the first)
=================================  ===========================================================

Higher temperatures draw on more of the prompt's phrases; temperature 0 sticks to the most
frequent ones. Text between ``<do_not_copy>`` and ``</do_not_copy>`` in the user message is
material the request tells the model to abstract rather than repeat (the raw likes, for the
scoring stage's profile abstraction), so the offline backend never draws words from it.

Rubric judges: the rubric section is read line by line. ``Start every card at N`` sets the
start (50 without one); each ``- <axis>: ...`` line may carry ``+lo to +hi`` (a reward),
``-lo to -hi`` (a penalty range) and ``-a, -b or -c`` (penalties by severity); other lines
are ignored. The axis name picks a feature by a fragment of it (concept; profile, taste,
like, love, fit; dislike, hate, avoid; novel, original, fresh, distinct; render, concrete,
craft, clarity; repet, history, motif, clich). A feature is a pair of values in 0..1, one
for a reward and one for a penalty, computed from the words of the request (salient words,
hyphenated words split, plurals folded; a card's ``avoid`` list is not part of it):

=============  ===========================================================================
axis           reward value; penalty value
=============  ===========================================================================
concepts       share of the concepts' words the card uses; share of the concept lines it
               uses no word of (0.5 and 0 when the request shows no concepts)
profile        like fit minus dislike touch, at least 0; dislike touch. Like fit: like
               words used (lines of ``Loves``/``Likes``/``Notes``... sections, or the hints'
               ``Feel``), six (or all, if fewer) for full marks; 0.5 when none are shown
dislikes       1 - dislike touch; dislike touch = the largest share of one dislike line's
               words (``Dislikes``/``Hates`` sections, the dislikes-only list, the hints'
               ``Avoid``) the card uses, words the likes use too not counted
novelty        1 - the card's largest Jaccard word overlap with another card; that overlap
renderability  mean of four checks: composition options given, a medium given, colour or
               layout words used (three for full marks), a narrative of 12-80 words
               (fading to 0 at 160); max(0, 1 - 2 * reward value)
repetition     1 - repeat; repeat = the summed shares (k/N) of the "Recent history"
               motifs the card uses, at most 1
other names    a value drawn from the request's generator in 0.35..0.65; 0 (no penalty)
=============  ===========================================================================

A card's score is ``start + scale * sum(lo + (hi - lo) * reward) - sum(penalties) +
model error + jitter``, rounded and clamped to 0..100. A penalty value of 0 costs nothing; otherwise a
range costs ``lo + (hi - lo) * penalty`` and a list of k severities costs its i-th entry
(mildest first) for a penalty value up to i/k. ``scale = min(1, (100 - start) / (sum of
the rewards' hi))`` keeps a card perfect on every axis at 100 instead of past the clamp
(``novelty_heavy`` offers 80 points above its start of 65). The jitter is drawn from the
request's generator within +-(1 + 2 * temperature) points (temperature clamped to 0..1).
The model error is the model's own mistake on the card, drawn within +-4 points from a
generator seeded by ``(model, the card's canonical JSON without its id)`` alone: judges on
one model share it (whatever their rubric, seed or run), a judge on another model name draws
its own, so a panel's same-model judges move together offline as they would online
(``OfflineTextBackend(model_error=0)`` turns it off; the wire snapshots do).
Judges with different rubrics thus rank the same cards differently, as their rubrics say;
they read words, not meaning ("close-up" touches the dislike "spiders in close-up").

Images: colour words in the prompt (:data:`COLOURS`, about fifty names such as teal, crimson,
ochre, navy) set the palette, else a seeded named palette; the first composition word
(:data:`LAYOUTS`: horizon, diagonal, centered, symmetry, spiral, grid, bird's-eye, close-up...)
picks the layout, else a seeded one. Gradients, shapes, a soft grain and a vignette make the
picture; ``size`` is ``"WxH"`` (16..4096 each) or ``"auto"`` (1536x1024). The reply is PNG;
``metadata`` records ``palette``, ``palette_source``, ``layout``, ``layout_source``, ``size``.

The modules, each importing only modules listed before it, so that they make no cycle:
:mod:`.seed` (a request's seed), :mod:`.words` (salient phrases, token estimates),
:mod:`.vocabulary` (:data:`COLOURS`, :data:`LAYOUTS`), :mod:`.rubric` (rubric judges),
:mod:`.selector` (the survivor selector), :mod:`.text` (:class:`OfflineTextBackend`),
:mod:`.drawing` (the Pillow drawing) and :mod:`.image` (:class:`OfflineImageBackend`, which
imports :mod:`.drawing` inside the worker thread on the first image; this package never does).
"""
