"""Short URLs in a message: the marker the service replaces with each link's short URL, and its rule.

A message's ``links`` are shortened by the service, which puts each short URL where the text holds a
``<-short->`` marker, in order: one marker per link. DAG files load this module to check a literal
message when they are parsed, so it holds only the marker and its check (the parts count, which needs
the marker too, is in :mod:`airflow_provider_sms.sms_parts`).
"""

from __future__ import annotations

# Where the service inserts a short URL in a text (one marker per link of the message).
SHORT_MARKER = "<-short->"


def marker_mismatch(text: str, links: int) -> str | None:
    """What is wrong when ``text`` does not hold one ``<-short->`` marker per link, else None.

    :param text: the message text.
    :param links: how many links the message gives.
    """
    markers = text.count(SHORT_MARKER)
    if markers == links:
        return None
    fixes = (
        "add the missing URL(s) to links, one per marker in order (each marker becomes a short URL to "
        "its link), or remove the marker(s) without a link from the text"
        if markers > links
        else f"put a {SHORT_MARKER} marker in the text where each link's short URL goes, or remove the "
        "link(s) without a marker from links"
    )
    return f"text has {markers} '{SHORT_MARKER}' marker(s) but {links} link(s) are given: {fixes}"
