"""instruct_follow as llm-in-sandbox 0.2.0 scores it: a row is right when every instruction is
kept, each in loose mode (the answer, or it without asterisks, its first line, its last line or
both); the instructions come from the row's fields or its JSON ground truth. lis-tui's own checks
case by case, and IFBench's own (if-verifiable) where it is installed."""
import json

import pytest

from lis_tui.bench.paper import instructions
from lis_tui.bench.paper.instructions import CHECKS, all_followed, instructions_of, loose_variants
from lis_tui.bench.paper.lenient import instruct_follow
from lis_tui.bench.scoring.rewards import RewardError
from lis_tui.bench.tasks import Task, TaskError

# id, kwargs, an answer that keeps it, one that breaks it, a badly formatted one (breaks it)
OURS = [
    ("length_constraints:number_words", {"num_words": 3, "relation": "less than"},
     "hi there", "one two three", "one,two,three"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"},
     "one two three", "hi there", "---"),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "at least"},
     "One. Two.", "Just one.", "no.stops.here"),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2},
     "a\n***\nb", "a1\na2\n***\nb\n***\nc1\nc2", "a\n\nb"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n* b", "* a", "*a\n*b"),
    ("detectable_format:title", {}, "<<Hi>>\ntext", "Hi\ntext", "<<\n>>"),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', "a: 1", '{"a": 1'),
    ("change_case:english_lowercase", {}, "all low", "Not low", "123"),
    ("change_case:english_capital", {}, "ALL UP", "Not up", "123"),
    ("punctuation:no_comma", {}, "no commas here", "a, b", "a，b,"),
    ("startend:end_checker", {"end_phrase": "Any questions?"}, "Done. Any questions?",
     "Any questions? Done.", "Any questions"),
    ("startend:quotation", {}, '"quoted"', "plain", '"'),
    ("keywords:existence", {"keywords": ["cat", "dog"]}, "a cat and a dog", "a cat", "cats, dogs"),
    ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "a dog", "a Cat", "cat!"),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"},
     "cat cat", "cat", "catcat"),
]


@pytest.mark.parametrize("iid, kwargs, right, wrong, bad", OURS)
def test_each_of_our_checks(iid, kwargs, right, wrong, bad):
    assert all_followed(right, [iid], [kwargs], CHECKS)
    assert not all_followed(wrong, [iid], [kwargs], CHECKS)
    assert not all_followed(bad, [iid], [kwargs], CHECKS)
    assert not all_followed("", [iid], [kwargs], CHECKS)  # empty: nothing kept
    assert not all_followed("  \n ", [iid], [kwargs], CHECKS)


def test_every_one_of_our_checks_is_tested():
    assert {case[0] for case in OURS} == set(CHECKS)


def test_loose_mode_drops_asterisks_and_a_first_or_last_line():
    answer = "Sure! Here it is:\n**all lower case**\nHope It Helps"
    assert loose_variants(answer) == [
        answer, "Sure! Here it is:\nall lower case\nHope It Helps",
        "**all lower case**\nHope It Helps", "Sure! Here it is:\n**all lower case**",
        "**all lower case**"]
    lower = ["change_case:english_lowercase"]
    assert all_followed(answer, lower, [{}], CHECKS)  # both lines out
    assert not all_followed("Not Lower\nNot Lower\nNot Lower", lower, [{}], CHECKS)
    title = ["startend:quotation"]
    assert all_followed('Answer:\n"quoted"', title, [{}], CHECKS)


@pytest.mark.parametrize("answer, want", [
    ("hi there", 1.0),        # both kept
    ("hi, there", 0.0),       # the comma: one of two broken is wrong
    ("one two three", 0.0),   # the length
    ("", 0.0),
])
def test_every_instruction_is_required(answer, want):
    ids = ["length_constraints:number_words", "punctuation:no_comma"]
    kwargs = [{"num_words": 3, "relation": "less than"}, {}]
    assert float(all_followed(answer, ids, kwargs, CHECKS)) == want


@pytest.mark.parametrize("truth, extra, want", [
    # the package's rows: the instructions as a JSON string in ground_truth
    (json.dumps({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}), {},
     (["punctuation:no_comma"], [{}])),
    ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [None]}, {},
     (["punctuation:no_comma"], [{}])),
    # our rows: the fields themselves
    ("", {"instruction_id_list": ["startend:quotation"], "kwargs": [{}]},
     (["startend:quotation"], [{}])),
    ("not json", {}, ([], [])),  # badly formatted: no instructions, scored 0
])
def test_the_instructions_come_from_the_row_or_its_ground_truth(truth, extra, want):
    row = Task("f", "Say hi.", ground_truth=truth, extra=extra)
    assert instructions_of(row) == want
    if not want[0]:
        assert instruct_follow("hi", row) == 0.0


