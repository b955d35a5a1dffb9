"""The paper's premise, measured at a base model before any training: the premise probe.

``probe`` samples K rollouts per training problem from the base student and scores every token
by the student and its privileged teacher with the trainer's own parts; ``statistics`` asks
whether the probed method's gates and weights are more than a fixed lambda, whether D_t is
associated with the divergence that follows it, and whether D marks where rollouts part ways;
``report`` writes them as a table and a figure (docs/premise.md).
"""
