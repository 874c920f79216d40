"""What a chat model writes for Studio is kept sentence by sentence, only where the statements
it cites back it (studio.services.drafting.backed)."""

from __future__ import annotations

from studio.services.drafting import backed, label, statements

SAID = {
    1: "The chapters follow the life of the hive: its frames and boxes, the queen and the "
    "workers, the seasons of the colony.",
    2: "Worker bees are sterile females that clean cells, nurse the larvae and build comb.",
}


def test_a_backed_sentence_stays_and_an_invented_one_citing_the_same_statement_goes():
    text = "Worker bees are sterile females that nurse the larvae [2]. Napoleon crossed the Alps "
    text += "with them in 1805 and sold their honey in Paris [2]."
    assert backed(text, SAID) == "Worker bees are sterile females that nurse the larvae [2]."


def test_a_lead_in_goes_with_the_claim_it_introduces():
    text = "The chapters follow the life of the hive: its frames, the queen and the workers [1]"
    assert backed(text, SAID) == text  # not "its frames, …" alone


def test_a_claim_without_a_number_or_with_one_not_given_is_left_out():
    assert backed("Worker bees are sterile females that nurse the larvae.", SAID) == ""
    assert backed("Worker bees are sterile females that nurse the larvae [7].", SAID) == ""


def test_a_question_stays_beside_a_backed_claim_but_is_not_enough_alone():
    assert backed("What do workers do? They nurse the larvae and build comb [2]", SAID) == (
        "What do workers do? They nurse the larvae and build comb [2]"
    )
    assert backed("What do workers do?", SAID) == ""


def test_statements_are_numbered_as_cited_and_names_are_one_line_without_markers():
    content = {"sections": [{"items": [{"text": "**Bees** build comb. [2]"}, {"text": "x"}]}]}
    assert statements(content) == {2: "Bees build comb."}
    assert label("  Bees\nand <b>comb</b> [3] ") == "Bees and <b>comb</b>"
    assert label("word " * 30).endswith("…")
    assert len(label("word " * 30)) <= 61
