"""The operator shell: Kopf handlers and the Kubernetes writes around the pure policy.

The flat modules are the Kopf wiring (:mod:`.handlers`), the per-object verbs (:mod:`.tick`, the
only caller of ``decide``, and :mod:`.ensure`) and the requests to the API server; below them four
rooms: :mod:`.signals` (signal reads and their cadence), :mod:`.manifests` and :mod:`.status` (pure)
over :mod:`.state` (pure). Every module, one line each: ``docs/architecture.md``; import-linter
(``pyproject.toml``) keeps the rooms pointing down and the pure ones free of Kopf and the client.
"""
