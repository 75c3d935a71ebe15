"""The King James Bible as training and held-out text.

The text comes from Debian's bible-kjv-text package (public domain: the translation dates from 1611), read
through its `bible` program (package bible-kjv), so the corpus is rebuilt the same on any Debian machine.
Whole books are held out for evaluation: a verse never sits half in training and half in evaluation, and no
held-out book shares a chapter with a training one.
"""
import subprocess

# Spread over narrative, wisdom, prophecy and letters, about 3% of the words.
HELD_OUT_BOOKS = ("Ruth", "Esther", "Ecclesiastes", "Jonah", "Philippians", "James")


def read_books():
    """[(book name, text)] in canonical order; a chapter reads "Genesis 1\\n\\n1 In the beginning ...\\n"."""
    out = subprocess.run(["bible", "-l0", "gen1:1-rev22:21"], check=True, capture_output=True, text=True).stdout
    books, name, lines = [], None, []
    for raw in out.splitlines():
        line = raw.strip()
        if not line:
            continue
        if raw.startswith("  "):  # a verse: "  12 And the earth brought forth grass, ..."
            lines.append(line + "\n")
            continue
        book, chapter = line.rsplit(" ", 1)  # a chapter header: "1 Samuel 3"
        if book != name:
            if name is not None:
                books.append((name, "".join(lines)))
            name, lines = book, []
        lines.append(("\n" if lines else "") + f"{book} {chapter}\n\n")
    books.append((name, "".join(lines)))
    if len(books) != 66:
        raise RuntimeError(f"expected the 66 books of the King James Bible, read {len(books)}")
    return books


def split():
    """(training text, [(held-out book, text)])."""
    books = read_books()
    missing = set(HELD_OUT_BOOKS) - {b for b, _ in books}
    if missing:
        raise RuntimeError(f"held-out books not in the text: {sorted(missing)}")
    train = "\n".join(t for b, t in books if b not in HELD_OUT_BOOKS)
    held = [(b, t) for b, t in books if b in HELD_OUT_BOOKS]
    return train, held
