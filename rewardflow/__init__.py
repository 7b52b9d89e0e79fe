"""What the components (``methods``, ``models``, ``rewards``) share without importing the launcher: config errors and
their collector (:mod:`rewardflow.errors`), collectives that degrade to the identity in one process
(:mod:`rewardflow.distributed`) and the transformer-pass counter (:mod:`rewardflow.nfe_counter`).

Importing this package imports nothing heavy: the command line composes configs before torch is loaded.
"""
