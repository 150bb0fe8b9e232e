"""The operator shell: Kopf handlers and the Kubernetes writes around the pure policy.

Each module does one job (imports point down this list, never up):

- :mod:`.handlers` — the Kopf wiring: thin handlers, the registry, Kopf's settings, the login;
- :mod:`.tick` — one scaling tick: gather → decide → apply → record;
- :mod:`.ensure` — keeping the children in place (create, update, resume, deleted by someone);
- :mod:`.invalid` — reporting a spec the operator cannot use;
- :mod:`.deps` — what the handlers are given: writer, signal source, policy, metrics, clock;
- :mod:`.settings` — the typed settings of ``llmscale run`` (flags, ``LLMSCALE_*``, defaults);
- :mod:`.memory` — what the operator remembers per object, and the policy memory's restore;
- :mod:`.indexes` — Kopf indexes of llmscale's Deployments and pods;
- :mod:`.writer` — server-side apply of children through the official client;
- :mod:`.events` — the Kubernetes Events the operator posts;
- :mod:`.metrics` — the operator's own Prometheus metrics;
- :mod:`.spec` — reading a spec: the model or an InvalidSpec message;
- :mod:`.status`, :mod:`.conditions`, :mod:`.statuspatch`, :mod:`.timestamps` — the status the
  operator owns, its conditions, the write-on-change merge patch, ``metav1.Time``;
- :mod:`.children`, :mod:`.podtemplate`, :mod:`.pods`, :mod:`.names` — child manifests, the
  engine pod template, pod classification and pool state, names and labels;
- :mod:`.merge`, :mod:`.mode` — ``spec.template`` merged over the generated pod, ``spec.mode``
  and its condition;
- :mod:`.scaletarget`, :mod:`.targeterror` — ``spec.scaleTargetRef``: an existing workload's
  ``/scale`` and pods, and reporting one that cannot be read;
- :mod:`.placeholders` — the node headroom's placeholder pods and their indexes.

The status, children and merge/mode groups are pure (no I/O, no clock). Nothing here is imported by the policy, the
model, the signals' pure modules or the simulator (import-linter, ``pyproject.toml``).
"""
