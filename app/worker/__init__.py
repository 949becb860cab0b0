"""Background workers: the coordinator loop."""
