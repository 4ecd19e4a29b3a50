"""The HTTP API (``handoff api``): the handoff model as a versioned JSON contract, for
agents in any language. ``app`` builds the FastAPI app; ``schemas`` are its bodies;
``auth`` checks bearer keys; ``problems`` turns every failure into RFC 9457 problem
details; ``waiters`` wakes long-poll waits from the store's pub/sub."""
