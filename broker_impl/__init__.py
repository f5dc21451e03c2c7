"""broker_impl."""
