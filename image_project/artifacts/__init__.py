"""Every file a run writes: captioned image, titles manifest, generations CSV, transcript,
the 4K image (:mod:`.upscale`, imported with Pillow only by a run that makes one), and the
pending transcript that the records phase writes first (:mod:`.pending`: what a process
killed in that phase leaves, and its repair).

This layer knows files and formats, not models or prompts. Functions are plain and
synchronous (the app runs them through ``anyio.to_thread.run_sync``). Nothing is left
half-written: whole files are replaced atomically, CSV rows are appended with one write and
fsynced, and cross-process sections (allocating a manifest ``seq``) run under a
:class:`FileLock`.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""
