"""Measure a live OpenAI-compatible engine and fit the performance model to it (``llmscale calibrate``).

:mod:`~llmscale.calibrate.client` talks to the engine (streamed completions timed per token, its
``/metrics``); :mod:`~llmscale.calibrate.sweep` runs the measurements one variable at a time;
:mod:`~llmscale.calibrate.note` (pure) fits the efficiencies and sets the measured figures beside the
roofline's. docs/calibrate.md describes the method.
"""
