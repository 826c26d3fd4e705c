"""The numbers and files of a bench report, from hand-made results.jsonl records."""

import json
from html.parser import HTMLParser

from lis_tui.bench.report.charts import bar_chart
from lis_tui.bench.report.pages import markdown, run_info, write_reports
from lis_tui.bench.report.summary import summarize


def rec(id, mode, domain, correct, steps=3, tokens=(100, 10, 5), finish="submitted", caps=(1, 2, 0),
        crashed=False):
    return {"key": f"{id}|{mode}|0", "id": id, "mode": mode, "repeat": 0, "domain": domain,
            "answer": "x", "correct": correct, "reward": float(correct), "finish_reason": finish,
            "message": "", "steps": steps,
            "tokens": dict(zip(("prompt", "completion", "environment"), tokens)),
            "wall_time": 1.5, "crashed": crashed, "reward_error": "",
            "trajectory": f"episodes/{id}.{mode}.0/trajectory.json",
            "capability": dict(zip(("computation", "file_management", "external_resources"), caps))}


RECORDS = [
    rec("a", "sandbox", "math", True), rec("b", "sandbox", "math", True),
    rec("c", "sandbox", "docs <&>", False, finish="max_steps", caps=(0, 3, 1)),
    rec("d", "sandbox", "docs <&>", False, steps=0, tokens=(0, 0, 0), finish="error", crashed=True,
        caps=(0, 0, 0)),
    rec("a", "llm", "math", True, steps=1, tokens=(50, 400, 0), caps=(0, 0, 0)),
    rec("b", "llm", "math", False, steps=1, tokens=(50, 400, 0), caps=(0, 0, 0)),
    rec("c", "llm", "docs <&>", True, steps=1, tokens=(900, 100, 0), caps=(0, 0, 0)),
    rec("d", "llm", "docs <&>", False, steps=1, tokens=(900, 100, 0), finish="error", caps=(0, 0, 0)),
]


def test_the_summary_compares_modes_per_domain():
    s = summarize(RECORDS)
    sandbox, llm = s["per_mode"]["sandbox"], s["per_mode"]["llm"]
    assert s["modes"] == ["sandbox", "llm"] and s["domains"] == ["docs <&>", "math"]
    assert (sandbox["accuracy"], llm["accuracy"]) == (0.5, 0.5)
    assert sandbox["domains"]["math"]["accuracy"] == 1.0 and llm["domains"]["math"]["accuracy"] == 0.5
    assert s["comparison"]["domain_delta"] == {"docs <&>": -0.5, "math": 0.5}
    assert sandbox["mean_steps"] == 2.25
    assert sandbox["tokens"] == {"prompt": 75, "completion": 7.5, "environment": 3.75}
    assert s["comparison"]["token_ratio"] == (75 + 7.5) / (475 + 250)
    assert sandbox["capability"] == {"computation": 2 / 9, "file_management": 7 / 9,
                                     "external_resources": 1 / 9}
    assert sandbox["capability_episodes"]["computation"] == 0.5
    assert sandbox["errors"] == {"max_steps": 1, "crash": 1} and llm["errors"] == {"error": 1}


def test_the_report_files_exist_and_parse(tmp_path):
    write_reports(RECORDS, tmp_path, title="t")
    md = (tmp_path / "summary.md").read_text()
    assert "| math | 100.0% (n=2) | 50.0% (n=2) | +50.0 pts |" in md
    assert "sandbox / llm model tokens (prompt + completion): 0.11x" in md
    assert "| sandbox | crash | 1 |" in md
    assert json.loads((tmp_path / "summary.json").read_text())["episodes"] == 8

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.text = [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)

        def handle_data(self, data):
            self.text.append(data)

    page = (tmp_path / "report.html").read_text()
    parser = Collect()
    parser.feed(page)
    # per-group, accuracy, steps/tokens, capability, errors, and the episode list
    assert parser.tags.count("svg") == 3 and parser.tags.count("table") == 6
    assert "docs <&>" in "".join(parser.text) and "<&>" not in page  # escaped, never raw


def test_an_empty_run_still_reports():
    assert "No episodes finished yet" in markdown(summarize([]))


def test_the_per_group_table_sets_the_modes_side_by_side():
    records = [dict(r, suite="chem") if r["domain"] == "math" else r for r in RECORDS]
    records[0] = dict(records[0], tokens={"prompt": 100, "completion": 10, "environment": 5,
                                          "trajectory": 60})
    s = summarize(records)
    assert s["group_by"] == "suite" and list(s["groups"]) == ["chem", "docs <&>"]
    chem = s["groups"]["chem"]
    assert chem["accuracy_delta"] == 0.5 and chem["token_ratio"] == 110 / 450
    assert chem["modes"]["sandbox"]["trajectory_tokens"] == (60 + 110) / 2
    assert chem["trajectory_ratio"] == 85 / 450
    assert chem["modes"]["sandbox"]["capability"]["file_management"] == 4 / 6
    md = markdown(s)
    assert ("| chem | 100.0% (n=2) | 50.0% (n=2) | +50.0 pts | 1.000 | 0.500 | 110 | 450 | 0.24x | 0.19x "
            "| 33.3% | 66.7% | 0.0% |") in md
    only_llm = summarize([r for r in RECORDS if r["mode"] == "llm"])
    assert "| math | 50.0% (n=2) | - | 0.500 | 450 | - | - | 0.0% | 0.0% | 0.0% |" not in markdown(only_llm)
    assert "| math | 50.0% (n=2) | 0.500 | 450 |" in markdown(only_llm)  # no columns all "-"


