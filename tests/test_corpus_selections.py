"""The everyday selections of the built corpora: game dialogue and courtesy phrases, read from
cached TSV files written with the corpus's own writer, split by split."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli import UsageError
from corpus import debian_text, libreoffice, selections
from corpus.tsv import write_rows


def write_cache(cache: Path, rows: dict[tuple[str, str], list[tuple[str, str, str]]]) -> None:
    """Every source's split files for en-de (empty unless ``rows`` names them), so nothing is fetched."""
    for source in debian_text.SOURCES:
        for split in debian_text.SPLITS:
            write_rows(debian_text.corpus_dir(cache) / f"{source}.{split}.en-de.tsv", rows.get((source, split), []))
    for source in libreoffice.SOURCES:
        for split in debian_text.SPLITS:
            write_rows(libreoffice.corpus_dir(cache) / f"{source}.{split}.en-de.tsv", rows.get((source, split), []))


@pytest.mark.parametrize(("key", "en", "kept"), [
    ("wesnoth-1.16-httt@1:1.16.9-1:wesnoth-httt", "Look there! Outlaws roam these woods!", True),
    ("freeciv-data@3.0.6-1:freeciv-core", "Your city has grown.", True),
    ("freeciv-data@3.0.6-1:freeciv-core", "Barracks", False),  # a name, not a sentence
    ("freeciv-data@3.0.6-1:freeciv-core", "Go!", False),  # one word
    ("kmail@4:22.12.3-1:kmail", "The message was sent.", False),  # not a game
])
def test_dialogue_is_a_games_sentences(key: str, en: str, kept: bool) -> None:
    assert selections.is_dialogue(key, en) is kept


@pytest.mark.parametrize(("key", "en", "kept"), [
    ("kmail@4:22.12.3-1:kmail", "Please restart KMail to apply the changes.", True),
    ("digikam-data@4:7.9.0-1:digikam", "File on the server is too large.", True),
    ("kmail@4:22.12.3-1:kmail", "Not found.", False),  # two words
    ("kmail@4:22.12.3-1:kmail", "Save the message as draft", False),  # a label: no sentence end
    ("kmail@4:22.12.3-1:kmail", "When this option is enabled, every message you send is also stored in the "
                                "folder chosen below.", False),  # 17 words: longer than MESSAGE_WORDS
    ("freeciv-data@3.0.6-1:freeciv-core", "Your city has grown.", False),  # a game's: dialogue
])
def test_message_is_a_programs_short_sentence(key: str, en: str, kept: bool) -> None:
    assert selections.is_message(key, en) is kept


@pytest.mark.parametrize(("en", "kept"), [
    ("Hello!", True), ("Good morning, Delfador!", True), ("Best regards", True), ("Thank you for your help.", True),
    ("Sorry, this file format is not supported.", True), ("Please try again.", True),
    ("Open the file.", False), ("Highlight the row", False),  # "hi" only as a whole word
    ("Please read the following text before you install the package, because it changes how the "
     "system starts.", False),  # longer than COURTESY_MAX_WORDS
])
def test_courtesy_is_short_and_polite(en: str, kept: bool) -> None:
    assert selections.is_courtesy(en) is kept


@pytest.mark.parametrize(("de", "kept"), [
    ("Starten Sie den Rechner neu, um die Änderungen abzuschließen.", True),
    ("Bitte schalten Sie den Drucker aus.", True),
    ("Wählen Sie die Spalten aus, die angezeigt werden sollen:", True),
    ("Geben Sie die Breite des Listenelements an.", True),
    ("Bitte starten Sie KMail neu!", True),
    ("Der Rechner wird neu gestartet.", False),  # no request
    ("Starten Sie die Anwendung.", False),  # a request, but no particle
    ("Sie können auch auf „Aktualisieren“ drücken.", False),  # "Sie" after a modal, not a request
    ("Klicken Sie auf die Schaltfläche und wählen Sie dann den Eintrag, der zu Ihrem Gerät gehört und neu ist.",
     False),  # the particle-like word is more than 60 characters after the verb
])
def test_german_request_sends_its_particle_to_the_end(de: str, kept: bool) -> None:
    assert selections.is_separable_request(de) is kept


