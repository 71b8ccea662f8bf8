"""Manifests ggaudit writes and reads: the per-tensor manifest (:mod:`.tensor`); JSON reading with limits
(:mod:`._common`)."""
