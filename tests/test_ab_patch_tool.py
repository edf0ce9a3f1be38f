"""glm_asr_lab/tuning/ab_patch.py: a code change timed against the same tree with the change reverted, on one
machine. Here on the CPU (the cuTile emulator) at tiny size: the copy, the revert, the rounds' order, each tree's
own imports; the bad patches."""

import difflib
import json

from glm_asr_course.tracks import REPO_ROOT
from glm_asr_lab.tuning import ab_patch

README = REPO_ROOT / "README.md"


def reverted_readme_patch(tmp_path, first_line="# an older title"):
    """A -p1 patch whose forward direction turns README.md's older first line into today's: applied already."""
    now = README.read_text().splitlines(keepends=True)
    older = [first_line + "\n", *now[1:]]
    patch = tmp_path / "ab.patch"
    patch.write_text("".join(difflib.unified_diff(older, now, "a/README.md", "b/README.md")))
    return patch


def test_the_before_tree_is_a_copy_with_the_patch_reverted(tmp_path):
    before = ab_patch.tree_before(reverted_readme_patch(tmp_path), REPO_ROOT, tmp_path)
    assert (before / "README.md").read_text().splitlines()[0] == "# an older title"
    assert README.read_text().splitlines()[0] != "# an older title"
    assert (before / "glm_asr_lab" / "tuning" / "ab_patch.py").is_file() and not (before / ".git").exists()


def test_a_patch_that_does_not_revert_or_is_missing_is_one_line_and_exit_2(tmp_path, capsys):
    unapplied = tmp_path / "unapplied.patch"
    unapplied.write_text("".join(difflib.unified_diff(["no such line\n"], ["another\n"], "a/README.md",
                                                      "b/README.md")))
    for patch, says in ((unapplied, "does not revert cleanly"), (tmp_path / "absent.patch", "no such patch file")):
        assert ab_patch.main([str(patch), "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err


def test_an_ab_at_tiny_size_times_each_tree_in_its_own_process(tiny_ckpt, tmp_path):
    """Rounds run after before, then before after; the rows of "before" come from the copy's own packages, and
    the tiny model's ids are the same in both (the patch touched no code)."""
    jsonl = tmp_path / "ab.jsonl"
    code = ab_patch.main([str(reverted_readme_patch(tmp_path)), "--device", "cpu", "--config", str(tiny_ckpt),
                          "--tokens", "3", "--warmup", "0", "--runs", "1", "--rounds", "2", "--jsonl", str(jsonl)])
    assert code == 0
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["arm"], r["round"]) for r in rows] == [("after", 0), ("before", 0), ("before", 1), ("after", 1)]
    assert {r["repo"] for r in rows if r["arm"] == "after"} == {str(REPO_ROOT)}
    assert all(r["repo"] != str(REPO_ROOT) and r["repo"].endswith("before") for r in rows if r["arm"] == "before")
    assert all(len(r["ids"]) == 3 and r["ids"] == rows[0]["ids"] for r in rows)
