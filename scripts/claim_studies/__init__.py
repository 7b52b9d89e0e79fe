"""The papers' claims, each tested on a CPU testbed where it could show (run by ``scripts/claims.py``).

One module per study: :mod:`.flash` (Flash-GRPO's stability and equal-compute claim, on a 1-D linear-Gaussian
problem with closed-form expectations, :mod:`.flash_linear`, and on a flow-matching-pretrained tiny FLUX twin),
:mod:`.jagg` (JAGG keeps the quality of the exact gradient where its approximation is as imperfect as the paper's)
and :mod:`.eam` (EAM converges faster than Adjoint Matching to the same tilted law, on the Gaussian SOC toy). Each
study first checks that its testbed has the property the claim needs (its *precondition*), prints the check, then
trains every variant through rewardflow's own trainer and methods for several seeds, and returns a verdict with 95%
intervals (:mod:`launcher.compare.stats`). :mod:`.common` holds the plumbing, :mod:`.evaluation` the evaluation
sampler shared by every variant, :mod:`.training` one run stepped to a compute budget, and each study's
``<study>_report`` module its page, data and plots (``docs/results/<study>.{md,json,png}``).
"""
