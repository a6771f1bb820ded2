"""Django's task framework, one test per documented behaviour (the conformance suite)."""
