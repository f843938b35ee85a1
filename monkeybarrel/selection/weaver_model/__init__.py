"""Weaver's label model, in the order ``WeaverModel.fit`` runs its parts (docs/weaver.md says the same):

1. ``discretise``: normalise each verifier over the dataset and cut it into its own equal-count bins;
2. ``screening``: drop verifiers that score too few candidates or put (almost) every score in one bin;
3. ``answers``: with final answers, an answer of a problem is an item, its share of the samples a cell,
   and the problems' agreement gives the strata;
4. ``fitting``: dependence weights (``dependence``), EM (``em`` on the ``em_data`` layout), per-stratum
   rates, then the orientation (``orientation``);
5. ``scoring``: every candidate's log-odds in one pass; ``notes``: what was done, in words.

``estimator.WeaverModel`` is the scikit-learn estimator; ``selection.weaver.WeaverSelector`` the selector.
"""
