"""Response filters (lm-eval 0.4.13 semantics) and the pipelines that chain them.

Usage:

    ens = build_filter_ensemble("strict-match", [("regex", {}), ("take_first", None)])
    ens.apply(instances)        # sets inst.filtered_resps["strict-match"]
"""

from jaxeval.filters.ensemble import FILTERS, FilterEnsemble, build_filter_ensemble

__all__ = ["FILTERS", "FilterEnsemble", "build_filter_ensemble"]
