"""A sum of cost in words never says $0 for runs whose cost is unknown."""

from __future__ import annotations

from taskherd.policy.costs import cost_text, known_cost


def test_a_sum_names_the_runs_it_could_not_price():
    assert cost_text(1.2, 5) == "$1.2000 + 5 runs of unknown cost"
    assert cost_text(1.2, 1) == "$1.2000 + 1 run of unknown cost"
    assert cost_text(0.0, 5) == "unknown (5 runs)"
    assert cost_text(None, 1) == "unknown (1 run)"
    assert cost_text(1.2, 0) == "$1.2000"
    assert cost_text(0.0, 0) == "$0.0000"  # nothing ran that costs: a true zero


def test_json_has_no_dollars_when_only_unknown_runs_ran():
    assert known_cost(0.0, 5) is None
    assert known_cost(1.2, 5) == 1.2
    assert known_cost(0.0, 0) == 0.0
