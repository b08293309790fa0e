"""Targets that misbehave on purpose, for the test suite (enabled by PORTABILITY_TEST_TARGETS=1)."""
from portability.targets.base import Target

TARGETS = [
    Target(id="test/abort", runtime="portability.runtimes.testing:Abort",
           description="aborts its worker (SIGABRT) on the first inference"),
    Target(id="test/hang", runtime="portability.runtimes.testing:Hang",
           run_timeout_s=3, description="hangs in the first inference"),
    Target(id="test/hog", runtime="portability.runtimes.testing:Hog",
           description="allocates memory until stopped"),
    Target(id="test/noisy", runtime="portability.runtimes.testing:Noisy",
           description="ORT CPU plus noise on every output (a wrong model)"),
    Target(id="test/noisy-twin", runtime="portability.runtimes.testing:Noisy",
           description="the same noise as test/noisy: two runtimes that agree with each other, not the reference"),
    Target(id="test/fallback", runtime="portability.runtimes.testing:Fallback",
           description="asks for one backend, reports another"),
]
