"""Command modules of the ``llmscale`` CLI; each has ``add_arguments(parser)`` and ``main(args)``."""
