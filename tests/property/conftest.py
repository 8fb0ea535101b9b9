"""Hypothesis settings for the property tests.

The ``ci`` profile (the default) is derandomized, so every run tries the same examples and a
failure reproduces on any machine; it keeps no example database (nothing is written to the
working tree) and has no per-example deadline (timing never decides a test). Set
``HYPOTHESIS_PROFILE=thorough`` for a longer, randomized search by hand. ``scripts/check
--fast`` sets ``HYPOTHESIS_PROFILE=fast``: a derandomized search of 25 examples per test (the
full check keeps ``ci``'s 150).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=150)
settings.register_profile("fast", derandomize=True, database=None, deadline=None, max_examples=25)
settings.register_profile("thorough", database=None, deadline=None, max_examples=3000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
