"""The training engine shared by trainers and test-time adapters (forward, backward,
optimizer step, caches)."""
