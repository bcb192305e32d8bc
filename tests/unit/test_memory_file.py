"""The short-term memory file keeps within its cap by moving its oldest entries out, and
never drops a line: what leaves the file is exactly what the caller must store."""

from __future__ import annotations

from taskherd.policy.memory_file import SECTIONS, template, trim


def file_with(**entries: list[str]) -> str:
    lines = ["# Memory of role coder", ""]
    for title in SECTIONS:
        lines += [f"## {title}", *entries.get(title.split()[0].lower(), []), ""]
    return "\n".join(lines)


def test_a_file_within_its_cap_is_left_exactly_as_it_is():
    text = file_with(mistakes=["- pushed to main"]) + "\n\n"
    assert trim(text, 80).text == text and trim(text, 80).moved == ()


def test_the_oldest_entries_of_the_largest_section_move_out_first():
    log = [f"- session {n}" for n in range(1, 31)]
    text = file_with(mistakes=["- a", "- b"], session=log)
    trimmed = trim(text, 30)
    assert len(trimmed.text.splitlines()) <= 30
    assert [e.text for e in trimmed.moved][:3] == ["- session 1", "- session 2", "- session 3"]
    assert {e.section for e in trimmed.moved} == {"Session log"}
    assert "- a" in trimmed.text and "- session 30" in trimmed.text


def test_no_line_is_lost_and_continuations_move_with_their_entry():
    lines = [f"- learning {n}" for n in range(50)] + ["- the last one", "  with a second line"]
    text = file_with(learnings=lines, feedback=["- be brief"], mistakes=["* rm -rf"])
    trimmed = trim(text, 20)
    kept = [line for line in trimmed.text.splitlines() if line.strip()]
    gone = [line for entry in trimmed.moved for line in entry.text.splitlines()]
    original = [line for line in text.splitlines() if line.strip()]
    assert sorted(kept + gone) == sorted(original)
    assert "- the last one\n  with a second line\n" in trimmed.text


def test_a_cap_smaller_than_the_headings_stops_with_every_entry_moved():
    text = file_with(mistakes=["- one"], learnings=["- two"])
    trimmed = trim(text, 3)
    assert [e.text for e in trimmed.moved] == ["- one", "- two"]
    assert all(f"## {title}" in trimmed.text for title in SECTIONS)


def test_the_template_has_the_four_sections():
    text = template("qa")
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        f"## {title}" for title in SECTIONS]
