"""The batch client (``llmscale batch run``): OpenAI batch files sent to the ``<name>-batch`` Service.

- :mod:`llmscale.batch.requests`: read and validate the input (the OpenAI batch file format, as
  vLLM's ``vllm.entrypoints.openai.run_batch`` reads it).
- :mod:`llmscale.batch.results`: the output file, which is also the checkpoint: one result a line,
  appended and fsynced one by one, read back on a rerun to skip what is done.
- :mod:`llmscale.batch.client`: send the requests with bounded concurrency, retries with
  exponential backoff and full jitter, progress, and a graceful stop on SIGTERM.
- :mod:`llmscale.batch.size`: the size annotations of a batch Job for an input file.

``docs/batch.md`` describes the formats, the exit statuses and the Job contract.
"""
