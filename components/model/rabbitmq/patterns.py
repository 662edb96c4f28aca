r"""How RabbitMQ matches a regular expression against a name, one rule for the whole project: a policy's pattern
(``rabbit_policy.erl`` ``matches``), a permission (``rabbit_auth_backend_internal`` ``check_resource_access/4``).

Both are ``re:run(Name, Pattern, [{capture, none}])``: PCRE, unanchored, on the name's bytes (no ``unicode``
option), so a pattern runs here as a bytes regex of its UTF-8. Python's ``re`` on text differs wherever a name is not
ASCII: ``.`` takes one byte of ``é`` (two in UTF-8), so ``^caf.$`` matches ``café`` as text and not on the broker.
Not emulated: OTP builds PCRE with Latin-1 character tables, so on the broker ``\w`` also takes some bytes from 0x80
(a UTF-8 lead byte such as 0xC3 is a Latin-1 letter), where Python's bytes regex takes ASCII only. Python's ``re`` is
not PCRE: a pattern it cannot compile (a PCRE feature it lacks) cannot be evaluated here, and says so (None).
"""

from __future__ import annotations

import re

__all__ = ["compiled_pattern", "erlang_regex", "literal_names", "name_matches", "pattern_matches"]


def compiled_pattern(pattern: str) -> re.Pattern[bytes]:
    """``pattern`` compiled as ``re:run`` runs it: a bytes regex of its UTF-8; ``re.error`` saying what Python cannot
    compile."""
    return re.compile(pattern.encode())


def erlang_regex(pattern: str) -> re.Pattern[bytes] | None:
    """``compiled_pattern``, or None when Python cannot compile it."""
    try:
        return compiled_pattern(pattern)
    except re.error:
        return None


def name_matches(regex: re.Pattern[bytes], name: str) -> bool:
    """``re:run(Name, Pattern, [{capture, none}])`` matches: anywhere in the name's UTF-8 bytes."""
    return regex.search(name.encode()) is not None


def pattern_matches(pattern: str, name: str) -> bool | None:
    """Whether RabbitMQ's ``re:run`` finds ``pattern`` in ``name``; None when it cannot be evaluated here."""
    regex = erlang_regex(pattern)
    return None if regex is None else name_matches(regex, name)


# ``^name$`` or ``^(a|b|c)$`` with nothing but literal characters and escaped punctuation in each name (NServiceBus's
# per-object policies and the stack's combined ones): matched by a lookup of each name instead of a regex run per
# object, which for a thousand endpoints' combined policies is most of verify's work.
_LITERAL = r"(?:[^\\.^$*+?{}\[\]|()]++|\\[^0-9A-Za-z])*+"  # possessive: no backtracking over a long name list
# A literal pattern's pieces: an escaped character (kept without its backslash), a '|' between names, plain text.
_NAME_TOKENS = re.compile(r"\\(.)|(\|)|([^\\|]+)", re.S)
_LITERAL_PATTERNS = (re.compile(rf"\^({_LITERAL})\$"), re.compile(rf"\^\(({_LITERAL}(?:\|{_LITERAL})*+)\)\$"))


def literal_names(pattern: str) -> list[str] | None:
    """The names a ``^name$`` or ``^(a|b)$`` pattern of literals matches (``$`` also before a final newline), each
    unescaped; None for any other pattern."""
    match = next((m for m in (p.fullmatch(pattern) for p in _LITERAL_PATTERNS) if m is not None), None)
    if match is None:
        return None
    names: list[str] = []
    current: list[str] = []
    for escaped, bar, plain in _NAME_TOKENS.findall(match.group(1)):
        if bar:
            names.append("".join(current))
            current = []
        else:
            current.append(escaped or plain)
    names.append("".join(current))
    return names
