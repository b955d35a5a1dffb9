"""Answer forms: the box content every check sees, and the forms real models write (step 9).

``normalise_box`` (protocol step 2) is applied to every box. Each normalisation of
``NORMALISATIONS`` rewrites a prediction's normalised box toward the form the gold answer has:
math delimiters or an answer prefix inside the box, units and degrees, a modular annotation,
digit grouping, a repeating decimal, ``\\pm`` against two roots. ``symbolic.grade_response``
tries them only after the plain check said wrong, in order, each on the previous one's output,
and keeps the first that verifies; the chain is recorded per sample (``grading_normalisation``)
and counted per benchmark (``count_normalisations``). No near miss becomes right: each is
tested on the forms it must not change (``tests/grading/test_answer_forms.py``).
"""

from __future__ import annotations

import re
from fractions import Fraction

# Sentence punctuation a model puts at the end of a box ("\\boxed{2^{10}.}"); a backslash
# before it makes it LaTeX ("\\," is a thin space), so that stays.
_SENTENCE_PUNCTUATION = ".,;:"


def normalise_box(content: str) -> str:
    """The box content math-verify and the exact rule see: surrounding whitespace and newlines
    stripped, trailing sentence punctuation removed (with the whitespace between), ``\\$`` (an
    escaped dollar: a currency sign, text) removed so that it is not taken for a math delimiter.
    One backward scan: a box ending in thousands of dots (degenerate repetition) costs what its
    length does (a rescan per dot took 37 s for 32,000)."""
    s = content.replace("\\$", "").strip()
    end = len(s)
    while end > 1 and s[end - 1] in _SENTENCE_PUNCTUATION and s[end - 2] != "\\":
        end -= 1
        while end > 0 and s[end - 1].isspace():
            end -= 1
    return s[:end]


#: Longest normalised box the step-9 normalisations are tried on. Integer-answer forms are short;
#: the cap also keeps every regex below (some are anchored at the end and searched from each
#: start position) far from quadratic blow-ups on megabyte boxes, and keeps ``int()`` of digit
#: strings under CPython's 4300-digit limit.
NORMALISATION_MAX_CHARS = 500

# LaTeX spacing a model puts between a number and what follows it.
_SP = r"(?:\s|~|\\[,;:! ]|\\quad|\\qquad)"
_TEXT_CMD = r"\\(?:text|textrm|textnormal|mathrm|mbox|operatorname)\s*"


_DELIMITER_PAIRS = (("$$", "$$"), ("$", "$"), ("\\[", "\\]"), ("\\(", "\\)"))
_ANY_DELIMITER = ("$", "\\(", "\\)", "\\[", "\\]")


def _norm_math_delimiters(s: str, gold: str) -> str:
    """Unwrap one pair of math delimiters (``$$...$$``, ``$...$``, ``\\[...\\]``, ``\\(...\\)``)
    around the whole box and drop sentence punctuation inside them (``\\boxed{$42.$}``,
    ``\\boxed{\\(42,\\)}``). Why: a box that carries its own delimiters is not wrapped again, so
    math-verify sees the ``42.`` inside and parses only a fragment (or nothing); punctuation
    outside the delimiters is already removed by :func:`normalise_box`. Only a single pair that
    spans the whole box is removed: ``$3$ and $4$`` stays as it is."""
    for left, right in _DELIMITER_PAIRS:
        if len(s) > len(left) + len(right) and s.startswith(left) and s.endswith(right):
            inner = s[len(left) : len(s) - len(right)]
            if any(d in inner for d in _ANY_DELIMITER):
                return s
            inner = normalise_box(inner)
            return inner if inner else s
    return s


