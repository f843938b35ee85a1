"""SWE-bench pieces that need no containers: schema/loaders, predictions, diffs, votes, harness rounds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monkeybarrel.kits.swebench.diffs import MalformedPatch, is_trivial, normalize_patch
from monkeybarrel.kits.swebench.harness import read_reports, rounds
from monkeybarrel.kits.swebench.predictions import read_predictions
from monkeybarrel.kits.swebench.retrieval import rank_files, tokenize
from monkeybarrel.kits.swebench.schema import SWEInstance, load_instances, write_instances
from monkeybarrel.kits.swebench.state_machine import barrel_of_monkeys
from monkeybarrel.kits.swebench.voting import expected_tie_accuracy, extract_script, rank_candidates
from monkeybarrel.core.files import TaskDataError

ROW = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", "problem_statement": "x is wrong",
       "patch": "diff", "test_patch": "", "FAIL_TO_PASS": json.dumps(["t.py::a"]), "PASS_TO_PASS": "[]",
       "version": "1.0"}
PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 def f(x):
-    return x - 1
+    return x + 1

"""


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loads_hub_schema_and_decodes_test_lists(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [ROW, {**ROW, "instance_id": "o__r-2", "FAIL_TO_PASS": ["t.py::b"]}])
    instances = load_instances(path)
    assert [i.instance_id for i in instances] == ["o__r-1", "o__r-2"]
    assert instances[0].FAIL_TO_PASS == ("t.py::a",) and instances[1].FAIL_TO_PASS == ("t.py::b",)
    assert instances[0].test_files == ["t.py"]
    again = load_instances(write_instances(instances, tmp_path / "again.jsonl"))
    assert again == instances


def test_parquet_rows_load(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([ROW]), tmp_path / "t.parquet")
    assert load_instances(tmp_path / "t.parquet")[0].repo == "o/r"