def test_selections_read_each_split_from_the_cached_sources(tmp_path: Path) -> None:
    game, mail = "wesnoth-1.16-httt@1:1.16.9-1:wesnoth-httt", "kmail@4:22.12.3-1:kmail"
    write_cache(tmp_path, {
        ("debian-catalogs", "train"): [(game, "Good morning, Delfador!", "Guten Morgen, Delfador!"),
                                       (game, "Delfador", "Delfador"),
                                       (mail, "The message was sent.", "Die Nachricht wurde gesendet.")],
        ("debian-catalogs", "test"): [(game, "We ride at dawn.", "Wir reiten im Morgengrauen.")],
        ("debian-examples", "train"): [("trans-de-en@1.9-6:1", "Good morning!", "Guten Morgen!"),
                                       ("trans-de-en@1.9-6:2", "Good morning!", "Guten Morgen!")],
        ("libreoffice-ui", "train"): [("wiz.mo", "Best regards", "Mit freundlichen Grüßen")],
        ("debian-kde-docs", "train"): [("kgpg@4:22.12.3-1:kgpg", "Select the key.", "Wählen Sie den Schlüssel aus."),
                                       ("kgpg@4:22.12.3-1:kgpg", "Select a key.", "Wählen Sie einen Schlüssel.")],
        ("libreoffice-help", "train"): [("text/a.html#p1", "Select the key.", "Wählen Sie den Schlüssel aus.")],
        ("libreoffice-help", "dev"): [("text/b.html#p2", "Turn it off.", "Schalten Sie es aus.")],
    })
    assert selections.read_rows("debian-dialogue", "train", "de", tmp_path) == [
        (game, "Good morning, Delfador!", "Guten Morgen, Delfador!")]
    assert selections.read_rows("debian-dialogue", "test", "de", tmp_path) == [
        (game, "We ride at dawn.", "Wir reiten im Morgengrauen.")]
    assert selections.read_rows("debian-messages", "train", "de", tmp_path) == [
        (mail, "The message was sent.", "Die Nachricht wurde gesendet.")]
    assert selections.read_rows("debian-messages", "test", "de", tmp_path) == []
    # from every source, the same pair once, keys kept
    assert selections.read_rows("debian-courtesy", "train", "de", tmp_path) == [
        (game, "Good morning, Delfador!", "Guten Morgen, Delfador!"),
        ("trans-de-en@1.9-6:1", "Good morning!", "Guten Morgen!"),
        ("wiz.mo", "Best regards", "Mit freundlichen Grüßen")]
    assert selections.read_rows("debian-courtesy", "dev", "de", tmp_path) == []
    got = selections.pairs("debian-courtesy", ["en-de", "de-en", "de-fr"], "train", tmp_path)  # de-fr: none
    assert [(p.src_lang, p.tgt_lang, p.src) for p in got][-2:] == [("de", "en", "Guten Morgen!"),
                                                                  ("de", "en", "Mit freundlichen Grüßen")]
    assert len(got) == 6
    # German only; from Debian's sources and LibreOffice's help and UI, the same pair once
    assert selections.read_rows("debian-requests", "train", "de", tmp_path) == [
        ("kgpg@4:22.12.3-1:kgpg", "Select the key.", "Wählen Sie den Schlüssel aus.")]
    assert selections.read_rows("debian-requests", "dev", "de", tmp_path) == [
        ("text/b.html#p2", "Turn it off.", "Schalten Sie es aus.")]
    assert selections.read_rows("debian-requests", "train", "fr", tmp_path) == []


def test_unknown_selection_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="corpus selection 'debian-chat' is not one of debian-dialogue, "
                                         "debian-courtesy, debian-messages, debian-requests"):
        selections.read_rows("debian-chat", "train", "de", tmp_path)
