"""A pool's bookkeeping, pure (time is an argument): pod classification and the pools' counts
(:mod:`.pods`), each pod's deletion cost (:mod:`.deletioncost`), the measured cold start
(:mod:`.coldstart`), GPU-hours (:mod:`.gpuledger`), what a pool delivered (:mod:`.servicerecord`)
and ``metav1.Time`` (:mod:`.timestamps`). Nothing here talks to the API server.
"""
