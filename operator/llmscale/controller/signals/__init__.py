"""Signal reading and its cadence: every pool read together once per base period (:mod:`.fleet`), a
pool's last good snapshot carried through a failed read (:mod:`.carry`), and the seasonal history
read for the forecast (:mod:`.seasonal`), all through the injected signal source
(:mod:`llmscale.signals.prometheus` in production).
"""
