"""The status the operator owns, pure: what a tick writes (:mod:`.build`), the conditions and their
``lastTransitionTime`` (:mod:`.conditions`), the write-on-change merge patch (:mod:`.statuspatch`)
and ``spec.mode`` with its ``ScalingActive`` condition (:mod:`.mode`).
"""
