"""Cases for test_paper_package.py: answers and rows in the published schema over the seven
suites: the formats models write, near misses, the package's quirks, malformed rows."""
import itertools
import json

JUDGED_SUITES = ("physics", "long_context")

MATH_TRUTHS = ["204", r"2\sqrt{3}", r"\frac{1}{2}", "0.5", "x^2+1", "(1, 2)", r"\pi", "-7",
               "1000", r"10\%", r"\{1,2\}"]
MATH_ANSWERS = ["@", r"\boxed{@}", r"The answer is \boxed{@}.", "@.", "Answer: @", r"\boxed{@",
                "$$@$$", r"\boxed {@}", r"\boxed{9} then \boxed{@}", r"\boxed{@} then \boxed{9}",
                "  @  ", r"\boxed{\boxed{@}}", r"\(@\)", "@ apples"]  # @: the truth
MATH_NEAR = [("204", r"\boxed{204.0}"), ("204", "2.04e2"), ("204", r"\boxed{204.}"),
             ("204", r"\boxed{205}"), (r"2\sqrt{3}", r"\boxed{\sqrt{12}}"),
             (r"2\sqrt{3}", "3.4641016"), (r"\frac{1}{2}", r"\boxed{1/2}"),
             (r"\frac{1}{2}", r"\boxed{\dfrac12}"), ("0.5", r"\boxed{50\%}"),
             ("x^2+1", r"\boxed{1+x^2}"), ("(1, 2)", r"\boxed{(2, 1)}"), ("1000", "1,000"),
             ("1000", r"\boxed{1{,}000}"), ("204", ""), ("204", r"\boxed{}"),
             ("204", "<think>205</think>\n204"), ("", "204"), ("204", r"\boxed{{204}"),
             ("204", r"\boxed{204}}"), ("-7", r"\boxed{- 7}"), (r"\pi", r"\boxed{3.14159}")]
MATH_ROWS = [204, None, ["204"], 0.5]  # ground truths that are not text

LETTER_TRUTHS = ["B", "AC", "b", " C ", "A, C"]
LETTER_ANSWERS = ["B", "b", "(B)", "Answer: B", "answer：B", '{"answer": "B"}', "The answer is B.",
                  "The choice is B", r"\boxed{B}", r"\boxed{B) SO2}", r"\boxed{}", r"\boxed{B",
                  "D or B", "BD", "B, I think", "I think B", "A and C", "AC", "A, C", "a, c",
                  "C A", "option b", "None", "", "Answer: (B)", "answer is (B)", r"\boxed{b}",
                  "ß", "B.", "**B**", "Answer: AC", "K", "é", "12", "(A), (C)"]
LETTER_ROWS = [["B"], None, 2]


def _math() -> list[dict]:
    out = [(t, a.replace("@", t)) for t, a in itertools.product(MATH_TRUTHS, MATH_ANSWERS)]
    out += MATH_NEAR + [(t, r"\boxed{204}") for t in MATH_ROWS]
    return [_case("math", a, {"domain": "math", "ground_truth": t}) for t, a in out]


def _letters() -> list[dict]:
    out = []
    for suite in ("chem", "biomed"):
        truths = LETTER_TRUTHS if suite == "chem" else LETTER_TRUTHS[:2]
        out += [_case(suite, a, {"domain": suite, "ground_truth": t})
                for t, a in itertools.product(truths, LETTER_ANSWERS)]
        out += [_case(suite, "B", {"domain": suite, "ground_truth": t}) for t in LETTER_ROWS]
    return out


PRETRAIN = [  # (domain, qa_type, ground truth, answers); qa_type "-" leaves the field out
    ("instruct_pretrain", "Multiple Choice", "A, C",
     ["A, C", "a, c", "AC", "A and C", "(A), (C)", "A", "C, A, B", "", "Answer: A, C"]),
    ("instruct_pretrain", "multiple choice", "B", ["B", "Answer: B", "A or B", "b", "(B)", "BD"]),
    ("instruct_pretrain", "Free-form", "The plant opened in 1987.",
     ["The plant opened in 1987.", "It opened in 1987", "1987", "Acme", ""]),
    ("instruct_pretrain", "-", "42", ["42", r"\boxed{42}", "forty-two", "The answer is 42."]),
    ("instruct_pretrain", None, "The sky is blue.", ["the sky is blue", "Blue sky."]),
    ("long_context", "Free-form", "Paris", ["Paris", "It is Paris.", "London"]),
    ("biomed", "Multiple Choice", "C", ["Answer: C", "C", "c", "C, D"]),
    ("chem_pubchem", "Multiple Choice", "A, B", ["A, B", "A", "B"]),
    ("math", "Free-form", "204", ["204", "204.", r"\boxed{204}", "Answer: 204"]),
    ("physics_x", "Free-form", r"\frac{1}{2}", ["0.5", "1/2"]),
    ("MATH", "-", "3", ["3"]),
    ("general", "Free-form", "x", ["x"]),              # no domain the package routes: it crashes
    ("", "Free-form", "x", ["x", ""]),
    ("other", "Multiple Choice", "A", ["A"]),
    ("instruct_pretrain", 5, "A", ["A", ""]),          # a qa_type that is not text: it crashes
    ("instruct_pretrain", "Multiple Choice", 7, ["7"]),  # a ground truth that is not text
    ("instruct_pretrain", "Free-form", "", ["x"]),
]


