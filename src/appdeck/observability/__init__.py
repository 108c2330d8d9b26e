"""What an operator sees of AppDeck: Prometheus metrics (issue 23).

Every series lives in prometheus-client's default registry, the one ``/metrics`` serves (the
process and GC collectors and the TLS series are there too). Labels are bounded: a method, a
tool, an outcome, a status, a reason, never a tenant, user, session or id.
"""
