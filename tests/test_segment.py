"""Sentence splitting (server/segment.py) and how a text's translation is put together from its
sentences' (server/service.py, ``whole_text``): exact boundaries, whitespace kept."""

from __future__ import annotations

import pytest

from nmt.v1 import translator_pb2 as pb
from server.segment import join, split_sentences, whole
from server.service import whole_text


def sentences(text: str, lang: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text, lang)]


@pytest.mark.parametrize(("lang", "text", "expected"), [
    ("en", 'Dr. Smith arrived at 3.5 p.m. on Jan. 5. He said "Hello." Then he left... Mr. Brown stayed, etc. '
           "The U.S. economy grew. Really? Yes!",
     ["Dr. Smith arrived at 3.5 p.m. on Jan. 5.", 'He said "Hello."', "Then he left...", "Mr. Brown stayed, etc.",
      "The U.S. economy grew.", "Really?", "Yes!"]),
    ("en", "So did I. Then J. R. R. Tolkien wrote e.g. The Hobbit. “Why?” she asked. (See below.) No. 5 won.",
     ["So did I.", "Then J. R. R. Tolkien wrote e.g. The Hobbit.", "“Why?” she asked.", "(See below.)",
      "No. 5 won."]),
    ("de", "Dr. Müller kam z. B. um 3.5 Uhr. Er sagte: „Hallo.“ Dann ging er... Das ist u. a. wichtig, usw. "
           "Am 3. Oktober 1990 war es so, d. h. Kinder sahen es. Wirklich? Ja!",
     ["Dr. Müller kam z. B. um 3.5 Uhr.", "Er sagte: „Hallo.“", "Dann ging er...", "Das ist u. a. wichtig, usw.",
      "Am 3. Oktober 1990 war es so, d. h. Kinder sahen es.", "Wirklich?", "Ja!"]),
    ("de", "1. Einleitung vgl. Kapitel drei. Er wohnt in der Hauptstr. Dort ist es schön.",
     ["1. Einleitung vgl. Kapitel drei.", "Er wohnt in der Hauptstr.", "Dort ist es schön."]),
    ("fr", "M. Dupont est arrivé à 3,5 h. Il a dit « Bonjour. » Puis il est parti... Mme Martin est restée, etc. "
           "Le Dr. Petit aussi. Vraiment ? Oui !",
     ["M. Dupont est arrivé à 3,5 h.", "Il a dit « Bonjour. »", "Puis il est parti...",
      "Mme Martin est restée, etc.", "Le Dr. Petit aussi.", "Vraiment ?", "Oui !"]),
    ("es", "El Sr. García llegó a las 3.5 h. Dijo «Hola.» Luego se fue... La Sra. López se quedó, etc. "
           "¿De verdad? ¡Sí! Vive en EE. UU. Es feliz. ¿Qué? —preguntó él.",
     ["El Sr. García llegó a las 3.5 h.", "Dijo «Hola.»", "Luego se fue...", "La Sra. López se quedó, etc.",
      "¿De verdad?", "¡Sí!", "Vive en EE. UU.", "Es feliz.", "¿Qué? —preguntó él."]),
])
def test_sentence_boundaries(lang, text, expected):
    assert sentences(text, lang) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("See https://example.org/a.b. Next.", ["See https://example.org/a.b.", "Next."]),
    ("Version 3.5 is out. It costs 1,000.50 EUR.", ["Version 3.5 is out.", "It costs 1,000.50 EUR."]),
    ("Mail j.doe@example.com. Then go to www.example.org/A. B is next.",
     ["Mail j.doe@example.com.", "Then go to www.example.org/A.", "B is next."]),
    ("Open C:\\Users\\Me\\a.txt. Then /usr/lib/X.so. Done.", ["Open C:\\Users\\Me\\a.txt.", "Then /usr/lib/X.so.",
                                                             "Done."]),
    ("Run `echo Done. Exit` now. Then stop.", ["Run `echo Done. Exit` now.", "Then stop."]),
    ("Use {0}. Then %1. Then $(ARG1). Done.", ["Use {0}.", "Then %1.", "Then $(ARG1).", "Done."]),
])
def test_a_sentence_never_ends_inside_a_span_the_translation_copies(text, expected):
    """URLs, e-mail addresses, paths, numbers, code and format placeholders (engine/placeholders.py)
    reach the model whole; their final dot is the sentence's."""
    assert sentences(text, "en") == expected


