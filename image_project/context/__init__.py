"""Context injectors: lines of guidance from the run's date and the user's own plugins
(docs/context.md).

* :mod:`.base` — the :class:`Injector` protocol a plugin implements, its input and answer,
  the guidance block;
* :mod:`.season`, :mod:`.holiday` — the built-in injectors;
* :mod:`.loading` — the run's injectors from ``context.*``, plugins imported and checked
  before any model call;
* :mod:`.inject` — one run's context record.

Where the guidance goes (``context.injection_location``) is the prompt stages' business
(:class:`image_project.stages.standard.Guidance`); judges never get it.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""

from image_project.context.base import (
    GUIDANCE_HEADER,
    INJECTOR_NAME,
    Injection,
    Injector,
    InjectorInput,
    render_guidance,
)
from image_project.context.holiday import (
    CULTURE_DAYS,
    HOLIDAY_NAMES,
    HolidayInjector,
    holiday_probability,
)
from image_project.context.inject import injector_rng_labels, run_injectors
from image_project.context.loading import LoadedInjector, load_injectors
from image_project.context.season import SEASON_CUES, SeasonInjector, season_of

__all__ = [
    "CULTURE_DAYS",
    "GUIDANCE_HEADER",
    "HOLIDAY_NAMES",
    "INJECTOR_NAME",
    "SEASON_CUES",
    "HolidayInjector",
    "Injection",
    "Injector",
    "InjectorInput",
    "LoadedInjector",
    "SeasonInjector",
    "holiday_probability",
    "injector_rng_labels",
    "load_injectors",
    "render_guidance",
    "run_injectors",
    "season_of",
]