def _pretrain() -> list[dict]:
    out = []
    for domain, qa_type, truth, answers in PRETRAIN:
        row = {"ground_truth": truth, **({"domain": domain} if domain != "general" else {}),
               **({"qa_type": qa_type} if qa_type != "-" else {})}
        out += [_case("instruct_pretrain", a, row) for a in answers]
    follow = json.dumps({"instruction_id_list": ["count:numbers"], "kwargs": [{"N": 2}]})
    out += [_case("instruct_pretrain", a, {"domain": "instruct_follow", "ground_truth": follow})
            for a in ("1 and 22", "1, 2 and 3")]
    return out


NUMBERS = ("count:numbers", {"N": 2})
NO_SPACE = ("format:no_whitespace", {})
KEYWORDS = ("count:keywords_multiple", {"keyword1": "a", "keyword2": "b", "keyword3": "c",
                                        "keyword4": "d", "keyword5": "e"})
FOLLOW = [  # (instructions, answers)
    ([NUMBERS], ["1 and 22", "1, 2 and 3", "Sure:\n1 and 22", "1 and 22\nthanks 3", "",
                 "**1** and **22**", "   "]),
    ([NO_SPACE], ["no_space_at_all", "a space", "Here:\nno_space", "x\nmid\ny", "*a*b"]),
    ([KEYWORDS], ["a b b c c c d d d d d e e e e e e e", "a b c d e"]),
    ([NUMBERS, NO_SPACE], ["1and22", "1 and 22", "Sure:\n1and22"]),
    ([("punctuation:no_comma", {})], ["no commas", "a, b"]),  # IFEval's: IFBench lacks it
    ([NUMBERS, ("made:up", {})], ["1 and 22"]),
    ([], ["anything", ""]),                                      # no instructions: 1
]


def _follow() -> list[dict]:
    out = []
    for instructions, answers in FOLLOW:
        truth = json.dumps({"instruction_id_list": [i for i, _ in instructions],
                            "kwargs": [k for _, k in instructions]})
        out += [_case("instruct_follow", a, {"ground_truth": truth}) for a in answers]
    odd = [json.dumps({"instruction_id_list": ["count:numbers"], "kwargs": []}),  # short kwargs
           json.dumps({"instruction_id_list": ["count:numbers"], "kwargs": [{"N": 2, "x": None}]}),
           json.dumps({"kwargs": [{}]}), json.dumps(["count:numbers"]), "null", "not json", "",
           json.dumps({"instruction_id_list": "count:numbers", "kwargs": [{"N": 2}]})]
    out += [_case("instruct_follow", "1 and 22", {"ground_truth": t}) for t in odd]
    fields = {"ground_truth": "", "instruction_id_list": ["count:numbers"], "kwargs": [{"N": 2}]}
    out.append(_case("instruct_follow", "1 and 22", fields))  # the fields: the package reads none
    return out


REPLIES = [["CORRECT"] * 4, ["INCORRECT"] * 4, ["CORRECT", "INCORRECT", "CORRECT", "UNSURE"],
           ["score: 0.7"] * 4, ["NOT CORRECT"] * 4, ["correct"] * 4, ["Incorrectly stated"] * 4,
           ["It is CORRECT? No: INCORRECT"] * 4, ["INCORRECT at first, but CORRECT"] * 4,
           [""] * 4, ["CORRECTINCORRECT", "INCORRECTCORRECT", "xCORRECT", "ICORRECT"]]
JUDGE_ANSWERS = ["9.81", r"\boxed{9.81}", "", "   ", "<think>maybe 12</think>\n9.81",
                 "<think>9.81?</think>", "a</think>b</think>c", "  spaced  ", "{answer}"]


def _judged() -> list[dict]:
    out = []
    for suite in JUDGED_SUITES:
        for n, (answer, replies) in enumerate(itertools.product(JUDGE_ANSWERS, REPLIES)):
            if n % 2 and suite == "long_context":
                continue
            row = {"problem_statement": f"{suite} question {n}?", "ground_truth": "9.81"}
            out.append(dict(_case(suite, answer, row), judge=True, replies=replies))
    return out


def _case(suite: str, answer: str, row: dict) -> dict:
    return {"suite": suite, "answer": answer,
            "row": {"problem_statement": "Answer the question.", **row}}


def cases() -> list[dict]:
    return _math() + _letters() + _pretrain() + _follow() + _judged()
