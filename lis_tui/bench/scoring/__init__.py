"""How an answer is scored: 1.0 right, 0.0 wrong, a judge's fraction in between.

answers (the answer pulled out of text: numbers, `\\boxed{}`, letters, `ANSWER:` lines), rewards
(a task's named reward against its ground truth), judge (an OpenAI-compatible model grades it),
score (a task's score: its reward, the judge, or a paper suite's own scorer).

May import: lis_tui.config (the judge's model settings), lis_tui.bench.paper lazily (a paper
task's scorer); nothing of the runner.
"""
