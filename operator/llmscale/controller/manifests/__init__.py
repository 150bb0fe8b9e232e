"""The children as manifests, pure: names, labels and owner references (:mod:`.names`), the engine
pod (:mod:`.podtemplate`), ``spec.template`` merged over it (:mod:`.merge`), the Deployments,
Service and PodDisruptionBudget (:mod:`.children`) and the InferencePool (:mod:`.inferencepool`).
Nothing here talks to the API server (import-linter, ``pyproject.toml``).
"""
