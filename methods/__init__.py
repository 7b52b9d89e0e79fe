"""Reward fine-tuning methods: the shared flow-matching math and one class per method.

A method plugs into the single trainer loop in :mod:`launcher.train.trainer` (rollout, reward, advantage, update);
see :class:`methods.base.Method`.
"""
