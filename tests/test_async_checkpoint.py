"""trainer.async_checkpoint=true (docs/performance.md#asynchronous-checkpoints): ``save`` returns once the state is
staged, training may change the parameters and optimizer state in place at once, and the checkpoint, committed in
the background, holds the values of the moment it was saved; in one process and on 2 FSDP2 gloo ranks (whose
background writes run on a process group of their own)."""

from __future__ import annotations

import torch

from dist_utils import run_distributed
from launcher.checkpoint.manager import CheckpointManager
from rewardflow.distributed import current_world


def _model_and_optimizer(sharded: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    if sharded:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(3, 8)).square().sum().backward()
    opt.step()
    return model, opt


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def _state(model, opt) -> list[torch.Tensor]:
    params = [_full(p) for p in model.parameters()]
    moments = [_full(s["exp_avg"]) for s in opt.state.values()]
    return params + moments


def _save_train_load(root: str, sharded: bool) -> bool:
    model, opt = _model_and_optimizer(sharded)
    manager = CheckpointManager(root, current_world(), asynchronous=True)
    saved = _state(model, opt)
    manager.save(1, model, opt, {"wallclock_s": 1.0})
    for _ in range(3):  # training goes on while the checkpoint is written
        model(torch.randn(3, 8)).square().sum().backward()
        opt.step()
        opt.zero_grad()
    assert not all(torch.equal(a, b) for a, b in zip(saved, _state(model, opt)))
    manager.wait()
    latest = manager.latest()
    assert latest is not None and latest.name == "step_00000001"
    fresh, fresh_opt = _model_and_optimizer(sharded)
    assert manager.load(latest, fresh, fresh_opt)["step"] == 1
    return all(torch.equal(a, b) for a, b in zip(saved, _state(fresh, fresh_opt)))


def test_background_save_holds_the_state_of_the_moment_it_was_saved(tmp_path):
    assert _save_train_load(str(tmp_path), sharded=False)


def _rank_work(rank, world, root):
    return _save_train_load(root, sharded=True)


def test_background_save_on_two_sharded_ranks(tmp_path):
    assert run_distributed(_rank_work, 2, str(tmp_path)) == [True, True]
