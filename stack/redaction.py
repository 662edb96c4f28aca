"""What a message may show of a URL. Plain Python (no click): a Spark executor imports it with the ledger."""

from __future__ import annotations

import re


def without_password(url: str) -> str:
    """``url`` with its password replaced by ``***`` (amqp://user:***@host, jdbc:…?password=*** or ;password=***)."""
    url = re.sub(r"(://[^:/@]+:)[^@/]*@", r"\1***@", url)
    return re.sub(r"(password=)[^;&]*", r"\1***", url, flags=re.IGNORECASE)
