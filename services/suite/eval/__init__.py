"""`cogmesh eval`: run an agent over a dataset of cases through the gateway and report (docs/eval.md).

dataset.py loads and validates datasets, runner.py runs their cases as turns, graders.py and
judge.py judge the answers, report.py writes the table, JSON and JUnit XML; command.py is the
command line.
"""
