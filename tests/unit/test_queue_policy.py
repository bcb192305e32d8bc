from taskherd.queue import RetryPolicy


def test_backoff_doubles_from_the_base_and_stops_at_the_cap():
    policy = RetryPolicy(backoff_base=15, backoff_cap=900)
    assert [policy.backoff(n) for n in range(1, 9)] == [15, 30, 60, 120, 240, 480, 900, 900]


def test_backoff_of_huge_strike_counts_does_not_overflow():
    assert RetryPolicy().backoff(10_000) == RetryPolicy().backoff_cap
