"""A job's task title is a template: `{job}`, `{date}` and `{time}` of the fire (in the job's
zone) and `{fire}`, so a board of nightly tasks says which night each one is."""

from __future__ import annotations

from tests.integration.test_scheduler import local, rig  # noqa: F401 (a fixture)


def test_title_placeholders_are_filled_per_fire_in_the_jobs_zone(rig):  # noqa: F811
    r = rig([{"name": "digest", "cron": "30 23 * * *", "title": "{job} {date} at {time} ({fire})",
              "overlap": "allow"}],
            tz="Asia/Tokyo")
    start = local("2026-11-20T12:00", "Asia/Tokyo")
    r.sync(start)
    r.tick(local("2026-11-20T23:31", "Asia/Tokyo"))
    r.tick(local("2026-11-21T23:31", "Asia/Tokyo"))
    assert [t.title for t in r.tasks()] == ["digest 2026-11-20 at 23:30 (schedule)",
                                            "digest 2026-11-21 at 23:30 (schedule)"]


def test_a_plain_title_and_other_braces_stay_as_written(rig):  # noqa: F811
    r = rig([{"name": "plain", "every": "1h", "overlap": "allow"},
             {"name": "braces", "every": "1h", "overlap": "allow", "title": "fix {x} of {job}"}])
    start = local("2026-11-20T12:00", "UTC")
    r.sync(start)
    r.tick(start + 3601)
    assert sorted(t.title for t in r.tasks()) == ["fix {x} of braces", "plain"]