_ANSWER_PREFIX = r"(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:=]?"
_PREFIX_TEXT_ALONE = re.compile(
    r"^\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{\s*"
    + _ANSWER_PREFIX
    + r"\s*\}(?P<rest>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_PREFIX_TEXT_WITH_ANSWER = re.compile(
    r"^\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{\s*"
    + _ANSWER_PREFIX
    + r"\s+(?P<rest>[^{}]+)\}$",
    re.IGNORECASE,
)
_PREFIX_PLAIN = re.compile(
    r"^" + _ANSWER_PREFIX + r"(?![A-Za-z])\s*(?P<rest>.+)$", re.IGNORECASE | re.DOTALL
)


def _norm_answer_prefix(s: str, gold: str) -> str:
    """Drop a leading "The answer is" / "Final answer:" / "Answer:" inside the box, plain or in a
    ``\\text{}`` (``\\boxed{\\text{The answer is } 1\\,000}``). Why: it is sentence text, not part
    of the answer; math-verify copes with it alone, but not combined with another form below, and
    a later normalisation must see the bare answer. Only the prefix goes: what follows it is
    graded as written."""
    for pattern in (_PREFIX_TEXT_ALONE, _PREFIX_TEXT_WITH_ANSWER, _PREFIX_PLAIN):
        m = pattern.match(s)
        if m and m.group("rest").strip():
            return normalise_box(m.group("rest"))
    return s


# Words that make trailing \text{...} a statement rather than a unit ("12 \text{ or more}").
_NOT_UNIT_WORDS = frozenset(
    "or and nor not no is are to plus minus times mod modulo if else otherwise but except than "
    "more less least most at approximately approx about around".split()
)
_UNIT_TAIL = re.compile(
    r"(?:"
    r"°|º|\\degree(?:s)?(?![A-Za-z])"  # 12°, 12\degree
    r"|\^\s*\\circ(?![A-Za-z])|\^\s*\{\s*\\circ\s*\}"  # 12^\circ, 12^{\circ}
    r"|\^\s*\{\s*\\degree\s*\}|\\circ(?![A-Za-z])"
    r"|" + _TEXT_CMD + r"\{\s*(?P<words>[A-Za-z]+(?:[ .~]+[A-Za-z]+){0,2}\.?)\s*\}"  # \text{ cm}
    r"(?:\s*\^\s*(?:[23]|\{\s*[23]\s*\}))?"  # \text{ cm}^2
    r")" + _SP + r"*$"
)
_NUMBER_END = re.compile(r"(?:\d|\})$")


def _norm_units(s: str, gold: str) -> str:
    """Drop degree marks and unit words after a number: ``°``, ``\\degree``, ``^\\circ``,
    ``^{\\circ}``, and up to three words in ``\\text{}``/``\\mathrm{}``/``\\mbox{}`` (``\\text{ cm}``,
    ``\\text{ degrees}``, ``\\text{ cm}^2``). Why: math-verify drops ``^\\circ`` and
    ``\\text{ cm}`` itself but fails on ``°`` and ``\\degree`` (only a fragment parses), and a
    unit after another form (``\\text{ cm}`` after ``1\\,000``) must go before that form is
    fixed. Only a tail after something ending in a digit or ``}`` is removed, the number itself
    is kept (``13°`` is still 13), and text with a connective (``\\text{ or more}``) is not a
    unit."""
    out = s
    for _ in range(4):  # at most a few stacked marks: 12^\circ\text{ C}
        m = _UNIT_TAIL.search(out)
        if not m:
            break
        words = m.group("words")
        if words and any(
            w.lower().strip(".") in _NOT_UNIT_WORDS for w in re.split(r"[ .~]+", words)
        ):
            break
        head = re.sub(_SP + r"+$", "", out[: m.start()]).rstrip()
        if not _NUMBER_END.search(head):
            break
        out = head
    return out


_MOD_TAIL = re.compile(
    _SP + r"*(?P<open>\(|\\left\s*\()?" + _SP + r"*"
    r"(?:\\pmod|\\bmod|\\mod|" + _TEXT_CMD + r"\{\s*(?P<open2>\()?\s*mod\s*\}|(?<![A-Za-z\\])mod)"
    r"(?![A-Za-z])"
    + _SP
    + r"*(?:\{\s*\d+\s*\}|\d+)"
    + _SP
    + r"*(?P<close>\)|\\right\s*\))?"
    + _SP
    + r"*$"
)


