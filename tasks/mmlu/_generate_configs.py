"""Writes the MMLU task YAMLs: one per subject (57), four category groups and the `mmlu` group.

Run from this folder: `python _generate_configs.py`. The output mirrors lm-eval's `mmlu` (default
variant): 0-shot by default, few-shot examples from `dev` with `first_n`, size-weighted groups.
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
CATEGORIES = ("stem", "other", "social_sciences", "humanities")
SUBJECTS = {
    "abstract_algebra": "stem",
    "anatomy": "stem",
    "astronomy": "stem",
    "business_ethics": "other",
    "clinical_knowledge": "other",
    "college_biology": "stem",
    "college_chemistry": "stem",
    "college_computer_science": "stem",
    "college_mathematics": "stem",
    "college_medicine": "other",
    "college_physics": "stem",
    "computer_security": "stem",
    "conceptual_physics": "stem",
    "econometrics": "social_sciences",
    "electrical_engineering": "stem",
    "elementary_mathematics": "stem",
    "formal_logic": "humanities",
    "global_facts": "other",
    "high_school_biology": "stem",
    "high_school_chemistry": "stem",
    "high_school_computer_science": "stem",
    "high_school_european_history": "humanities",
    "high_school_geography": "social_sciences",
    "high_school_government_and_politics": "social_sciences",
    "high_school_macroeconomics": "social_sciences",
    "high_school_mathematics": "stem",
    "high_school_microeconomics": "social_sciences",
    "high_school_physics": "stem",
    "high_school_psychology": "social_sciences",
    "high_school_statistics": "stem",
    "high_school_us_history": "humanities",
    "high_school_world_history": "humanities",
    "human_aging": "other",
    "human_sexuality": "social_sciences",
    "international_law": "humanities",
    "jurisprudence": "humanities",
    "logical_fallacies": "humanities",
    "machine_learning": "stem",
    "management": "other",
    "marketing": "other",
    "medical_genetics": "other",
    "miscellaneous": "other",
    "moral_disputes": "humanities",
    "moral_scenarios": "humanities",
    "nutrition": "other",
    "philosophy": "humanities",
    "prehistory": "humanities",
    "professional_accounting": "other",
    "professional_law": "humanities",
    "professional_medicine": "other",
    "professional_psychology": "social_sciences",
    "public_relations": "social_sciences",
    "security_studies": "social_sciences",
    "sociology": "social_sciences",
    "us_foreign_policy": "social_sciences",
    "virology": "other",
    "world_religions": "humanities",
}
TEMPLATE = """dataset_path: cais/mmlu
test_split: test
fewshot_split: dev
fewshot_config:
  sampler: first_n
output_type: multiple_choice
doc_to_text: "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\nD. {{choices[3]}}\\nAnswer:"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def subject_yaml(subject: str, category: str) -> str:
    words = subject.replace("_", " ")
    description = f"The following are multiple choice questions (with answers) about {words}.\\n\\n"
    return (
        f'"dataset_name": "{subject}"\n'
        f'"description": "{description}"\n'
        f'"tag": "mmlu_{category}_tasks"\n'
        f'"include": "_default_template_yaml"\n'
        f'"task": "mmlu_{subject}"\n'
        f'"task_alias": "{subject}"\n'
    )


def group_yaml(category: str) -> str:
    alias = category.replace("_", " ")
    return (
        f"group: mmlu_{category}\ngroup_alias: {alias}\ntask:\n  - mmlu_{category}_tasks\n"
        "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: True\nmetadata:\n  version: 2\n"
    )


def main() -> None:
    out = os.path.join(HERE, "default")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "_default_template_yaml"), "w") as fh:
        fh.write(TEMPLATE)
    for subject, category in SUBJECTS.items():
        with open(os.path.join(out, f"mmlu_{subject}.yaml"), "w") as fh:
            fh.write(subject_yaml(subject, category))
    for category in CATEGORIES:
        with open(os.path.join(out, f"_mmlu_{category}.yaml"), "w") as fh:
            fh.write(group_yaml(category))
    with open(os.path.join(out, "_mmlu.yaml"), "w") as fh:
        fh.write(
            "group: mmlu\ntask:\n"
            + "".join(f"  - mmlu_{c}\n" for c in CATEGORIES)
            + "aggregate_metric_list:\n  - metric: acc\n    weight_by_size: True\n"
            "metadata:\n  version: 2\n"
        )


if __name__ == "__main__":
    main()
