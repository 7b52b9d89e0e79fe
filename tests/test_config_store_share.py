"""Hydra's config lookups share rewardflow's ConfigStore instead of deep-copying it (launcher/config_store_share.py):
the copies made ``rewardflow --help`` take seconds (issue 29, item 4)."""

from __future__ import annotations

import copy

from hydra.core.config_store import ConfigStore

from launcher.config import register_configs


def test_a_deep_copy_of_the_store_is_the_store_and_loads_still_copy_nodes():
    register_configs()
    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store
    assert copy.deepcopy({"source": store})["source"] is store  # as inside Hydra's repository copies
    # a load still hands out a copy of the node: changing it cannot change the store
    assert store.load("schema/method/dance_grpo.yaml").node is not store.load("schema/method/dance_grpo.yaml").node