def test_an_unknown_instruction_is_an_error_that_names_the_fix():
    with pytest.raises(RewardError, match="has no check here"):
        all_followed("hi", ["made:up"], [{}], CHECKS)


def test_a_suite_whose_rows_name_unchecked_instructions_stops_at_start(nltk_data):
    rows = [Task("f", "Say hi.", ground_truth=json.dumps(
        {"instruction_id_list": ["made:up", "count:numbers"], "kwargs": [{}, {"N": 1}]}))]
    fix = "neither IFBench nor IFEval" if instructions.has_ifbench() else "lis-tui[ifbench]"
    with pytest.raises(TaskError, match=r"made:up.*" + fix.replace("[", r"\[")):
        instructions.prepare(rows)
    ok = [Task("g", "Say hi.", extra={"instruction_id_list": ["punctuation:no_comma"]})]
    note = instructions.prepare(ok)
    assert (note == "") is instructions.has_ifbench()
    assert not note or "not IFBench's" in note


@pytest.fixture
def nltk_data(tmp_path, monkeypatch):
    """With if-verifiable: NLTK's search path holds (empty) folders of the data it asks for,
    enough for the checks below, which read none of it, and for no download to be tried."""
    if instructions.has_ifbench():
        import nltk
        for resource in instructions.NLTK_RESOURCES:
            (tmp_path / "nltk" / resource).mkdir(parents=True)
        monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk")])


def test_ifbench_checks_without_nltk_data_stop_at_start_with_the_download_line(tmp_path,
                                                                              monkeypatch):
    pytest.importorskip("if_verifiable")
    import nltk
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    instructions.checks.cache_clear()
    rows = [Task("f", "Say hi.", extra={"instruction_id_list": ["count:numbers"]})]
    with pytest.raises(TaskError, match="python -m nltk.downloader punkt punkt_tab"):
        instructions.prepare(rows)


# IFBench's own checks (if-verifiable), ones that need no NLTK data
IFBENCH = [
    ("count:numbers", {"N": 2}, "1 and 22", "1, 2 and 3"),
    ("format:no_whitespace", {}, "no_space_at_all", "a space"),
    ("count:keywords_multiple", {"keyword1": "a", "keyword2": "b", "keyword3": "c",
                                 "keyword4": "d", "keyword5": "e"},
     "a b b c c c d d d d d e e e e e e e", "a b c d e"),
]


@pytest.mark.parametrize("iid, kwargs, right, wrong", IFBENCH)
def test_ifbench_checks_from_if_verifiable(iid, kwargs, right, wrong, nltk_data):
    pytest.importorskip("if_verifiable")
    assert all_followed(right, [iid], [kwargs])
    assert not all_followed(wrong, [iid], [kwargs])
    assert not all_followed("", [iid], [kwargs])
    row = Task("f", "q", ground_truth=json.dumps({"instruction_id_list": [iid],
                                                  "kwargs": [{**kwargs, "unused": None}]}))
    assert instruct_follow(f"Here you go:\n{right}", row) == 1.0  # loose: first line out


def _row(ids, kwargs, **extra):
    return Task("f", "q", ground_truth=json.dumps({"instruction_id_list": ids, "kwargs": kwargs}),
                extra=extra)


@pytest.mark.parametrize("row, answer, want, noted", [
    (_row([], []), "", 1.0, False),                              # nothing asked: right
    (_row(["count:numbers"], [{"N": 2}]), "Sure:\n1 and 22", 1.0, False),
    (_row(["punctuation:no_comma"], [{}]), "no commas", 0.0, True),  # IFEval's: IFBench lacks it
    (_row(["count:numbers", "made:up"], [{"N": 2}, {}]), "1 and 22", 0.0, True),
    (_row(["count:numbers"], []), "1 and 22", 0.0, False),       # short kwargs: it raises, 0
    (Task("f", "q", ground_truth="", extra={"instruction_id_list": ["count:numbers"],
                                            "kwargs": [{"N": 2}]}), "1 and 22", 0.0, True),
])
def test_the_default_scorer_reads_the_json_ground_truth_as_the_package(row, answer, want, noted,
                                                                        nltk_data):
    pytest.importorskip("if_verifiable")
    from lis_tui.bench.paper import scorers
    assert scorers.instruct_follow(answer, row) == want
    assert bool(scorers.row_note("instruct_follow", row)) is noted
    assert instructions.prepare_as_package([row]) == ""  # never refuses the suite