@pytest.mark.parametrize("change, needle", [
    ({"base_commit": None}, ":2: missing field(s) ['base_commit']"),
    ({"FAIL_TO_PASS": "[not json"}, ":2: field FAIL_TO_PASS: Value error, not a JSON list"),
    ({"PASS_TO_PASS": [1, 2]}, ":2: field PASS_TO_PASS"),
    ({"instance_id": "o__r-1"}, ":2: field instance_id: duplicate 'o__r-1' (first at"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, change, needle):
    path = write_jsonl(tmp_path / "bad.jsonl", [ROW, {**ROW, "instance_id": "o__r-9", **change}])
    with pytest.raises(TaskDataError) as info:
        load_instances(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_unknown_instance_ids_are_an_error(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [ROW])
    with pytest.raises(TaskDataError, match="not in the data"):
        load_instances(path, instance_ids=["nope"])


def test_prediction_files_in_all_harness_layouts(tmp_path):
    rows = [{"instance_id": "a", "model_name_or_path": "sys", "model_patch": "p1"},
            {"instance_id": "a", "model_name_or_path": "sys", "model_patch": None},
            {"instance_id": "b", "model_name_or_path": "sys", "model_patch": "p3"}]
    jsonl = write_jsonl(tmp_path / "p.jsonl", rows)
    as_list = tmp_path / "p.json"
    as_list.write_text(json.dumps(rows))
    as_dict = tmp_path / "d.json"
    as_dict.write_text(json.dumps({"a": rows[0], "b": rows[2]}))
    assert [r["model_patch"] for r in read_predictions(jsonl)["a"]] == ["p1", None]
    assert read_predictions(as_list) == read_predictions(jsonl)
    assert set(read_predictions(as_dict)) == {"a", "b"}
    bad = write_jsonl(tmp_path / "bad.jsonl", [rows[0], {"instance_id": "c", "model_patch": "x"}])
    with pytest.raises(TaskDataError, match=r"bad.jsonl:2: field model_name_or_path"):
        read_predictions(bad)


def test_normalize_fixes_fences_noise_and_hunk_counts():
    messy = ("Here is my fix:\n```diff\n" + PATCH.replace("@@ -1,3 +1,3 @@", "@@ -1,7 +1,9 @@")
             .replace("--- a/pkg/mod.py", "index 123..456 100644\n--- a/pkg/mod.py\t2020-01-01") + "```\nDone.")
    clean = normalize_patch(messy)
    assert clean.text == normalize_patch(PATCH).text
    assert "@@ -1,2 +1,2 @@" in clean.text and "index" not in clean.text and clean.files == ("pkg/mod.py",)
    assert clean.text.endswith("\n") and not clean.text.endswith("\n\n")


@pytest.mark.parametrize("text, reason", [
    ("", "empty output"), ("I think you should change f.", "no diff header"),
    ("--- a/x.py\n+++ b/x.py\n", "no file changes|no hunks"),
    ("--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "leaves the repository"),
])
def test_malformed_patches_are_rejected_with_a_reason(text, reason):
    with pytest.raises(MalformedPatch, match=reason):
        normalize_patch(text)


def test_trivial_patches():
    assert is_trivial(None) and is_trivial("") and is_trivial("one line\n") and not is_trivial(PATCH)


def test_votes_ranking_top3_dedup_and_length_ties():
    patches = ["long patch text", "short", "short", "mid patch", "x" * 3, "never"]
    votes = np.array([3.0, 3.0, 3.0, 1.0, 0.0, np.nan])
    assert rank_candidates(patches, votes) == [1, 0, 3]
    assert rank_candidates(patches, votes, None) == [1, 0, 3, 4]
    assert expected_tie_accuracy(votes, np.array([1, 0, 0, 1, 1, 1], bool)) == pytest.approx(1 / 3)


def test_extract_script_from_fences_and_tags():
    assert extract_script("blah\n```python\nimport sys\nsys.exit(0)\n```") == "import sys\nsys.exit(0)\n"
    assert extract_script("<test>\nprint(1)\n</test>", tag="test") == "print(1)\n"
    assert extract_script("<test>```python\nprint(2)\n```</test>", tag="test") == "print(2)\n"
    assert extract_script("no script here") is None and extract_script("<other>x</other>", tag="test") is None


def test_barrel_of_monkeys_dedups_filters_and_sorts_by_length():
    longer = PATCH.replace("x + 1", "x + 1  # longer fix")
    assert barrel_of_monkeys([longer, "garbage", PATCH, PATCH, None]) == [2, 0]


def test_bm25_ranks_the_file_that_matches_the_issue():
    files = {"pkg/dates.py": "def parse_date(text):\n    return text.split('-')\n",
             "pkg/numbers.py": "def parse_number(text):\n    return int(text)\n",
             "tests/test_dates.py": "def test_parse_date(): parse_date('2020-01-01')\n"}
    assert tokenize("parseDate snake_case") == ["parse", "date", "snake", "case"]
    assert rank_files("parse_date returns wrong dates", files, top_k=2) == ["pkg/dates.py", "pkg/numbers.py"]


def test_harness_rounds_and_reports(tmp_path):
    a = SWEInstance.model_validate({**ROW, "instance_id": "a"})
    b = SWEInstance.model_validate({**ROW, "instance_id": "b"})
    split = rounds([(a, "p1"), (a, "p2"), (a, "p1"), (b, "q1")], prefix="run")
    assert [[(r["instance_id"], r["model_patch"]) for r in rows] for rows in split] == [[("a", "p1"), ("b", "q1")], [("a", "p2")]]
    assert {r["model_name_or_path"] for r in split[1]} == {"run-r1"}
    report = tmp_path / "run-r0" / "run-r0" / "a" / "report.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"a": {"resolved": True, "patch_successfully_applied": True}}))
    assert read_reports(tmp_path, "run-r0", "run-r0") == {"a": True}


def test_swe_votes_selector_prefers_votes_then_shorter_patch():
    import pyarrow as pa

    from monkeybarrel.core.selection_data import SelectionData
    from monkeybarrel.selection.votes import SWEVotes

    keys = pa.table({"problem_id": ["p", "p", "p", "q", "q"], "generator_id": ["g"] * 5, "sample_index": [0, 1, 2, 0, 1]})
    votes = np.array([[2.0], [2.0], [1.0], [np.nan], [np.nan]])
    data = SelectionData.build(keys, votes, ("test_votes",), texts=["x" * 50, "x" * 10, "x", "a", "b"])
    assert SWEVotes("test_votes").fit(data).select(data).tolist() == [1, -1]
    with pytest.raises(ValueError, match="no verifier column 'missing'"):
        SWEVotes("missing").fit(data).select(data)
