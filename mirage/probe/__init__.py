"""``core probe``: the diagnostics for a policy trained anywhere, without training it
(issue #36). :mod:`.measure` rolls out and diagnoses batches, :mod:`.compare` reads them
(intervals, regime, the paired difference of two policies), :mod:`.render` prints them,
:mod:`.storing` keeps them as runs, :mod:`.checkpoints` finds a stored run's checkpoint."""
