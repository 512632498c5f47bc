"""The command-line tools: ``compare`` (the main job), ``bench``, ``probe`` and their models.

``policies`` holds the policies they run in the parent (random, pre-sampled, one torch MLP).

Each tool module defines ``add_arguments(parser)`` and ``run(args) -> int`` for
``vecsample <command>``; the core never imports this package.
"""
