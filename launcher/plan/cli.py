"""``rewardflow <overrides> --plan``: every run of a command line composed as the CLI composes it, and its plan
printed (nothing is built, validated against files or submitted)."""

from __future__ import annotations

import sys

from launcher.plan.fixes import plan_with_fixes


def compose_runs(overrides: list[str]) -> list[tuple[list[str], dict]]:
    """Every run of a command line (sweeps expanded, as ``-m`` would launch them), composed like the CLI composes
    them, as ``(overrides, resolved config)``. Nothing is built, validated against files or submitted."""
    import itertools

    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from launcher import installation
    from launcher.config import register_configs

    register_configs()
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = [
        [o.input_line]
        if not o.is_sweep_override()
        else [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        for o in parsed
    ]
    GlobalHydra.instance().clear()
    path = installation.config_path()
    init = (
        initialize_config_module(path.removeprefix("pkg://"), version_base="1.3")
        if path.startswith("pkg://")
        else initialize_config_dir(config_dir=path, version_base="1.3")
    )
    runs: list[tuple[list[str], dict]] = []
    with init:
        for combo in itertools.product(*choices) if choices else [()]:
            cfg = compose(config_name="train", overrides=list(combo))
            container = OmegaConf.to_container(cfg, resolve=True)
            assert isinstance(container, dict)  # compose returns a DictConfig
            runs.append((list(combo), container))
    return runs


def main(overrides: list[str]) -> int:
    """``rewardflow <overrides> --plan``: the plan of every run of the command line; exit status 1 if one does not
    fit."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        runs = compose_runs(overrides)
    except (HydraException, OmegaConfBaseException) as e:  # a misspelt key or value: a message, not a traceback
        cause = e.__cause__ if isinstance(e.__cause__, OmegaConfBaseException) else e
        print(f"rewardflow --plan: config error: {str(cause).strip()}", file=sys.stderr)
        return 2
    status = 0
    for combo, cfg in runs:
        result = plan_with_fixes(cfg)
        if result is None:
            print(
                f"memory plan: model={cfg['model'].get('name')} is not a diffusers family; nothing to plan "
                f"({' '.join(combo)})"
            )
            continue
        print(result.table())
        status |= 0 if result.fits else 1
    return status