def test_the_page_leads_with_title_model_server_and_date_then_charts_then_episodes(tmp_path):
    run = run_info("qwen", "https://me:sk-secret@api.example.com:8443/v1?api-key=sk-2#x")
    assert run["server"] == "https://api.example.com:8443/v1"
    write_reports(RECORDS, tmp_path, title="t <b>", run=run)
    page = (tmp_path / "report.html").read_text()
    assert "sk-secret" not in page and "sk-2" not in page and "me:" not in page
    order = [page.index(x) for x in ("<h1>t &lt;b&gt;</h1>", "<dd>qwen</dd>",
                                     "<dd>https://api.example.com:8443/v1</dd>", "<dt>Date</dt>",
                                     "<svg", "<h2>Per domain", "<h2>Episodes</h2>")]
    assert order == sorted(order)
    episodes = page.split("<h2>Episodes</h2>")[1]
    assert episodes.count("<tr>") == 1 + len(RECORDS)
    assert '<td>a</td><td class="l">llm</td><td>0</td><td class="text">x</td><td>1.00</td>' \
           '<td class="text">submitted</td><td class="l"><a href="episodes/a.llm.0/trajectory.json">' \
           'trajectory</a>' in episodes
    assert "Model: qwen" in (tmp_path / "summary.md").read_text()


def test_a_link_never_leaves_the_run_folder_and_long_answers_are_cut(tmp_path):
    records = [dict(RECORDS[0], trajectory="../../etc/passwd", answer="y" * 500),
               dict(RECORDS[1], trajectory="javascript:alert(1)"),
               dict(RECORDS[2], trajectory="/abs/trajectory.json")]
    write_reports(records, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "href" not in page and "y" * 300 + "…" in page and "y" * 301 not in page


def test_every_episode_cell_is_escaped_even_a_number_that_is_not_one(tmp_path):
    """results.jsonl is data a person may edit or be handed: `repeat` went into the page raw."""
    write_reports([dict(RECORDS[0], repeat="<img src=x onerror=alert(1)>")], tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_all_zero_and_empty_charts_say_so():
    zero = bar_chart("Capability", ["computation"], {"sandbox": [0.0]}, percent=True)
    assert "All values are 0" in zero and "No data" not in zero
    assert "No data" in bar_chart("Tokens", [], {})
    assert "All values are 0" not in bar_chart("Tokens", ["prompt"], {"llm": [3.0]})


def test_older_records_without_suite_or_trajectory_tokens_still_summarize():
    s = summarize(RECORDS)  # hand-made records: no "suite", no tokens.trajectory
    assert s["group_by"] == "domain"
    assert s["groups"]["math"]["modes"]["llm"]["trajectory_tokens"] == 450


def test_a_bench_says_why_an_episode_failed_and_which_wrote_no_answer(tmp_path, monkeypatch, capsys):
    """A real bench against the scripted server: one episode meets a 400 (context length), one
    submits without writing answer.txt. The console, summary.md and report.html say so."""
    from fakes.openai_server import FakeOpenAI, call, error, reply

    from lis_tui.cli import main

    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"id": "long", "problem_statement": "p", "ground_truth": "1"}\n'
                     '{"id": "mute", "problem_statement": "p", "ground_truth": "1"}\n')
    too_long = "This model's maximum context length is 4096 tokens; you asked for 9000"
    script = [error(400, too_long), reply("done", [call("submit", {})])]  # -j 1: in task order
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(script) as server:
        code = main(["bench", str(tasks), "-j", "1", "--rootfs", "host", "--base-url",
                     server.base_url, "--model", "m", "--output", "out"])
        assert len(server.chat_requests) == 2  # the 400 is not retried
    assert code == 0
    console = capsys.readouterr().out
    summary = (tmp_path / "out" / "summary.md").read_text()
    page = (tmp_path / "out" / "report.html").read_text()
    for shown in (console, summary, page):
        assert "maximum context length is 4096 tokens" in shown
        assert "no answer" in shown and "answer.txt was written" in shown
    assert "None: every episode" not in summary
    assert '<td class="l">sandbox</td>' in page  # text columns read from the left


def test_text_columns_are_left_aligned_and_numbers_right(tmp_path):
    write_reports(RECORDS, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert '<td class="l">sandbox</td>' in page and '<td class="l">max_steps</td>' in page
    assert "<td>100.0% (n=2)</td>" in page  # a number stays right-aligned


def test_a_single_mode_summary_has_no_empty_gap_columns():
    one = markdown(summarize([r for r in RECORDS if r["mode"] == "sandbox"]))
    both = markdown(summarize(RECORDS))
    assert "sandbox − llm" not in one and "tokens ratio" not in one and "sandbox acc" in one
    assert "sandbox − llm" in both and "tokens ratio" in both
