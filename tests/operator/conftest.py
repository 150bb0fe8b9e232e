"""Fixtures shared by the operator tests: kmock's API server with the operator started against it
(``test_operator_kmock.py``) and the canned Prometheus of the signal tests
(``tests/signals/conftest.py``), so ``test_operator_signals.py`` runs the real reader on it."""

from tests.operator.test_operator_kmock import kube, settings, start_operator  # noqa: F401
from tests.signals.conftest import canned  # noqa: F401