def test_line_breaks_always_end_a_sentence_and_offsets_index_the_text():
    text = "  In the beginning\nwas the Word. And\r\nthe Word\u2028was God.\n\n\t"
    spans = split_sentences(text, "en")
    assert [text[s:e] for s, e in spans] == ["In the beginning", "was the Word.", "And", "the Word", "was God."]
    assert spans[0] == (2, 18)


def test_blank_texts_have_no_sentences():
    for text in ("", " ", "\n\n", " \t\r\n \u2028"):
        assert split_sentences(text, "en") == [] and whole(text) == []


def test_an_unknown_language_still_splits_on_the_general_rules():
    assert sentences("Dr. No. Yes! J. Doe came. Then?", "xx") == ["Dr.", "No.", "Yes!", "J. Doe came.", "Then?"]


def test_whole_keeps_the_surrounding_whitespace_out():
    assert whole("  Jesus wept. Amen.\n") == [(2, 19)]


def test_join_puts_outputs_in_the_places_of_their_spans():
    text = "  Ja. Nein.\n\nGut. "
    spans = split_sentences(text, "de")
    assert spans == [(2, 5), (6, 11), (13, 17)]
    assert join(text, spans, ["x", "yy", ""]) == "  x yy\n\n "
    assert join(text, [], []) == text
    with pytest.raises(ValueError):
        join(text, spans, ["x"])


def test_whole_text_joins_the_ith_hypotheses_and_says_if_any_sentence_was_cut():
    """Several sentences: the i-th hypotheses joined, scores and tokens summed, LENGTH_LIMIT if
    any was cut. One sentence: its hypotheses, pieces and attention moved to the text's."""
    text = " Jesus wept.  Amen.\n"
    first = pb.Segment(source="Jesus wept.", start=1, end=12, hypotheses=[
        pb.Hypothesis(text="Jesus weinte.", score=-1.0, num_tokens=4, stop_reason=pb.STOP_REASON_END_OF_SENTENCE),
        pb.Hypothesis(text="Jesus", score=-2.0, num_tokens=2, stop_reason=pb.STOP_REASON_LENGTH_LIMIT)])
    second = pb.Segment(source="Amen.", start=14, end=19, hypotheses=[
        pb.Hypothesis(text="Amen.", score=-0.5, num_tokens=2, stop_reason=pb.STOP_REASON_END_OF_SENTENCE),
        pb.Hypothesis(text="Amen!", score=-1.5, num_tokens=2, stop_reason=pb.STOP_REASON_END_OF_SENTENCE)])
    assert whole_text(text, [first, second]) == [
        pb.Hypothesis(text=" Jesus weinte.  Amen.\n", score=-1.5, num_tokens=6,
                      stop_reason=pb.STOP_REASON_END_OF_SENTENCE),
        pb.Hypothesis(text=" Jesus  Amen!\n", score=-3.5, num_tokens=4, stop_reason=pb.STOP_REASON_LENGTH_LIMIT)]
    one = pb.Segment(source="Amen.", start=1, end=6, hypotheses=[
        pb.Hypothesis(text="Amen.", num_tokens=2, source_pieces=["<2de>", "▁Amen", "."], target_pieces=["▁Amen", "."],
                      attention=[0.5] * 6, stop_reason=pb.STOP_REASON_END_OF_SENTENCE)])
    [h] = whole_text(" Amen. ", [one])
    assert h.text == " Amen. " and list(h.attention) == [0.5] * 6 and list(h.target_pieces) == ["▁Amen", "."]
    assert one.hypotheses[0] == pb.Hypothesis(text="Amen.", num_tokens=2, stop_reason=pb.STOP_REASON_END_OF_SENTENCE)
    assert whole_text("  \n", []) == [pb.Hypothesis(text="  \n")]
