import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=8, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("POLYCOMP_HYPOTHESIS_PROFILE", "ci"))