def _norm_modulus(s: str, gold: str) -> str:
    """Drop a modular annotation after the answer: ``\\pmod{1000}``, ``\\pmod 1000``,
    ``\\bmod 1000``, ``\\mod 1000``, ``mod 1000``, ``(\\text{mod } 1000)``. Why: AIME asks for a
    remainder and models restate the modulus; math-verify reads ``\\pmod``/``mod`` as a product
    or fails. The number before it is taken literally: the gold is the residue itself, so
    ``1042 \\pmod{1000}`` against 42 stays wrong (the model did not reduce). The modulus must be
    a number, parentheses must pair, and something ending in a digit or ``}`` must remain."""
    m = _MOD_TAIL.search(s)
    if not m:
        return s
    opened = bool(m.group("open")) or bool(m.group("open2"))
    if opened != bool(m.group("close")):
        return s
    head = s[: m.start()].rstrip()
    if not _NUMBER_END.search(head):
        return s
    return head


# One separator kind between digit groups; the backreference keeps it the same throughout.
# Plain spaces around a spacing command are dropped first (_SPACED_SEP), so "1\,000\, 000" has
# one kind of separator.
_SPACED_SEP = re.compile(r"\s*(\\[,;:]|\\thinspace(?![A-Za-z])|\{,\})\s*")
_GROUP_SEP = r"(?P<sep>\\[,;: ]|\\thinspace|\{,\}|~| |'|,)"
_GROUPED_NUMBER = re.compile(
    r"^(?P<lhs>[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*)?(?P<sign>[+-]?)(?P<first>\d{1,3})"
    + _GROUP_SEP
    + r"\d{3}(?:(?P=sep)\d{3})*(?P<frac>\.\d+)?$"
)
_SINGLE_NUMBER = re.compile(r"^\$?\s*[+-]?\d+(?:\.\d+)?\s*\$?$")


def _norm_digit_grouping(s: str, gold: str) -> str:
    """Join digit groups when the whole box is one number written with thousands separators:
    ``1\\,000``, ``1\\ 000``, ``1{,}000``, ``1 000``, ``1~000``, ``12'345``, also after a variable
    (``x = 1\\,000``, kept as written). Why: math-verify reads ``1\\,000`` and ``1 000`` as
    1*000 = 0. The groups must be well-formed (1-3 digits, then groups of exactly three, one
    separator kind throughout), so ``3,75`` or ``1 00`` stay as written.
    A plain comma (``3,375``) is joined only when the gold is a single number, since ``3,375``
    may also be a list; ``3, 375`` (comma and space) is never joined, nor a tuple or interval
    ``(3, 375)``/``[3, 375]`` (brackets do not match)."""
    t = _SPACED_SEP.sub(r"\1", s)
    m = _GROUPED_NUMBER.match(t)
    if not m:
        return s
    if m.group("sep") == "," and not _SINGLE_NUMBER.match(gold):
        return s
    number = t[m.start("first") : m.start("frac") if m.group("frac") else len(t)]
    lhs = m.group("lhs") or ""
    return lhs + m.group("sign") + re.sub(r"\D", "", number) + (m.group("frac") or "")


_REPEATING = re.compile(
    r"(?<![\d.])(?P<int>\d*)\.(?P<fixed>\d*)\\(?:overline|bar)\s*(?:\{\s*(?P<rep>\d+)\s*\}|(?P<rep1>\d))"
    r"(?![\d.])"
)


