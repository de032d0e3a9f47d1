"""DROP's document processing and scoring: `jaxeval.metrics.drop`, named here so that the task YAML
stays identical to lm-eval's (`!function utils.process_docs`, `!function utils.process_results`).

    process_docs(dataset)  adds id, passage, question and answers (a list of answer tuples)
    process_results(doc, ["Chaz Schilens"]) -> {"em": 1.0, "f1": 1.0}
"""

from jaxeval.metrics.drop import process_docs, process_results

__all__ = ["process_docs", "process_results"]
