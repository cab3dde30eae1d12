"""The docs a newcomer reads first say each thing once and name commands that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "ARCHITECTURE.md", "deploy/README.md")


def paragraphs(text: str) -> list[str]:
    """Prose paragraphs (code blocks and tables left out), whitespace-normalised."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    out = []
    for block in re.split(r"\n\s*\n", text):
        if block.lstrip().startswith(("|", "#")):
            continue
        words = " ".join(block.split())
        if len(words) > 40:  # short lines ("Chart values: ...") may repeat on purpose
            out.append(words)
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_no_paragraph_is_said_twice(doc: str) -> None:
    seen: set[str] = set()
    for para in paragraphs((ROOT / doc).read_text()):
        assert para not in seen, f"{doc} repeats: {para[:80]}..."
        seen.add(para)


@pytest.mark.parametrize("doc", DOCS)
def test_no_sentence_is_said_twice(doc: str) -> None:
    # The deploy/README.md duplicate ("The policy is compiled asynchronously...") was the
    # tail of one paragraph and a paragraph of its own: compare sentences too.
    sentences: dict[str, int] = {}
    for para in paragraphs((ROOT / doc).read_text()):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", para):
            if len(sentence) > 60:
                sentences[sentence] = sentences.get(sentence, 0) + 1
    repeated = [s for s, n in sentences.items() if n > 1]
    assert not repeated, f"{doc} repeats: {repeated}"


@pytest.mark.parametrize("doc", DOCS)
def test_no_doc_points_outside_the_repository(doc: str) -> None:
    # A reader of the checkout (or of the package page) has nothing beside it.
    outside = re.findall(r"`\.\./[^`]*`|\]\(\.\./[^)]*\)|\.\./shared\b", (ROOT / doc).read_text())
    assert outside == [], outside
