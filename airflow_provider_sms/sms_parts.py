"""How many SMS parts a text takes: the one place that counts them (operators' estimate and sandbox cost).

A text made only of GSM 03.38 characters is sent in GSM-7: 160 characters in a single SMS, 153 per
part when it is longer (the rest of each part holds the concatenation header); the characters of the
extension table (``^ { } [ ] ~ | \\ €`` and form feed) take two. Any other character (an emoji, a
curly apostrophe, U+2019) switches the whole text to Unicode (UCS-2): 70 UTF-16 units in a single SMS,
67 per part. Each ``<-short->`` marker is counted as a short URL of :data:`SHORT_URL_LENGTH`
characters, an estimate: the service does not document the length of its short URLs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from airflow_provider_sms.short_urls import SHORT_MARKER

# GSM 03.38 basic character set (the escape character 0x1B excluded: it only introduces extensions).
GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
# GSM 03.38 extension table: each character is sent as escape + character, two septets.
GSM7_EXTENSION = frozenset("^{}\\[~]|€\f")
SINGLE = {"GSM-7": 160, "UCS-2": 70}
PER_PART = {"GSM-7": 153, "UCS-2": 67}
# Length counted for each short-URL marker; an estimate (e.g. "https://sms.to/Ab3xY9").
SHORT_URL_LENGTH = 22
# The service appends an unsubscribe (STOP) mention of this many characters to a marketing SMS sent
# with a custom sender: it counts in the parts each recipient is billed for.
STOP_MENTION_LENGTH = 16

Encoding = Literal["GSM-7", "UCS-2"]


@dataclass(frozen=True)
class SmsParts:
    """The size of one SMS text.

    :param encoding: ``GSM-7`` or ``UCS-2`` (Unicode).
    :param length: septets (GSM-7) or UTF-16 units (UCS-2) the text takes.
    :param parts: SMS parts each recipient receives (what the service bills).
    :param unicode_chars: up to five characters that forced Unicode, to help the author remove them.
    """

    encoding: Encoding
    length: int
    parts: int
    unicode_chars: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for a task log, e.g. ``2 SMS parts (GSM-7, 170 characters; 160 fit in one)``."""
        single = SINGLE[self.encoding]
        plural = "part" if self.parts == 1 else "parts"
        forced = (
            " (Unicode because of " + ", ".join(f"{c!r} U+{ord(c):04X}" for c in self.unicode_chars) + ")"
            if self.unicode_chars
            else ""
        )
        return (
            f"{self.parts} SMS {plural} per recipient ({self.encoding}, {self.length} characters; "
            f"{single} fit in one, {PER_PART[self.encoding]} per part beyond){forced}"
        )

    def as_dict(self) -> dict[str, object]:
        """The figures as a plain dict (for XCom)."""
        return {"encoding": self.encoding, "length": self.length, "parts": self.parts}


def has_stop_mention(pushtype: str | None, sender: str | None) -> bool:
    """Whether the service appends the STOP mention: a ``marketing`` SMS with a custom sender."""
    return pushtype == "marketing" and bool(sender)


def count_parts(
    text: str, *, short_url_length: int = SHORT_URL_LENGTH, stop_mention: bool = False
) -> SmsParts:
    """Count the SMS parts of ``text``, each ``<-short->`` marker counted as a short URL.

    :param text: the message text, as given to the service.
    :param short_url_length: characters counted for each short-URL marker.
    :param stop_mention: count the :data:`STOP_MENTION_LENGTH` characters the service appends
        (see :func:`has_stop_mention`); spaces and letters, one place each in GSM-7 and Unicode.
    """
    markers = text.count(SHORT_MARKER)
    body = text.replace(SHORT_MARKER, "")
    non_gsm = [char for char in body if char not in GSM7_BASIC and char not in GSM7_EXTENSION]
    if non_gsm:
        encoding: Encoding = "UCS-2"
        length = len(body.encode("utf-16-le")) // 2
        unicode_chars = tuple(dict.fromkeys(non_gsm))[:5]
    else:
        encoding = "GSM-7"
        length = len(body) + sum(1 for char in body if char in GSM7_EXTENSION)
        unicode_chars = ()
    length += markers * short_url_length + (STOP_MENTION_LENGTH if stop_mention else 0)
    parts = 1 if length <= SINGLE[encoding] else math.ceil(length / PER_PART[encoding])
    return SmsParts(encoding=encoding, length=length, parts=parts, unicode_chars=unicode_chars)