def _repeating_to_fraction(m: re.Match) -> str:
    whole, fixed = m.group("int") or "0", m.group("fixed")
    rep = m.group("rep") or m.group("rep1")
    n, r = len(fixed), len(rep)
    num = int(fixed + rep) - (int(fixed) if fixed else 0)
    value = Fraction(int(whole)) + Fraction(num, 10**n * (10**r - 1))
    if value.denominator == 1:
        return str(value.numerator)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _norm_repeating_decimal(s: str, gold: str) -> str:
    """Write a repeating decimal as its exact fraction: ``0.\\overline{4}`` -> ``\\frac{4}{9}``,
    ``0.1\\overline{6}`` -> ``\\frac{1}{6}``, ``0.\\bar{3}`` -> ``\\frac{1}{3}``. Why: math-verify
    cannot parse ``\\overline`` on a decimal (only a fragment parses). A decimal point is
    required, so ``\\overline{12}`` (a digit string in number theory) is left alone; the
    fraction is computed exactly with integers (no float, no eval), so a wrong repeating decimal
    (``0.\\overline{5}`` against 4/9) stays wrong."""
    return _REPEATING.sub(_repeating_to_fraction, s)


_PM = re.compile(r"\\(?P<op>pm|mp)(?![A-Za-z])")


def _norm_plus_minus(s: str, gold: str) -> str:
    """Expand one ``\\pm`` (or ``\\mp``) into the list of both roots when the gold lists several
    values: ``\\frac{-1 \\pm \\sqrt{17}}{2}`` -> ``\\frac{-1 + \\sqrt{17}}{2}, \\frac{-1 -
    \\sqrt{17}}{2}``. Why: math-verify handles ``3 \\pm \\sqrt{2}`` itself but cannot parse a
    ``\\pm`` inside a fraction or other group. Both roots must then match the gold list (its
    comparison is of the whole set), so half a root pair, or a ``\\pm`` answer against a single
    gold value, stays wrong. Only a box with exactly one ``\\pm``/``\\mp`` and no comma of its
    own is expanded."""
    if "," in s or len(_PM.findall(s)) != 1:
        return s
    if "," not in gold and not _PM.search(gold):
        return s
    m = _PM.search(s)
    first, second = ("+", "-") if m.group("op") == "pm" else ("-", "+")
    return f"{s[: m.start()]}{first}{s[m.end() :]}, {s[: m.start()]}{second}{s[m.end() :]}"


#: The step-9 normalisations, in the order they are applied (each to the previous one's output).
NORMALISATIONS = (
    ("math_delimiters", _norm_math_delimiters),
    ("answer_prefix", _norm_answer_prefix),
    ("units", _norm_units),
    ("modulus", _norm_modulus),
    ("digit_grouping", _norm_digit_grouping),
    ("repeating_decimal", _norm_repeating_decimal),
    ("plus_minus", _norm_plus_minus),
)
NORMALISATION_NAMES = tuple(name for name, _ in NORMALISATIONS)

# Plain verdicts after which step 9 runs (never after a timeout or an error of our own).
NORMALISABLE_PATHS = ("math_verify", "exact_fallback", "partial_parse")


def count_normalisations(records) -> dict[str, int]:
    """How many verdicts each normalisation changed (False -> True), over graded records.

    ``records``: grading results (dicts with ``normalisation``, or sample rows with
    ``grading_normalisation``), or a DataFrame of either. Every name of ``NORMALISATIONS`` is a
    key (zero if unused); a record whose verdict needed a chain (``"answer_prefix+digit_grouping"``)
    counts once for each name in it. ``sum`` over the values may therefore exceed the number of
    changed verdicts; ``"any"`` holds that number.
    """
    if hasattr(records, "to_dict"):  # a pandas DataFrame
        records = records.to_dict("records")
    counts = dict.fromkeys(NORMALISATION_NAMES, 0)
    changed = 0
    for rec in records:
        chain = rec.get("normalisation", rec.get("grading_normalisation"))
        if not isinstance(chain, str) or not chain:
            continue
        changed += 1
        for name in chain.split("+"):
            counts[name] = counts.get(name, 0) + 1
    counts["any"] = changed
    return counts
